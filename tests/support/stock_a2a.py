"""A stock a2a-sdk server (its own request handler, task store and routes; uvicorn on a free loopback port) with
an ``AgentExecutor`` of a few behaviours, for the remote-agent tests. It speaks A2A 1.0 over JSON-RPC and
HTTP+JSON, and, with ``legacy=True``, serves a 0.3 card and answers 0.3 JSON-RPC.

What the executor does is chosen by the first word of the request's text (or ``op`` of its data):

- ``echo`` (the default): completes with a data artifact ``{"echo": <input>, "n": 2}``, after a status update;
- ``chunks``: a text artifact in three appended chunks, ``"hel" "lo " "world"``;
- ``ask``: ``INPUT_REQUIRED`` with the question ``what is your name?``; the continuation completes with
  ``hello <answer>``;
- ``slow``: a working status, then waits until cancelled (each cancel is recorded in ``cancels``);
- ``file``: completes with a file part (raw bytes ``%PDF-1.4 test``, ``application/pdf``);
- ``fail``: fails with the message ``it broke``;
- ``gate``: a working status, then waits for ``release`` and completes with ``{"released": true}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from a2a.helpers.proto_helpers import new_data_part, new_raw_part, new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class StockAgent(AgentExecutor):
    """The executor (see the module doc); what it saw is kept for the tests to assert on."""

    inputs: list[dict[str, Any]] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    task_ids: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        assert context.task_id
        assert context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        seen = MessageToDict(message)
        self.inputs.append(seen)
        self.task_ids.append(context.task_id)
        continuing = context.current_task is not None and (
            context.current_task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
        )
        if context.current_task is None:
            task = new_task(context.task_id, context.context_id, pb.TaskState.TASK_STATE_SUBMITTED, history=[message])
            await event_queue.enqueue_event(task)
        await updater.start_work(new_text_message("on it", context_id=context.context_id, task_id=context.task_id))
        if continuing:
            answer = " ".join(_words(seen))
            await updater.add_artifact([new_text_part(f"hello {answer}")], name="greeting")
            await updater.complete()
            return
        op = _op(seen)
        if op == "ask":
            await updater.requires_input(
                new_text_message("what is your name?", context_id=context.context_id, task_id=context.task_id)
            )
        elif op == "chunks":
            for i, chunk in enumerate(("hel", "lo ", "world")):
                await updater.add_artifact(
                    [new_text_part(chunk)], artifact_id="answer", name="answer", append=i > 0, last_chunk=i == 2
                )
            await updater.complete()
        elif op == "slow":
            self.started.set()
            await asyncio.Event().wait()
        elif op == "gate":
            self.started.set()
            await self.release.wait()
            await updater.add_artifact([new_data_part({"released": True})], name="result")
            await updater.complete()
        elif op == "file":
            await updater.add_artifact(
                [new_raw_part(b"%PDF-1.4 test", media_type="application/pdf", filename="report.pdf")], name="report"
            )
            await updater.complete()
        elif op == "fail":
            await updater.failed(new_text_message("it broke", context_id=context.context_id, task_id=context.task_id))
        else:
            data = next((p["data"] for p in seen.get("parts", []) if "data" in p), None)
            await updater.add_artifact([new_data_part({"echo": data, "n": 2})], name="result")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id
        assert context.context_id
        self.cancels.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def _words(seen: dict[str, Any]) -> list[str]:
    words = []
    for p in seen.get("parts", []):
        if "text" in p:
            words.append(p["text"])
        elif "data" in p:
            words.append(json.dumps(p["data"], sort_keys=True))
    return words


def _op(seen: dict[str, Any]) -> str:
    for p in seen.get("parts", []):
        if isinstance(p.get("data"), dict) and "op" in p["data"]:
            return str(p["data"]["op"])
    for word in _words(seen):
        if word.split():
            return word.split()[0]
    return "echo"


def stock_card(base: str, *, name: str = "Stock Agent", rest: bool = True) -> pb.AgentCard:
    """The 1.0 card of the stock server at ``base``: JSON-RPC at /rpc first, HTTP+JSON at /rest."""
    interfaces = [pb.AgentInterface(url=f"{base}/rpc", protocol_binding="JSONRPC", protocol_version="1.0")]
    if rest:
        interfaces.append(pb.AgentInterface(url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"))
    return pb.AgentCard(
        name=name,
        description="A stock a2a-sdk agent",
        version="3.1.0",
        supported_interfaces=interfaces,
        capabilities=pb.AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[pb.AgentSkill(id="echo", name="Echo", description="echoes its input", tags=["test"])],
    )


def legacy_card(base: str) -> dict[str, Any]:
    """A 0.3 card (as a 0.3 server serves it) for the same server's 0.3 JSON-RPC endpoint."""
    return {
        "name": "Legacy Agent",
        "description": "A stock a2a-sdk agent speaking 0.3",
        "url": f"{base}/rpc",
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
        "version": "0.3.9",
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "echoes", "tags": []}],
    }


@dataclass
class StockServer:
    """One running stock server."""

    url: str
    agent: StockAgent
    server: uvicorn.Server
    task: asyncio.Task[None]
    requests: list[dict[str, str]]


def _free_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


async def start_stock_server(
    *, legacy: bool = False, extra_routes: list[Route] | None = None, tls: tuple[str, str] | None = None
) -> StockServer:
    """Start a stock server on a free port (HTTPS with ``tls``: certificate and key files); ``stop_stock_server``
    stops it."""
    sock = _free_socket()
    base = f"{'https' if tls else 'http'}://127.0.0.1:{sock.getsockname()[1]}"
    agent = StockAgent()
    card = stock_card(base)
    handler = DefaultRequestHandler(agent_executor=agent, task_store=InMemoryTaskStore(), agent_card=card)
    routes: list[Any] = list(extra_routes or [])
    if legacy:

        async def legacy_card_route(_: Request) -> Response:
            return JSONResponse(legacy_card(base))

        routes.append(Route("/.well-known/agent-card.json", legacy_card_route))
    else:
        routes.extend(create_agent_card_routes(card))
    # the REST routes last: their list ends with a catch-all tenant mount
    routes += [
        *create_jsonrpc_routes(handler, "/rpc", enable_v0_3_compat=legacy),
        *create_rest_routes(handler, path_prefix="/rest"),
    ]
    requests: list[dict[str, str]] = []
    app = Starlette(routes=routes)

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            requests.append({k.decode(): v.decode() for k, v in scope["headers"]} | {":path": scope["path"]})
        await app(scope, receive, send)

    certificate, key = tls if tls else (None, None)
    config = uvicorn.Config(recording, log_level="warning", lifespan="off", ssl_certfile=certificate, ssl_keyfile=key)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(200):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    assert server.started, "the stock a2a-sdk server did not start within 4 s"
    return StockServer(url=base, agent=agent, server=server, task=task, requests=requests)


async def stop_stock_server(stock: StockServer) -> None:
    stock.server.should_exit = True
    with contextlib.suppress(Exception):
        await asyncio.wait_for(stock.task, 10)


@pytest.fixture
async def stock_server() -> AsyncIterator[Any]:
    """Start stock a2a-sdk servers (``legacy=True``: the 0.3 card and endpoint); all stopped at teardown."""
    started: list[StockServer] = []

    async def start(**kwargs: Any) -> StockServer:
        stock = await start_stock_server(**kwargs)
        started.append(stock)
        return stock

    yield start
    for stock in started:
        await stop_stock_server(stock)
