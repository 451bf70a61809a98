"""A stand-in model for 2nChat's support agents (agent_cards/2nchat_*.yaml): the fake OpenAI server with a
responder that plays each agent by its system prompt, so 2nChat runs with no real model.

The router hands refunds and returns to RC2, deliveries to DM2, accounts and payments to 2N (by calling
``route_to``, as a real model would) and answers anything else itself; each worker answers in one sentence.

Run it for the README's quick start (it prints the ``OPENAI_BASE_URL`` to use, and serves until Ctrl-C)::

    python -m tests.fakes.support_chat
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from tests.fakes.openai_server import FakeOpenAIServer, Reply, ResponseSpec, ToolCall

__all__ = ["ANSWERS", "support_chat"]

ROUTES = {
    "RC2": ("refund", "return", "exchange", "broken"),
    "DM2": ("deliver", "parcel", "where is"),
    "2N": ("invoice", "charge", "password", "sign in"),
}
ANSWERS = {
    "returns and complaints": "You can return the item within 30 days of delivery; the refund reaches your card "
    "within 5 working days of the return arriving.",
    "delivery agent": "Standard delivery takes 2 to 4 working days; send me the order number and I will look it up.",
    "accounts and payments": "I can help with that: invoices are under Orders in your account.",
}
GREETING = "Hello! I am the support desk. Ask me about a return, a delivery or a payment."


def _last_user(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return str(m.get("content") or "")
    return ""


def support_chat(body: dict[str, Any]) -> ResponseSpec:
    """Answer one chat request as the agent its system prompt describes."""
    messages = body.get("messages") or []
    system = str(messages[0].get("content") or "") if messages else ""
    tools = [t.get("function", {}).get("name") for t in body.get("tools") or []]
    asked = _last_user(messages).lower()
    if "front desk" in system:
        if "route_to" in tools:
            for route, words in ROUTES.items():
                if any(w in asked for w in words):
                    return Reply(tool_calls=[ToolCall("route_to", {"next": route})])
        return GREETING
    for role, answer in ANSWERS.items():
        if role in system:
            return answer
    return "I am a stand-in model: I only play 2nChat's support agents."


def main() -> None:
    """Serve the stand-in model until Ctrl-C."""
    with FakeOpenAIServer(responder=support_chat) as server:
        print(f"OPENAI_BASE_URL={server.base_url} A2AMESH_LLM_MODEL=fake-model", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait()


if __name__ == "__main__":
    main()
