"""Graph workflows (SPEC §6) over real NATS + Valkey: the seed's 2nChat with scripted agents."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from a2amesh.client import Client, make_message
from a2amesh.protocol import TaskState
from tests.support.waiting import within

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"


def _said(input: dict[str, Any]) -> list[str]:
    return [str(m.get("name")) for m in input["messages"] if m.get("role") == "assistant"]


async def router(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    said = _said(input)
    if "RC2" not in said:
        return {"next": "RC2", "message": "to RC2"}
    if "externalSearchCaller" not in said:
        return {"next": "externalSearchCaller", "message": "search please"}
    if "DM2" not in said:
        return {"next": "DM2", "message": "to DM2"}
    return {"next": "END", "message": "all done"}


async def rc2(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {
        "next": "tool_executor",
        "message": "looking up",
        "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}],
    }


async def dm2(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"next": "Router", "message": "dm2 says hi"}


async def searcher(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    if input["messages"][-1].get("role") == "tool":
        return {
            "next": "tool_executor",
            "message": "again",
            "tool_calls": [{"id": "c3", "name": "lookup", "arguments": {}}],
        }
    return {
        "next": "tool_executor",
        "message": "searching",
        "tool_calls": [{"id": "c2", "name": "external_research", "arguments": {"q": "y"}}],
    }


async def tool(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"found": input}


async def test_2nchat_visits_router_workers_tools_and_ends(
    agent_host: Any, executor: Any, client: Client, tmp_path: Path
) -> None:
    """2nChat runs router → RC2 → tools (ALWAYS) → router → search → tools (per-tool route) → … → END."""
    for name, fn in {
        "agent-uuid-router": router,
        "agent-uuid-rc2": rc2,
        "agent-uuid-dm2": dm2,
        "agent-uuid-external-search": searcher,
        "lookup": tool,
        "external_research": tool,
    }.items():
        await agent_host(name, fn)
    folder = tmp_path / "graphs"
    folder.mkdir()
    shutil.copy(WORKFLOWS / "2nchat_with_search.json", folder)
    await executor(folder)
    card = await client.registry.wait_for("2nChatWithSearch", 5)
    assert card.agent_type == "workflow"
    task = await within(client.send("2nChatWithSearch", make_message("hello")), 20, "the 2nChat answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == "all done"


async def test_seed_2nchat_undefined_edge_fails_naming_it(
    agent_host: Any, executor: Any, client: Client, tmp_path: Path
) -> None:
    """The unchanged seed file taking edge-uuid-15 to the undefined node-uuid-6 fails naming the edge."""

    async def to_search(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"next": "externalSearchCaller", "message": "search"}

    await agent_host("agent-uuid-router", to_search)
    folder = tmp_path / "seed"
    folder.mkdir()
    shutil.copy(WORKFLOWS / "2nchat.json", folder)
    await executor(folder)
    await client.registry.wait_for("2nChat", 5)
    task = await within(client.send("2nChat", make_message("hi")), 20, "the failure")
    assert task.status.state == TaskState.FAILED
    text = task.status.message.text() if task.status.message else ""
    assert "edge-uuid-15" in text
    assert "node-uuid-6" in text
