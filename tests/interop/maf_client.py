"""Microsoft Agent Framework's ``A2AAgent`` calls an agent or workflow through our gateway; prints one JSON line: per
turn, what the agent framework handed back and the A2A state it keeps in its session. Run with the Python of the
Agent Framework virtualenv: ``python maf_client.py CARD_URL BINDING MODE TEXT [TEXT …]``.

BINDING is the transport ``A2AAgent`` is told to use (``JSONRPC`` or ``HTTP+JSON``); MODE is ``stream`` (its
``run(stream=True)``: each update as the A2A stream delivers it) or ``blocking`` (``run()``: one answer). Each TEXT
is one turn of the same ``AgentSession``: after an ``INPUT_REQUIRED`` the framework sends the next turn with the
paused task's id (and the session's context id), so the turn continues that task. The card is read with the
a2a-sdk's ``A2ACardResolver``, as the framework's samples do. Not imported by the suite."""

import asyncio
import json
import sys
from typing import Any

import httpx
from a2a.client import A2ACardResolver
from a2a.types import TaskState
from agent_framework import AgentResponseUpdate, AgentSession
from agent_framework_a2a import A2AAgent


def shown(update: AgentResponseUpdate, event: str) -> dict[str, Any]:
    """One update as the framework's user sees it: its texts, whether it asks the user, the A2A event behind it."""
    return {
        "event": event,
        "texts": [c.text for c in update.contents if c.text],
        "asks_user": [c.text for c in update.user_input_requests],
    }


def state(session: AgentSession) -> dict[str, Any]:
    """The A2A ids and state the framework keeps in the session (it links the next turn to them)."""
    kept = session.service_session_id
    if not isinstance(kept, dict):
        return {"kept": repr(kept)}
    task_state = kept.get("task_state")
    name = TaskState.Name(task_state) if isinstance(task_state, int) else None
    return {"context_id": kept.get("context_id"), "task_id": kept.get("task_id"), "task_state": name}


async def main() -> None:
    card_url, binding, mode, *texts = sys.argv[1:]
    base, _, path = card_url.partition("/.well-known/")
    async with httpx.AsyncClient(timeout=60) as http:
        card = await A2ACardResolver(http, base, agent_card_path=f"/.well-known/{path}").get_agent_card()
        agent = A2AAgent(agent_card=card, http_client=http, supported_protocol_bindings=[binding])
        session = agent.create_session()
        turns: list[dict[str, Any]] = []
        for text in texts:
            if mode == "stream":
                said = [
                    shown(u, type(u.raw_representation).__name__)
                    async for u in agent.run(text, stream=True, session=session)
                ]
            else:
                response = await agent.run(text, session=session)
                said = [shown(AgentResponseUpdate(contents=m.contents), "response") for m in response.messages]
            turns.append({"said": said, "session": state(session)})
    print(json.dumps({"turns": turns}), flush=True)


asyncio.run(main())
