"""A Google ADK agent served over A2A with ADK's own ``to_a2a`` (no model: a custom ``BaseAgent`` that answers
``echo: <the user's text>``). Run with the Python of the ADK virtualenv: ``python adk_server.py PORT``."""

import sys
from collections.abc import AsyncGenerator

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a
from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.genai import types


class Echo(BaseAgent):  # type: ignore[misc]  # ADK is not installed where mypy runs
    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        said = " ".join(p.text or "" for p in (ctx.user_content.parts or [])) if ctx.user_content else ""
        yield Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            content=types.Content(role="model", parts=[types.Part(text=f"echo: {said.strip()}")]),
        )


port = int(sys.argv[1])
app = to_a2a(Echo(name="adk_echo", description="An ADK agent over A2A"), host="127.0.0.1", port=port)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
