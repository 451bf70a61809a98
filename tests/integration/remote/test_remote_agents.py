"""Remote A2A agents as members of the mesh: a stock a2a-sdk server (1.0 JSON-RPC, HTTP+JSON, and 0.3) behind the
proxy (``a2amesh.remote``), called like any agent, as a node of a DAG workflow, with streaming, input-required,
cancel, files, failures, bad cards, auth and retries. Everything on localhost, real servers and clients."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from a2amesh.bus.nats import Bus
from a2amesh.client import Client, TokenDelta, make_message
from a2amesh.config import Settings
from a2amesh.errors import RemoteError
from a2amesh.mcp_server.catalog import tools_of
from a2amesh.mcp_server.settings import McpSettings
from a2amesh.protocol import TaskState
from a2amesh.provision import make_certificates
from a2amesh.remote.cards import fetch_card
from a2amesh.remote.http import make_http_client
from a2amesh.remote.service import RemoteWorker
from a2amesh.remote.spec import parse_remote
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall
from tests.integration.agent.test_llm_agent import tool_messages
from tests.support.nodes import llm_agent
from tests.support.stock_a2a import StockServer, stock_server, stop_stock_server
from tests.support.waiting import eventually, within

__all__ = ["stock_server"]


@pytest.fixture
async def remote(bus: Bus, redis: Redis, settings: Settings) -> AsyncIterator[Any]:
    """Start in-process proxies (``RemoteWorker``) of ``remote:`` declarations; ``ready=False`` returns at once."""
    started: list[tuple[RemoteWorker, asyncio.Event, asyncio.Task[None]]] = []

    async def start(ready: bool = True, **declared: Any) -> RemoteWorker:
        declared.setdefault("backoff", 0.05)
        spec = parse_remote({"remote": declared}, "test")
        worker = RemoteWorker(spec, source="test", bus=bus, redis=redis, settings=settings)
        stop = asyncio.Event()
        if ready:
            task = await worker.start(stop, limit=15)
        else:
            task = asyncio.create_task(worker.run_until(stop))
        started.append((worker, stop, task))
        return worker

    yield start
    for _, stop, _ in started:
        stop.set()
    for _, _, task in started:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)


async def test_card_published_marked_remote(stock_server: Any, remote: Any, client: Client) -> None:
    """The remote's card reaches the registry under its mesh name: skills, description and version carried over,
    marked remote with its URL; without a name, the card's name made a mesh name."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock")
    await remote(url=stock.url + "/.well-known/agent-card.json")
    card = await client.registry.wait_for("stock", 5)
    assert card.remote_url == stock.url
    assert card.agent_type == "agent"
    assert [s.id for s in card.skills] == ["echo"]
    assert card.description == "A stock a2a-sdk agent"
    assert card.version == "3.1.0"
    named = await client.registry.wait_for("Stock-Agent", 5)
    assert named.remote_url == stock.url + "/.well-known/agent-card.json"


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
async def test_forward_data_both_bindings(stock_server: Any, remote: Any, client: Client, transport: str) -> None:
    """A task is forwarded over the binding asked for; data goes out and comes back, integers as integers."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock", transport=transport)
    task = await within(client.send("stock", {"x": 1, "tags": ["a"]}), 15, "the remote's answer")
    assert task.status.state == TaskState.COMPLETED, task.status.message and task.status.message.text()
    output = task.output()
    assert output == {"echo": {"x": 1, "tags": ["a"]}, "n": 2}
    assert isinstance(output["n"], int)
    paths = [r[":path"] for r in stock.requests]
    assert ("/rpc" if transport == "JSONRPC" else "/rest/message:stream") in paths, paths


async def test_stream_progress_and_deltas(stock_server: Any, remote: Any, client: Client, bus: Bus) -> None:
    """A streaming call sees the remote's working status as progress and its text chunks as token deltas; the
    final output is the whole text. Deltas travel on core NATS, best effort, beside the durable final: the
    call's iterator ends at the final and may miss the last ones, so every delta is checked on its subject."""
    sent: list[str] = []

    async def on_delta(msg: Any) -> None:
        sent.append(json.loads(msg.data)["text"])

    await bus.subscribe(bus.subjects.delta(client.instance, "*", "*"), on_delta)
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock")
    call = await client.dispatch("stock", make_message("chunks please"), stream=True, deltas=True)
    events = [e async for e in call.events_and_deltas()]
    deltas = "".join(e.text for e in events if isinstance(e, TokenDelta))
    assert "hello world".startswith(deltas), f"the deltas the call saw are out of order: {deltas!r}"
    await eventually(lambda: "".join(sent) == "hello world" or None, timeout=5, what=f"every text delta (got {sent!r})")
    progress = [
        e.status_update.status.message.text()
        for e in events
        if not isinstance(e, TokenDelta) and e.status_update is not None and e.status_update.status.message
    ]
    assert "on it" in progress
    assert call.task is not None
    assert call.task.output() == "hello world"


async def test_input_required_then_continuation(stock_server: Any, remote: Any, client: Client) -> None:
    """INPUT_REQUIRED comes back with the remote's question; the continuation goes to the same remote task."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock")
    task = await within(client.send("stock", "ask me"), 15, "the question")
    assert task.status.state == TaskState.INPUT_REQUIRED, task.status
    assert task.status.message is not None
    assert task.status.message.text() == "what is your name?"
    answer = make_message("Ada", task_id=task.id, context_id=task.context_id)
    done = await within(client.send("stock", answer), 15, "the answer")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == "hello Ada"
    first, second = stock.agent.task_ids
    assert first == second  # the continuation went to the remote task that asked
    assert stock.agent.inputs[1].get("taskId") == first


async def test_cancel_is_forwarded(stock_server: Any, remote: Any, client: Client) -> None:
    """CancelTask on the mesh stops the forward and sends CancelTask to the remote."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock")
    call = await client.dispatch("stock", make_message("slow"))
    await within(stock.agent.started.wait(), 15, "the remote to start the task")
    canceled = await client.cancel_task("stock", call.task_id)
    assert canceled.status.state == TaskState.CANCELED
    await eventually(lambda: stock.agent.cancels, timeout=10, what="the remote's CancelTask")
    assert len(stock.agent.cancels) == 1


async def test_file_part_comes_back(stock_server: Any, remote: Any, client: Client) -> None:
    """A file part of the remote's artifact is artifacts[0]'s part, bytes, type and name kept."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock")
    task = await within(client.send("stock", "file"), 15, "the file")
    assert task.status.state == TaskState.COMPLETED, task.status.message and task.status.message.text()
    assert task.artifacts
    part = task.artifacts[0].parts[0]
    assert part.raw is not None
    assert base64.b64decode(part.raw) == b"%PDF-1.4 test"
    assert part.media_type == "application/pdf"
    assert part.filename == "report.pdf"


async def test_remote_failure_and_remote_down(stock_server: Any, remote: Any, client: Client) -> None:
    """A remote's FAILED carries its reason; a remote that went away fails the task naming its URL, at once."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock", retries=1)
    failed = await within(client.send("stock", "fail"), 15, "the failure")
    assert failed.status.state == TaskState.FAILED
    assert failed.status.message is not None
    assert "it broke" in failed.status.message.text()
    await stop_stock_server(stock)
    down = await within(client.send("stock", {"x": 1}), 15, "the failure of a remote that is down")
    assert down.status.state == TaskState.FAILED
    text = down.status.message.text() if down.status.message else ""
    assert f"remote agent {stock.url}" in text, text
    assert "unreachable" in text, text


async def test_workflow_with_a_remote_node(stock_server: Any, remote: Any, client: Client, executor: Any) -> None:
    """A DAG workflow's agent node calls the remote like any agent; its output feeds the workflow's."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock")
    await executor(
        {
            "uses_remote": """
            name: uses_remote
            nodes:
              - {id: a, type: agent, agent_name: stock, input: {v: "{{workflow.input.v}}"}}
            output_mapping: {result: "{{a.output.echo.v}}", n: "{{a.output.n}}"}
            """
        }
    )
    await client.registry.wait_for("uses_remote", 5)
    task = await within(client.send("uses_remote", {"v": 7}), 20, "the workflow's answer")
    assert task.status.state == TaskState.COMPLETED, task.status.message and task.status.message.text()
    assert task.output() == {"result": 7, "n": 2}


async def test_legacy_0_3_remote(stock_server: Any, remote: Any, client: Client) -> None:
    """A 0.3 card and endpoint: forwarded with the SDK's 0.3 transport, input-required and cancel included."""
    stock: StockServer = await stock_server(legacy=True)
    await remote(url=stock.url, name="legacy")
    card = await client.registry.wait_for("legacy", 5)
    assert card.extension("urn:a2amesh:ext:remote:v1") == {
        "url": stock.url,
        "endpoint": f"{stock.url}/rpc",
        "binding": "JSONRPC",
        "version": "0.3.0",
        "reachable": True,
    }
    task = await within(client.send("legacy", {"x": 3}), 15, "the 0.3 answer")
    assert task.status.state == TaskState.COMPLETED, task.status.message and task.status.message.text()
    assert task.output() == {"echo": {"x": 3}, "n": 2}
    asked = await within(client.send("legacy", "ask"), 15, "the 0.3 question")
    assert asked.status.state == TaskState.INPUT_REQUIRED
    done = await within(
        client.send("legacy", make_message("Bob", task_id=asked.id, context_id=asked.context_id)), 15, "0.3 answer"
    )
    assert done.output() == "hello Bob"
    call = await client.dispatch("legacy", make_message("slow"))
    await within(stock.agent.started.wait(), 15, "the 0.3 remote to start")
    await client.cancel_task("legacy", call.task_id)
    await eventually(lambda: stock.agent.cancels, timeout=10, what="the 0.3 remote's CancelTask")


async def _bad_server(stock_server: Any) -> StockServer:
    async def html(_: Request) -> Response:
        return HTMLResponse("<html>hello</html>")

    async def not_a_card(_: Request) -> Response:
        return JSONResponse({"hello": "world"})

    async def no_binding(_: Request) -> Response:
        return JSONResponse({"name": "grpc only", "supportedInterfaces": [{"url": "x:1", "protocolBinding": "GRPC"}]})

    routes = [Route("/html/", html), Route("/json/card.json", not_a_card), Route("/grpc/card.json", no_binding)]
    stock: StockServer = await stock_server(extra_routes=routes)
    return stock


async def test_bad_cards_one_clear_error(stock_server: Any) -> None:
    """Unreachable, not A2A, not a card, no usable interface: one RemoteError naming the URL and the problem."""
    stock = await _bad_server(stock_server)
    with socket_closed() as port:
        cases = {
            f"http://127.0.0.1:{port}": "unreachable",
            f"{stock.url}/html/": "the card request to",  # 404 for both well-known paths under /html/
            f"{stock.url}/json/card.json": "not an A2A agent card",
            f"{stock.url}/grpc/card.json": "offers no JSONRPC or HTTP+JSON interface (it offers GRPC)",
        }
        for url, problem in cases.items():
            spec = parse_remote({"remote": {"url": url, "retries": 0}}, "test")
            http = make_http_client(spec, source="test")
            try:
                with pytest.raises(RemoteError) as caught:
                    await fetch_card(http, spec)
            finally:
                await http.aclose()
            assert str(caught.value).startswith(f"remote agent {url}: "), caught.value
            assert problem in str(caught.value), caught.value


async def test_bad_remote_does_not_stop_the_mesh(
    stock_server: Any, remote: Any, agent_host: Any, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A proxy whose card is unusable serves nothing and keeps trying; the rest of the mesh serves on."""
    stock = await _bad_server(stock_server)
    worker = await remote(ready=False, url=f"{stock.url}/json/card.json", name="broken")

    async def echo(input: Any, ctx: Any) -> Any:
        return input

    await agent_host("echo", echo)
    task = await within(client.send("echo", {"ok": True}), 10, "a local agent's answer")
    assert task.output() == {"ok": True}
    await asyncio.sleep(0.3)
    assert not worker.ready.is_set()
    assert client.registry.get("broken") is None


class socket_closed(contextlib.AbstractContextManager[int]):
    """A loopback port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


async def test_retries_on_5xx_and_429_not_on_4xx(stock_server: Any) -> None:
    """The remote's HTTP client retries 503 and 429 with backoff, and returns a 400 at once."""
    counts: dict[str, int] = {"flaky": 0, "busy": 0, "bad": 0}

    async def flaky(_: Request) -> Response:
        counts["flaky"] += 1
        return Response(status_code=503 if counts["flaky"] < 3 else 200)

    async def busy(_: Request) -> Response:
        counts["busy"] += 1
        return Response(status_code=429 if counts["busy"] < 2 else 200, headers={"Retry-After": "0"})

    async def bad(_: Request) -> Response:
        counts["bad"] += 1
        return Response(status_code=400)

    stock: StockServer = await stock_server(
        extra_routes=[Route("/flaky", flaky), Route("/busy", busy), Route("/bad", bad)]
    )
    spec = parse_remote({"remote": {"url": stock.url, "retries": 3, "backoff": 0.01}}, "test")
    http = make_http_client(spec, source="test")
    try:
        assert (await http.get(f"{stock.url}/flaky")).status_code == 200
        assert (await http.get(f"{stock.url}/busy")).status_code == 200
        assert (await http.get(f"{stock.url}/bad")).status_code == 400
    finally:
        await http.aclose()
    assert counts == {"flaky": 3, "busy": 2, "bad": 1}


async def test_bearer_and_api_key_auth(
    stock_server: Any, remote: Any, client: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A bearer token from the environment and an API key from a file reach the remote on every request."""
    stock: StockServer = await stock_server()
    monkeypatch.setenv("STOCK_TOKEN", "s3cret-token")
    key_file = tmp_path / "key"
    key_file.write_text("k3y\n")
    await remote(url=stock.url, name="bearer", auth={"type": "bearer", "token": {"env": "STOCK_TOKEN"}})
    await remote(
        url=stock.url, name="keyed", auth={"type": "api_key", "header": "X-Key", "key": {"file": str(key_file)}}
    )
    await within(client.send("bearer", {"a": 1}), 15, "the bearer call")
    await within(client.send("keyed", {"a": 1}), 15, "the keyed call")
    rpc = [r for r in stock.requests if r[":path"] == "/rpc"]
    assert any(r.get("authorization") == "Bearer s3cret-token" for r in rpc)
    assert any(r.get("x-key") == "k3y" for r in rpc)
    cards = [r for r in stock.requests if r[":path"].startswith("/.well-known")]
    assert cards
    assert all(r.get("authorization") == "Bearer s3cret-token" or r.get("x-key") == "k3y" for r in cards)


async def test_oauth2_client_credentials(
    stock_server: Any, remote: Any, client: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A token from the token endpoint (client credentials) is sent as a bearer token; the secret is never logged."""
    grants: list[dict[str, str]] = []

    async def token(request: Request) -> Response:
        form = await request.form()
        grants.append({k: str(v) for k, v in form.items()})
        return JSONResponse({"access_token": "tok-1", "token_type": "Bearer", "expires_in": 3600})

    stock: StockServer = await stock_server(extra_routes=[Route("/token", token, methods=["POST"])])
    monkeypatch.setenv("STOCK_CLIENT_SECRET", "very-secret")
    caplog.set_level(logging.DEBUG)
    await remote(
        url=stock.url,
        name="oauth",
        auth={
            "type": "oauth2",
            "token_url": f"{stock.url}/token",
            "client_id": "mesh",
            "client_secret": {"env": "STOCK_CLIENT_SECRET"},
            "scopes": ["agents"],
        },
    )
    await within(client.send("oauth", {"a": 1}), 15, "the OAuth2 call")
    assert grants[0] == {
        "grant_type": "client_credentials",
        "client_id": "mesh",
        "client_secret": "very-secret",
        "scope": "agents",
    }
    assert len(grants) == 1  # reused, not fetched per request
    assert any(r.get("authorization") == "Bearer tok-1" for r in stock.requests if r[":path"] == "/rpc")
    assert "very-secret" not in caplog.text


async def test_missing_secret_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret whose variable is unset is one ConfigError naming the variable, never a value."""
    from a2amesh.errors import ConfigError

    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    spec = parse_remote(
        {"remote": {"url": "http://127.0.0.1:1", "auth": {"type": "bearer", "token": {"env": "NOT_SET_ANYWHERE"}}}},
        "f.yaml",
    )
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE is not set"):
        make_http_client(spec, source="f.yaml")


async def test_remote_is_an_llm_agents_tool(
    stock_server: Any, remote: Any, agent_host: Any, client: Client, settings: Settings, fake_llm: FakeOpenAIServer
) -> None:
    """An LLM agent whose peers: match the remote gets it as a tool (with the input schema declared for it); the
    model's call reaches the remote."""
    stock: StockServer = await stock_server()
    schema = {"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"]}
    await remote(url=stock.url, name="stock", input_schema=schema)
    await client.registry.wait_for("stock", 5)
    fake_llm.script(Reply(tool_calls=[ToolCall("stock", {"q": 41})]), "done")
    await agent_host("planner", runtime=llm_agent(settings, fake_llm.base_url, "planner", peers=["stock"]))
    task = await within(client.send("planner", "ask the stock agent"), 20, "the LLM agent's answer")
    assert task.output() == "done"
    tools = {t["function"]["name"]: t["function"] for t in fake_llm.requests[0]["tools"]}
    assert "q" in tools["stock"]["parameters"]["properties"]
    answer = json.loads(tool_messages(fake_llm.requests[1])[0])
    assert answer == {"status": "completed", "output": {"echo": {"q": 41}, "n": 2}}


async def test_remote_as_mcp_tool_and_on_the_dashboard_with_health(
    stock_server: Any, remote: Any, client: Client, gateway: Any
) -> None:
    """The remote is an MCP tool like any agent; the dashboard's agents page marks it remote with its URL, and
    its health: once its card cannot be fetched, the card (and page) say unreachable and why."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock", refresh=0.3)
    card = await client.registry.wait_for("stock", 5)
    (tool,) = tools_of(card, McpSettings())
    assert tool.tool.name == "stock"
    assert tool.tool.description is not None
    assert "A stock a2a-sdk agent" in tool.tool.description
    url = await gateway()
    async with httpx.AsyncClient(base_url=url) as http:
        page = (await http.get("/agents", headers={"Accept": "text/html"})).text
        assert f"remote agent at <code>{stock.url}</code> · reachable" in page
        await stop_stock_server(stock)

        async def unreachable() -> str | None:
            c = client.registry.get("stock")
            return None if c is None else (c.extension("urn:a2amesh:ext:remote:v1") or {}).get("problem")

        problem = await eventually(unreachable, timeout=10, what="the card to say the remote is unreachable")
        assert problem.startswith("unreachable"), problem
        page = (await http.get("/agents", headers={"Accept": "text/html"})).text
        assert "<strong>unreachable</strong>" in page


ASKING_FLOW = """
name: asking_flow
nodes:
  - {id: q, type: agent, agent_name: stock, input: {op: "{{workflow.input.op}}"}}
output_mapping: {answer: "{{q.output}}"}
"""


async def test_workflow_remote_node_input_required_and_resume(
    stock_server: Any, remote: Any, client: Client, executor: Any
) -> None:
    """A remote node that asks pauses the workflow with its question; the caller's answer goes on to the same
    remote task, whose answer finishes the workflow."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock")
    await executor({"asking_flow": ASKING_FLOW})
    await client.registry.wait_for("asking_flow", 5)
    paused = await within(client.send("asking_flow", {"op": "ask"}), 20, "the workflow to pause")
    assert paused.status.state == TaskState.INPUT_REQUIRED, paused.status
    assert paused.status.message is not None
    assert "what is your name?" in json.dumps(paused.status.model_dump(mode="json"))
    answer = make_message("Ada", task_id=paused.id, context_id=paused.context_id)
    done = await within(client.send("asking_flow", answer), 20, "the workflow to finish")
    assert done.status.state == TaskState.COMPLETED, done.status.message and done.status.message.text()
    assert "Ada" in json.dumps(done.output())
    first, second = stock.agent.task_ids
    assert first == second  # the answer continued the remote task that asked


async def test_workflow_cancel_reaches_the_remote(
    stock_server: Any, remote: Any, client: Client, executor: Any
) -> None:
    """Canceling a workflow whose remote node runs cancels the node's task, and the proxy cancels the remote's."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock")
    await executor({"asking_flow": ASKING_FLOW})
    await client.registry.wait_for("asking_flow", 5)
    call = await client.dispatch("asking_flow", make_message(data={"op": "slow"}))
    await within(stock.agent.started.wait(), 20, "the remote node to start")
    canceled = await client.cancel_task("asking_flow", call.task_id)
    assert canceled.status.state == TaskState.CANCELED
    await eventually(lambda: stock.agent.cancels, timeout=15, what="the remote's CancelTask")


async def test_tls_verified_by_default_and_a_private_ca(
    stock_server: Any, remote: Any, client: Client, tmp_path: Path
) -> None:
    """An HTTPS remote whose certificate no trusted CA signed is refused (one clear error); with its CA named in
    ``ca_file`` it is served."""
    pems = make_certificates(["127.0.0.1"])
    files = {}
    for name in ("ca", "nats-server", "nats-server-key"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_bytes(pems[name])
    stock: StockServer = await stock_server(tls=(str(files["nats-server"]), str(files["nats-server-key"])))
    assert stock.url.startswith("https://")
    spec = parse_remote({"remote": {"url": stock.url, "retries": 0}}, "test")
    http = make_http_client(spec, source="test")
    try:
        with pytest.raises(RemoteError, match="unreachable: .*CERTIFICATE_VERIFY_FAILED"):
            await fetch_card(http, spec)
    finally:
        await http.aclose()
    await remote(url=stock.url, name="secure", ca_file=str(files["ca"]))
    task = await within(client.send("secure", {"tls": True}), 15, "the HTTPS remote's answer")
    assert task.output() == {"echo": {"tls": True}, "n": 2}


async def test_a_task_that_cannot_reach_the_remote_refreshes_the_card(
    stock_server: Any, remote: Any, client: Client
) -> None:
    """With a refresh interval far away, a task failing to reach the remote has the card fetched again soon (one
    refresh for a burst of failures), so the card says the remote is unreachable."""
    stock: StockServer = await stock_server()
    await remote(url=stock.url, name="stock", refresh=3600, retries=0)
    await client.registry.wait_for("stock", 5)
    await stop_stock_server(stock)
    failed = await within(client.send("stock", {"x": 1}), 15, "the failed task")
    assert failed.status.state == TaskState.FAILED

    def problem() -> str | None:
        card = client.registry.get("stock")
        return None if card is None else (card.extension("urn:a2amesh:ext:remote:v1") or {}).get("problem")

    said = await eventually(problem, timeout=15, what="the card refreshed after the failure")
    assert said.startswith("unreachable"), said


async def test_mesh_concurrency_bounds_every_replica_together(
    stock_server: Any, remote: Any, client: Client, redis: Redis, settings: Settings
) -> None:
    """Two replicas that may each forward 4 tasks, mesh_concurrency 1: one task reaches the remote, the others
    wait for its slot in Redis (on either replica); released, all three complete, one after another."""
    stock: StockServer = await stock_server()
    replicas = [await remote(url=stock.url, name="limited", max_concurrency=4, mesh_concurrency=1) for _ in range(2)]
    calls = [await client.dispatch("limited", make_message("gate"), timeout=60) for _ in range(3)]
    await eventually(
        lambda: sum(r.gate.waiting for r in replicas if r.gate is not None) == 2,
        timeout=20,
        what="two tasks waiting for the remote's only slot",
    )
    assert len(stock.agent.inputs) == 1, stock.agent.inputs
    slots = await redis.zrange(Keys(settings.namespace).remote_slots("limited"), 0, -1)
    assert len(slots) == 1, slots
    stock.agent.release.set()
    for call in calls:
        task = await within(call.result(), 30, "a limited task's final")
        assert task.status.state == TaskState.COMPLETED, task.status
    assert len(stock.agent.inputs) == 3
    assert await redis.zcard(Keys(settings.namespace).remote_slots("limited")) == 0
