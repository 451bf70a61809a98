"""What the MCP tests share: the agents and workflows of the mesh under test, and MCP clients over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.support.refund import pay, propose, refund_workflow

ADD_INPUT = {
    "type": "object",
    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
    "required": ["x", "y"],
}
ADD_OUTPUT = {"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]}


async def add(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    await ctx.emit_status("adding")
    return {"sum": input["x"] + input["y"]}


TOTAL = """
name: total
description: Adds two numbers through the add agent
input_schema: {type: object, properties: {x: {type: number}, y: {type: number}}, required: [x, y]}
output_schema: {type: object, properties: {total: {type: number}}, required: [total]}
nodes:
  - {id: a, type: agent, agent_name: add, input: {x: "{{workflow.input.x}}", y: "{{workflow.input.y}}"}}
output_mapping: {total: "{{a.output.sum}}"}
"""

REFUND = refund_workflow(
    header=(
        "description: Proposes a refund, asks a human, pays it\n"
        "input_schema: {type: object, properties: {amount: {type: number}}, required: [amount]}\n"
        "output_schema: {type: object, properties: {paid: {type: number}}, required: [paid]}\n"
    )
)

SLOW = """
name: slow_flow
description: Waits on the sleeper agent
nodes:
  - {id: wait, type: agent, agent_name: sleeper}
"""


@dataclass
class Sleeper:
    """An agent that sleeps until cancelled, recording that it started and that it was cancelled."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, input: Any, ctx: Any) -> Any:
        self.started.set()
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return {}


async def start_mesh(agent_host: Any, executor: Any, client: Any) -> Sleeper:
    """The agents and workflows every MCP test talks to; returns the sleeper (for cancel tests)."""
    sleeper = Sleeper()
    await agent_host("add", add, input_schema=ADD_INPUT, output_schema=ADD_OUTPUT, description="Adds x and y")
    await agent_host("propose", propose, mcp_export=False)
    await agent_host("pay", pay, mcp_export=False)
    await agent_host("sleeper", sleeper)
    await executor({"total": TOTAL, "refund": REFUND, "slow_flow": SLOW})
    for name in ("total", "refund", "slow_flow"):
        await client.registry.wait_for(name, 10)
    return sleeper


@dataclass
class Seen:
    """What the client was told: progress notifications and tools/list_changed."""

    progress: list[tuple[float, str | None]] = field(default_factory=list)
    tools_changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, message))

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_changed.set()


def approve_with(content: dict[str, Any]) -> Any:
    """An elicitation callback accepting with ``content``; records the requests it answered."""
    asked: list[types.ElicitRequestParams] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content=content)

    answer.asked = asked  # type: ignore[attr-defined]
    return answer


def text_of(result: types.CallToolResult) -> str:
    """The text of a tool result's first content block (which must be text)."""
    first = result.content[0]
    assert isinstance(first, types.TextContent), first
    return first.text


@contextlib.asynccontextmanager
async def mcp_http(url: str, key: str | None = None, *, path: str = "/mcp", **options: Any) -> AsyncIterator[McpClient]:
    """An MCP client of the gateway's ``/mcp`` (or another ``path``) with an API key."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        async with McpClient(streamable_http_client(f"{url}{path}", http_client=http), **options) as client:
            yield client
