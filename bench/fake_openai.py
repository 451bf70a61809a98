"""The benchmark's fake OpenAI-compatible model, run as its own process: ``python bench/fake_openai.py``.

It is ``tests/fakes/openai_server.py`` (the real ``openai`` client talks to it over HTTP) with a
responder that answers every node call of an LLM agent in two model turns, like SAM's fake model in
``shared/bench/sam/fake_llm.py``: first a ``save_artifact`` tool call (a small JSON result), then the
text ``«result:artifact=NAME status=success»`` naming that artifact; a request without tools (an ``llm``
node's) is answered ``ok`` in one turn. It prints ``BASE_URL <url>`` and
serves until it is terminated.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall, Usage


def respond(body: dict[str, Any]) -> Reply:
    """Turn 1: save the artifact; turn 2 (a tool result follows the call): the result embed. A request that
    offers no tools (an ``llm`` workflow node's) gets a text at once: one turn."""
    if not body.get("tools"):
        return Reply("ok", usage=Usage(20, 2))
    messages = body.get("messages") or []
    for msg in reversed(messages):
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            args = json.loads(msg["tool_calls"][0]["function"]["arguments"])
            return Reply(f"«result:artifact={args['name']} status=success»", usage=Usage(40, 8))
    name = f"out-{uuid.uuid4().hex[:8]}.json"
    return Reply(
        tool_calls=[ToolCall("save_artifact", {"name": name, "content": {"ok": True, "turns": 2}})],
        usage=Usage(30, 12),
    )


def main() -> None:
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with FakeOpenAIServer(responder=respond) as llm:
        print(f"BASE_URL {llm.base_url}", flush=True)
        done.wait()


if __name__ == "__main__":
    main()
