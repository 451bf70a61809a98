"""The MCP server over streamable HTTP (the gateway's ``/mcp``) with the official ``mcp`` client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from tests.support.mcp import ADD_INPUT, ADD_OUTPUT, Seen, Sleeper, add, approve_with, mcp_http, start_mesh, text_of
from tests.support.waiting import eventually, within

KEYS = "admin=adm1n-secret,reader=r3ader-secret#read,adder=add3r-secret@add#run|read,runner=runn3r-secret#run|read"


@pytest.fixture
async def sleeper(agent_host: Any, executor: Any, client: Client) -> Sleeper:
    return await start_mesh(agent_host, executor, client)


@pytest.fixture
async def url(sleeper: Sleeper, gateway: Any) -> str:
    return str(await gateway(api_keys=parse_api_keys(KEYS)))


async def test_tools_match_the_cards(url: str, client: Client) -> None:
    """Every exposed agent and workflow is a tool with the card's schemas; mcp_export=false hides one."""
    async with mcp_http(url, "adm1n-secret") as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
    assert {"add", "total", "refund", "slow_flow", "get_run", "cancel_run", "resume_run"} <= set(tools)
    assert "propose" not in tools
    assert "pay" not in tools
    assert tools["add"].input_schema == ADD_INPUT
    assert tools["add"].output_schema == ADD_OUTPUT
    assert tools["add"].description
    assert tools["add"].description.startswith("Adds x and y")
    card = client.registry.get("total")
    assert card is not None
    assert tools["total"].input_schema == card.input_schema
    assert tools["total"].output_schema == card.output_schema
    assert tools["sleeper"].input_schema["required"] == ["text"]


async def test_call_agent_and_workflow_with_structured_output_and_progress(url: str) -> None:
    """A Python agent and a workflow answer with structured content; their status updates arrive as progress."""
    seen = Seen()
    async with mcp_http(url, "adm1n-secret") as mcp:
        result = await within(mcp.call_tool("add", {"x": 2, "y": 3}, progress_callback=seen.on_progress), 20, "add")
        assert not result.is_error, result.content
        assert result.structured_content == {"sum": 5}
        assert result.meta is not None
        assert result.meta["a2amesh/agent"] == "add"
        assert any(m == "adding" for _, m in seen.progress), seen.progress
        seen.progress.clear()
        flow = await within(mcp.call_tool("total", {"x": 4, "y": 5}, progress_callback=seen.on_progress), 20, "total")
        assert not flow.is_error, flow.content
        assert flow.structured_content == {"total": 9}
        assert any(m and m.startswith("node.started a") for _, m in seen.progress), seen.progress
        steps = [p for p, _ in seen.progress]
        assert steps == sorted(steps)
        assert len(set(steps)) == len(steps)


async def test_bad_arguments_and_unknown_tool_are_tool_errors(url: str) -> None:
    """A schema violation names the field and the rule; an unknown tool is a tool error; the server serves on."""
    async with mcp_http(url, "adm1n-secret") as mcp:
        bad = await mcp.call_tool("add", {"x": "a", "y": 1})
        assert bad.is_error
        text = text_of(bad)
        assert "x: 'a' is not of type 'number'" in text
        missing = await mcp.call_tool("total", {"x": 1})
        assert missing.is_error
        assert "'y' is a required property" in text_of(missing)
        unknown = await mcp.call_tool("ad", {})
        assert unknown.is_error
        assert "unknown tool 'ad' (did you mean 'add'?)" in text_of(unknown)
        ok = await mcp.call_tool("add", {"x": 1, "y": 1})
        assert ok.structured_content == {"sum": 2}


async def test_review_is_answered_through_elicitation(url: str) -> None:
    """A paused review becomes an elicitation; approving it resumes the run to its output."""
    answer = approve_with({"decision": "approve"})
    async with mcp_http(url, "adm1n-secret", elicitation_callback=answer) as mcp:
        result = await within(mcp.call_tool("refund", {"amount": 30}), 30, "the reviewed refund")
    assert not result.is_error, result.content
    assert result.structured_content == {"paid": 30}
    (asked,) = answer.asked
    assert isinstance(asked, types.ElicitRequestFormParams)
    assert asked.message.startswith("Refund 30?")
    assert asked.requested_schema["properties"]["decision"]["enum"] == ["approve", "edit", "reject"]
    assert asked.requested_schema["properties"]["amount"]["default"] == 30


def answers(*contents: dict[str, Any]) -> Any:
    """An elicitation callback giving ``contents`` in turn; records what it was asked."""
    asked: list[types.ElicitRequestParams] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content=contents[min(len(asked), len(contents)) - 1])

    answer.asked = asked  # type: ignore[attr-defined]
    return answer


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_review_edit_is_checked_by_edit_schema(url: str, mode: str) -> None:
    """An edit refused by edit_schema is asked again with the refusal; a valid edit resumes the run with it.

    ``auto`` speaks 2026-07-28 (the form travels in an InputRequiredResult), ``legacy`` the handshake era
    (the server sends elicitation/create while the call is open).
    """
    answer = answers({"decision": "edit", "amount": 500}, {"decision": "edit", "amount": 20, "reason": "cap"})
    async with mcp_http(url, "adm1n-secret", elicitation_callback=answer, mode=mode) as mcp:
        result = await within(mcp.call_tool("refund", {"amount": 30}), 30, "the edited refund")
    assert not result.is_error, result.content
    assert result.structured_content == {"paid": 20}
    first, second = answer.asked
    assert "refused" not in first.message
    assert second.message.startswith("Your last answer was refused:")
    assert "amount: 500 is greater than the maximum of 100" in second.message


async def test_review_without_elicitation_pauses_and_resume_run_answers(url: str) -> None:
    """A client without elicitation gets the paused run's id and how to resume; resume_run and get_run work."""
    async with mcp_http(url, "adm1n-secret") as mcp:
        paused = await within(mcp.call_tool("refund", {"amount": 40}), 30, "the paused refund")
        assert paused.is_error
        assert paused.meta is not None
        run_id = paused.meta["a2amesh/run_id"]
        text = text_of(paused)
        assert f"run {run_id} of refund is paused for a human review at 'review': Refund 40?" in text
        assert "resume_run" in text
        got = await mcp.call_tool("get_run", {"run_id": run_id})
        assert got.structured_content is not None
        assert got.structured_content["status"] == "paused"
        assert got.structured_content["review"]["data"] == {"amount": 40}
        bad = await mcp.call_tool("resume_run", {"run_id": run_id, "decision": "edit", "data": {"amount": 101}})
        assert bad.is_error
        assert "amount: 101 is greater than the maximum of 100" in text_of(bad)
        done = await within(mcp.call_tool("resume_run", {"run_id": run_id, "decision": "approve"}), 30, "resume")
        assert not done.is_error, done.content
        assert done.structured_content == {
            "run_id": run_id,
            "agent": "refund",
            "status": "completed",
            "output": {"paid": 40},
        }


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_cancelling_the_call_cancels_the_execution(
    url: str, sleeper: Sleeper, redis: Any, settings: Settings, mode: str
) -> None:
    """The client cancelling a tools/call cancels the workflow's task: the execution ends canceled in the store
    and the node's running agent is stopped."""
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=settings.lease_ttl)
    async with mcp_http(url, "adm1n-secret", mode=mode) as mcp:
        call = asyncio.create_task(mcp.call_tool("slow_flow", {"text": "wait"}))
        await within(sleeper.started.wait(), 20, "the workflow's node to start the sleeper")
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        await within(sleeper.cancelled.wait(), 20, "the sleeper to be cancelled")

        async def canceled() -> bool:
            runs = await store.list(workflow="slow_flow")
            return len(runs) == 1 and runs[0].get("status") == "canceled"

        await eventually(canceled, timeout=20, what="the slow_flow execution to be canceled in the store")
        still = await mcp.call_tool("add", {"x": 1, "y": 2})
        assert still.structured_content == {"sum": 3}
    await store.aclose()


async def test_tools_follow_the_cards_with_list_changed(url: str, agent_host: Any) -> None:
    """A new agent becomes a tool and a stopped one goes; 2026-07-28 listeners and handshake-era sessions are
    both told (tools/list_changed)."""
    legacy_seen = Seen()
    async with (
        mcp_http(url, "adm1n-secret") as modern,
        mcp_http(url, "adm1n-secret", mode="legacy", message_handler=legacy_seen.on_message) as legacy,
        modern.listen(tools_list_changed=True) as events,
    ):
        assert "late" not in {t.name for t in (await legacy.list_tools()).tools}
        host = await agent_host("late", add, input_schema=ADD_INPUT, output_schema=ADD_OUTPUT)
        await within(events.__anext__(), 15, "a tools list_changed event on the listen stream")
        await within(legacy_seen.tools_changed.wait(), 15, "notifications/tools/list_changed on the legacy session")
        assert "late" in {t.name for t in (await modern.list_tools()).tools}
        assert "late" in {t.name for t in (await legacy.list_tools()).tools}
        called = await legacy.call_tool("late", {"x": 2, "y": 2})
        assert called.structured_content == {"sum": 4}
        legacy_seen.tools_changed.clear()
        await host.shutdown()
        await within(events.__anext__(), 15, "a list_changed event when the agent stops")
        await within(legacy_seen.tools_changed.wait(), 15, "list_changed on the legacy session when it stops")
        assert "late" not in {t.name for t in (await modern.list_tools()).tools}


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "arguments": {"x": 1, "y": 1}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_keys_and_scopes(url: str) -> None:
    """No or a wrong key is 401; a key without 'run' calling a tool is 403; allow-lists narrow the tools."""
    async with httpx.AsyncClient(timeout=10) as http:
        none = await http.post(f"{url}/mcp", json=INITIALIZE, headers=MCP_HEADERS)
        assert none.status_code == 401
        assert none.headers["WWW-Authenticate"].startswith("Bearer")
        assert "an API key is required" in none.json()["error"]["message"]
        wrong = await http.post(f"{url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "X-API-Key": "nope"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["message"] == "the API key is not valid"
        reader = {**MCP_HEADERS, "Authorization": "Bearer r3ader-secret"}
        denied = await http.post(f"{url}/mcp", json=CALL, headers=reader)
        assert denied.status_code == 403
        assert denied.json()["error"]["message"] == "API key 'reader' lacks the 'run' scope tool 'add' needs"
        ok = await http.post(f"{url}/mcp", json=INITIALIZE, headers=reader)
        assert ok.status_code == 200
        huge = await http.post(f"{url}/mcp", content=b"[" + b" " * 800_000 + b"]", headers=reader)
        assert huge.status_code == 413
        admin = {**MCP_HEADERS, "Authorization": "Bearer adm1n-secret"}
        opened = await http.post(f"{url}/mcp", json=INITIALIZE, headers=admin)
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        listing = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
        own = await http.post(f"{url}/mcp", json=listing, headers={**admin, **session})
        assert own.status_code == 200
        other = await http.post(f"{url}/mcp", json=listing, headers={**reader, **session})
        assert other.status_code == 404, "a session is bound to the key that opened it"
    async with mcp_http(url, "r3ader-secret") as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert {"list_agents", "get_agent", "get_run"} <= names
        assert not names & {"add", "total", "cancel_run", "resume_run"}
        agents = await mcp.call_tool("list_agents", {"type": "workflow"})
        assert agents.structured_content is not None
        assert {a["name"] for a in agents.structured_content["agents"]} == {"total", "refund", "slow_flow"}
    async with mcp_http(url, "add3r-secret") as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert "add" in names
        assert "total" not in names
        refused = await mcp.call_tool("total", {"x": 1, "y": 2})
        assert refused.is_error
        assert text_of(refused) == "API key 'adder' is not allowed to call 'total'"
        assert (await mcp.call_tool("add", {"x": 1, "y": 2})).structured_content == {"sum": 3}


async def test_dns_rebinding_protection_follows_the_gateway_address(url: str) -> None:
    """On a loopback gateway an unknown Host is refused (421) and a local name is served."""
    port = url.rsplit(":", 1)[1]
    headers = {**MCP_HEADERS, "Authorization": "Bearer adm1n-secret"}
    async with httpx.AsyncClient(timeout=10) as http:
        evil = await http.post(f"{url}/mcp", json=INITIALIZE, headers={**headers, "Host": "evil.example"})
        assert evil.status_code == 421
        local = await http.post(f"{url}/mcp", json=INITIALIZE, headers={**headers, "Host": f"localhost:{port}"})
        assert local.status_code == 200


async def test_large_output_is_a_resource_link_readable_by_resources_read(
    url: str, agent_host: Any, settings: Settings
) -> None:
    """An output stored as an artifact comes back as a resource link (and as structured content); reading the
    link returns the stored JSON; an unknown URI is a precise error."""

    async def big(input: Any, ctx: Any) -> dict[str, Any]:
        return {"blob": "x" * 5000}

    await agent_host("big", big, settings=settings.model_copy(update={"inline_threshold": 1024}))
    async with mcp_http(url, "adm1n-secret") as mcp:
        result = await within(mcp.call_tool("big", {"text": "go"}), 20, "big")
        assert not result.is_error, result.content
        (link,) = [c for c in result.content if isinstance(c, types.ResourceLink)]
        assert link.uri.startswith(f"artifact://{settings.namespace}/")
        assert result.structured_content == {"blob": "x" * 5000}
        read = await mcp.read_resource(link.uri)
        (contents,) = read.contents
        assert isinstance(contents, types.TextResourceContents)
        assert json.loads(contents.text) == {"blob": "x" * 5000}
        assert link.uri in {str(r.uri) for r in (await mcp.list_resources()).resources}
        with pytest.raises(MCPError, match="cannot read 'artifact://"):
            await mcp.read_resource(f"artifact://{settings.namespace}/c/t/missing")


async def test_run_tools_get_agent_and_cancel_run(url: str, sleeper: Sleeper, client: Client) -> None:
    """get_agent returns the card; cancel_run cancels a workflow run found by its id alone; errors are precise."""
    run = await client.dispatch("slow_flow", make_message("wait"))
    await within(sleeper.started.wait(), 20, "the sleeper to start")
    async with mcp_http(url, "adm1n-secret") as mcp:
        card = await mcp.call_tool("get_agent", {"name": "total"})
        assert card.structured_content is not None
        assert card.structured_content["name"] == "total"
        assert card.structured_content["description"] == "Adds two numbers through the add agent"
        missing = await mcp.call_tool("get_agent", {"name": "nobody"})
        assert missing.is_error
        assert text_of(missing).startswith("no live agent or workflow named 'nobody'")
        running = await mcp.call_tool("get_run", {"run_id": run.task_id})
        assert running.structured_content is not None
        assert running.structured_content["status"] == "running"
        canceled = await within(mcp.call_tool("cancel_run", {"run_id": run.task_id}), 20, "cancel_run")
        assert canceled.structured_content is not None
        assert {k: canceled.structured_content[k] for k in ("run_id", "agent", "status")} == {
            "run_id": run.task_id,
            "agent": "slow_flow",
            "status": "cancelled",
        }
        await within(sleeper.cancelled.wait(), 20, "the sleeper to be cancelled")
        unknown = await mcp.call_tool("get_run", {"run_id": "no-such-run"})
        assert unknown.is_error
        assert "run 'no-such-run' is no workflow execution known to this mesh" in text_of(unknown)


async def test_a_failing_agent_is_a_tool_error_with_its_message(url: str, agent_host: Any) -> None:
    """An agent's failure comes back as isError with the agent's own message, and the run id."""

    async def broken(input: Any, ctx: Any) -> Any:
        raise ValueError("the ledger is closed")

    await agent_host("broken", broken, max_retries=0)
    async with mcp_http(url, "adm1n-secret") as mcp:
        result = await within(mcp.call_tool("broken", {"text": "go"}), 20, "broken")
    assert result.is_error
    text = text_of(result)
    assert text.startswith("broken failed (run ")
    assert "the ledger is closed" in text
    assert result.meta is not None
    assert result.meta["a2amesh/state"] == "TASK_STATE_FAILED"


async def test_rate_limit_applies_to_mcp(sleeper: Sleeper, gateway: Any) -> None:
    """The gateway's per-key rate limit covers /mcp too (429 with Retry-After)."""
    url = await gateway(api_keys=parse_api_keys(KEYS), rate_limit=0.1, rate_burst=1)
    headers = {**MCP_HEADERS, "Authorization": "Bearer adm1n-secret"}
    async with httpx.AsyncClient(timeout=10) as http:
        first = await http.post(f"{url}/mcp", json=INITIALIZE, headers=headers)
        assert first.status_code == 200
        second = await http.post(f"{url}/mcp", json=INITIALIZE, headers=headers)
        assert second.status_code == 429
        assert int(second.headers["Retry-After"]) >= 1


async def test_answering_a_review_needs_the_review_scope(url: str) -> None:
    """A key that may run but not review gets the paused run back, and its client is never asked; a forged
    requestState is a precise tool error."""
    answer = approve_with({"decision": "approve"})
    async with mcp_http(url, "runn3r-secret", elicitation_callback=answer) as mcp:
        paused = await within(mcp.call_tool("refund", {"amount": 5}), 30, "the paused refund")
        assert paused.is_error
        assert "(not answered here: this key lacks the 'review' scope)" in text_of(paused)
        assert answer.asked == []
    async with mcp_http(url, "adm1n-secret") as mcp:
        forged = await mcp.call_tool("refund", {"amount": 5}, request_state="{not json", input_responses={})
        assert forged.is_error
        assert text_of(forged).startswith("requestState is not one this server made")
