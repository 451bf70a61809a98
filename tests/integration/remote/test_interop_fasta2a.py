"""Interop with fasta2a (pydantic's A2A server and client library): its server as a remote node of our DAG
workflow, and its client calling our workflow through our gateway. Localhost only, real servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn

from a2amesh.bus.nats import Bus
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.remote.service import RemoteWorker
from a2amesh.remote.spec import parse_remote
from a2amesh.store.redis import Redis
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall
from tests.integration.agent.test_llm_agent import tool_messages
from tests.support.extras import require_extra
from tests.support.nodes import llm_agent
from tests.support.waiting import within

require_extra("fasta2a", "dev")

from fasta2a import FastA2A, Worker  # noqa: E402
from fasta2a.broker import InMemoryBroker  # noqa: E402
from fasta2a.schema import (  # noqa: E402
    Artifact,
    Message,
    SendMessageRequest,
    StreamMessageRequest,
    TaskIdParams,
    TaskSendParams,
    send_message_request_ta,
    stream_message_request_ta,
)
from fasta2a.storage import InMemoryStorage  # noqa: E402


@dataclass
class GreeterWorker(Worker):  # type: ignore[misc]  # fasta2a ships no type information
    """A fasta2a worker without a model: ``ask`` asks for a name (input-required); the next message in the
    context is the answer; anything else echoes its data part."""

    async def run_task(self, params: TaskSendParams) -> None:
        task_id, context_id, message = params["id"], params["context_id"], params["message"]
        await self.storage.update_task(task_id, state="working")
        text = " ".join(p["text"] for p in message["parts"] if "text" in p)
        data = next((p["data"] for p in message["parts"] if "data" in p), None)
        asked = await self.storage.load_context(context_id) or []
        if asked:
            await self.storage.update_context(context_id, [])
            await self._complete(task_id, context_id, {"text": f"hello {text.strip()}"})
        elif text.startswith("ask"):
            await self.storage.update_context(context_id, ["asked"])
            question = Message(role="agent", parts=[{"text": "your name?"}], message_id=str(uuid.uuid4()))
            await self.storage.update_task(task_id, state="input-required", new_messages=[question])
            await self.publish_status(task_id, context_id, "input-required", message=question)
        else:
            await self._complete(task_id, context_id, {"data": {"echo": data, "n": 2}})

    async def _complete(self, task_id: str, context_id: str, part: Any) -> None:
        artifact = Artifact(artifact_id=str(uuid.uuid4()), name="result", parts=[part])
        await self.publish_artifact(task_id, context_id, artifact)
        await self.storage.update_task(task_id, state="completed", new_artifacts=[artifact])

    async def cancel_task(self, params: TaskIdParams) -> None:
        await self.storage.update_task(params["id"], state="canceled")

    def build_message_history(self, history: list[Message]) -> list[Any]:
        return list(history)

    def build_artifacts(self, result: Any) -> list[Artifact]:
        return []


@contextlib.asynccontextmanager
async def fasta2a_server() -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    storage: InMemoryStorage[list[str]] = InMemoryStorage()
    broker = InMemoryBroker()
    worker = GreeterWorker(broker=broker, storage=storage)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastA2A) -> AsyncIterator[None]:
        async with app.task_manager, worker.run():
            yield

    app = FastA2A(storage=storage, broker=broker, name="fasta2a greeter", url=f"{base}/", lifespan=lifespan)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.02)
        assert server.started, "the fasta2a server did not start within 4 s"
        yield base
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def proxied_greeter(bus: Bus, redis: Redis, settings: Settings, **declared: Any) -> AsyncIterator[str]:
    """A fasta2a server behind our proxy, named ``greeter`` in the mesh (``declared``: more fields of its
    ``remote:`` declaration); yields the server's URL."""
    async with fasta2a_server() as base:
        spec = parse_remote({"remote": {"url": base, "name": "greeter", "backoff": 0.05, **declared}}, "test")
        worker = RemoteWorker(spec, source="test", bus=bus, redis=redis, settings=settings)
        stop = asyncio.Event()
        running = await worker.start(stop, limit=15)
        try:
            yield base
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running, 15)


@pytest.fixture
async def greeter_proxy(bus: Bus, redis: Redis, settings: Settings) -> AsyncIterator[str]:
    """A fasta2a server behind our proxy, named ``greeter`` in the mesh; yields the server's URL."""
    async with proxied_greeter(bus, redis, settings) as base:
        yield base


JSON = {"Content-Type": "application/json"}
WORKFLOW = """
name: greet_flow
nodes:
  - {id: g, type: agent, agent_name: greeter, input: {who: "{{workflow.input.who}}"}}
output_mapping: {echoed: "{{g.output.echo.who}}", n: "{{g.output.n}}"}
"""


async def test_fasta2a_server_as_a_dag_node(greeter_proxy: str, client: Client, executor: Any) -> None:
    """fasta2a's server (its card, 1.0 JSON-RPC, its stream) is a node of our DAG workflow."""
    card = await client.registry.wait_for("greeter", 5)
    assert card.remote_url == greeter_proxy
    await executor({"greet_flow": WORKFLOW})
    await client.registry.wait_for("greet_flow", 5)
    task = await within(client.send("greet_flow", {"who": "Ada"}), 20, "the workflow's answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"echoed": "Ada", "n": 2}


async def test_fasta2a_server_is_an_llm_agents_tool(
    bus: Bus, redis: Redis, settings: Settings, agent_host: Any, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """An LLM agent whose peers include the fasta2a server gets it as a tool, with the input schema declared for
    the remote as its parameters; the model's call reaches the fasta2a worker, whose answer (its data artifact)
    is the tool result the model reads next."""
    schema = {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}
    async with proxied_greeter(bus, redis, settings, input_schema=schema):
        await client.registry.wait_for("greeter", 5)
        fake_llm.script(Reply(tool_calls=[ToolCall("greeter", {"who": "Ada"})]), "done")
        await agent_host("planner", runtime=llm_agent(settings, fake_llm.base_url, "planner", peers=["greeter"]))
        task = await within(client.send("planner", "greet Ada"), 20, "the LLM agent's answer")
        assert task.status.state == TaskState.COMPLETED, task.status
        assert task.output() == "done"
        tools = {t["function"]["name"]: t["function"] for t in fake_llm.requests[0]["tools"]}
        assert "who" in tools["greeter"]["parameters"]["properties"]
        answer = json.loads(tool_messages(fake_llm.requests[1])[0])
        assert answer == {"status": "completed", "output": {"echo": {"who": "Ada"}, "n": 2}}


async def test_fasta2a_input_required_continues_in_its_context(greeter_proxy: str, client: Client) -> None:
    """fasta2a's multi-turn: the question is INPUT_REQUIRED; our continuation reaches its context (fasta2a makes
    a new task for it, which the proxy follows) and completes our task."""
    await client.registry.wait_for("greeter", 5)
    asked = await within(client.send("greeter", "ask"), 15, "the question")
    assert asked.status.state == TaskState.INPUT_REQUIRED, asked.status
    assert asked.status.message is not None
    assert asked.status.message.text() == "your name?"
    done = await within(
        client.send("greeter", make_message("Grace", task_id=asked.id, context_id=asked.context_id)), 15, "answer"
    )
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == "hello Grace"


async def test_fasta2a_requests_call_our_workflow(
    greeter_proxy: str, client: Client, executor: Any, gateway: Any
) -> None:
    """fasta2a's client requests (built with its own request types: 0.3 method names, 1.0-style parts) reach our
    workflow through the gateway, blocking and streamed, and are answered in A2A 0.3 as they ask.

    fasta2a 2.1.1's ``A2AClient`` itself reads those answers with its 1.0 result types and so hands back an empty
    ``result`` (see docs/interop.md): what it sends is served, what it parses is its own mismatch."""
    await executor({"greet_flow": WORKFLOW})
    await client.registry.wait_for("greet_flow", 5)
    url = await gateway()
    async with httpx.AsyncClient(timeout=30) as http:
        raw = (await http.get(f"{url}/agents/greet_flow/.well-known/agent-card.json")).json()
        endpoint = next(i["url"] for i in raw["supportedInterfaces"] if i["protocolBinding"] == "JSONRPC")
        message = Message(role="user", parts=[{"data": {"who": "Lin"}}], message_id=str(uuid.uuid4()))
        send = SendMessageRequest(jsonrpc="2.0", id="1", method="message/send", params={"message": message})
        r = await http.post(endpoint, content=send_message_request_ta.dump_json(send, by_alias=True), headers=JSON)
        task = r.json()["result"]
        assert task["kind"] == "task"
        assert task["status"]["state"] == "completed", task
        assert task["artifacts"][0]["parts"][0]["data"] == {"echoed": "Lin", "n": 2}
        again = Message(**{**message, "message_id": str(uuid.uuid4())})
        stream = StreamMessageRequest(jsonrpc="2.0", id="2", method="message/stream", params={"message": again})
        body = stream_message_request_ta.dump_json(stream, by_alias=True)
        async with http.stream("POST", endpoint, content=body, headers=JSON) as r:
            events = [json.loads(line[6:])["result"] async for line in r.aiter_lines() if line.startswith("data: ")]
        assert events[0]["kind"] == "task"
        assert any(e.get("kind") == "artifact-update" for e in events)
        assert events[-1]["status"]["state"] == "completed"
        assert events[-1]["final"] is True
