"""Interop with Google ADK 2.13 (its own virtualenv, run as subprocesses): an ADK agent served by ADK's ``to_a2a``
as a remote node of our DAG workflow, and ADK's ``RemoteA2aAgent`` calling our workflow through our gateway.
Localhost only; the ADK agent needs no model (a custom ``BaseAgent``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from a2amesh.bus.nats import Bus
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import InputRequired
from a2amesh.protocol import TaskState
from a2amesh.remote.service import RemoteWorker
from a2amesh.remote.spec import parse_remote
from a2amesh.store.redis import Redis
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall
from tests.integration.agent.test_llm_agent import tool_messages
from tests.support.interop import SCRIPTS, framework_python, serve_script
from tests.support.nodes import llm_agent
from tests.support.waiting import within

pytestmark = pytest.mark.timeout(1500)  # a first install of the ADK virtualenv (see adk_python)


@pytest.fixture(scope="session")
def adk_python() -> str:
    """The Python of the ADK virtualenv (``A2AMESH_ADK_PYTHON``, else ``.venv-adk``, ``.ci/install-adk``)."""
    return framework_python("A2AMESH_ADK_PYTHON", ".venv-adk", "install-adk")


@pytest.fixture
async def adk_proxy(adk_python: str, bus: Bus, redis: Redis, settings: Settings, tmp_path: Path) -> AsyncIterator[str]:
    """ADK's A2A server behind our proxy, named ``adk`` in the mesh; yields the server's URL."""
    async with serve_script(adk_python, "adk_server.py", log=tmp_path / "adk.log") as url:
        spec = parse_remote({"remote": {"url": url, "name": "adk", "backoff": 0.05}}, "test")
        worker = RemoteWorker(spec, source="test", bus=bus, redis=redis, settings=settings)
        stop = asyncio.Event()
        running = await worker.start(stop, limit=30)
        try:
            yield url
        finally:
            stop.set()
            await asyncio.wait_for(running, 15)


FLOW = """
name: adk_flow
nodes:
  - {id: a, type: agent, agent_name: adk, input: "{{workflow.input.text}}"}
output_mapping: {said: "{{a.output}}"}
"""


async def test_adk_server_as_a_dag_node(adk_proxy: str, client: Client, executor: Any) -> None:
    """ADK's to_a2a server (1.0 card and JSON-RPC, streamed) is a node of our DAG workflow."""
    card = await client.registry.wait_for("adk", 10)
    assert card.remote_url == adk_proxy
    await executor({"adk_flow": FLOW})
    await client.registry.wait_for("adk_flow", 5)
    task = await within(client.send("adk_flow", {"text": "ping"}), 60, "the workflow's answer")
    assert task.status.state == TaskState.COMPLETED, task.status.message and task.status.message.text()
    output = task.output()
    assert isinstance(output, dict)
    assert "echo: ping" in output["said"]


async def test_adk_server_is_an_llm_agents_tool(
    adk_proxy: str, agent_host: Any, client: Client, settings: Settings, fake_llm: FakeOpenAIServer
) -> None:
    """An LLM agent whose peers include ADK's server gets it as a tool (text mode: its card declares no input
    schema); the model's call reaches the ADK agent, whose answer is the tool result the model reads next."""
    await client.registry.wait_for("adk", 10)
    fake_llm.script(Reply(tool_calls=[ToolCall("adk", {"message": "ping from the planner"})]), "done")
    await agent_host("planner", runtime=llm_agent(settings, fake_llm.base_url, "planner", peers=["adk"]))
    task = await within(client.send("planner", "ask the ADK agent"), 60, "the LLM agent's answer")
    assert task.status.state == TaskState.COMPLETED, task.status.message and task.status.message.text()
    assert task.output() == "done"
    tools = {t["function"]["name"]: t["function"] for t in fake_llm.requests[0]["tools"]}
    assert "message" in tools["adk"]["parameters"]["properties"]
    answer = json.loads(tool_messages(fake_llm.requests[1])[0])
    assert answer["status"] == "completed", answer
    assert "echo: ping from the planner" in answer["output"], answer


async def test_adk_remote_agent_calls_our_workflow(
    adk_python: str, adk_proxy: str, client: Client, executor: Any, gateway: Any
) -> None:
    """ADK's RemoteA2aAgent calls our workflow (whose node is the ADK agent) through the gateway: ADK ↔ mesh ↔ ADK.
    It is given the card's URL and fetches the card itself (the gateway's card lists only HTTP interfaces)."""
    await executor({"adk_flow": FLOW})
    await client.registry.wait_for("adk_flow", 5)
    url = await gateway()
    proc = await asyncio.create_subprocess_exec(
        adk_python,
        str(SCRIPTS / "adk_client.py"),
        f"{url}/agents/adk_flow/.well-known/agent-card.json",
        json.dumps({"text": "from adk"}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await within(proc.communicate(), 90, "ADK's client")
    assert proc.returncode == 0, err.decode()[-3000:]
    texts = json.loads(out.decode().splitlines()[-1])["texts"]
    # ADK shows the streamed progress and the final's text parts: the final's message is the output as text
    assert "✓ a completed" in texts, texts
    assert json.loads(texts[-1])["said"].startswith("echo: "), texts
    assert "from adk" in json.loads(texts[-1])["said"], texts


CHAT = """
name: adk_chat
nodes:
  - {id: ask, type: agent, agent_name: asker, input: "{{workflow.input}}"}
output_mapping: {said: "{{ask.output.greeting}}"}
"""


async def asker(input: Any, ctx: Any) -> dict[str, str]:
    """Asks for a name until a message gives one (``… name is NAME``)."""
    text = input if isinstance(input, str) else json.dumps(input)
    if "name is " not in text:
        raise InputRequired("what is your name?")
    name = text.split("name is ", 1)[1].split('"', 1)[0].strip()
    return {"greeting": f"hello, {name}"}


async def test_adk_remote_agent_holds_a_multi_turn_exchange_with_our_workflow(
    adk_python: str, agent_host: Any, client: Client, executor: Any, gateway: Any
) -> None:
    """Two turns of one ADK session: the workflow's node asks a question (the workflow pauses, INPUT_REQUIRED, its
    question streamed to ADK, which shows it as a call asking its user); ADK's next message continues that task
    (ADK sends the paused task's id) and the workflow completes with the answer, streamed too."""
    await agent_host("asker", asker)
    await executor({"adk_chat": CHAT})
    await client.registry.wait_for("adk_chat", 5)
    url = await gateway()
    proc = await asyncio.create_subprocess_exec(
        adk_python,
        str(SCRIPTS / "adk_client.py"),
        f"{url}/agents/adk_chat/.well-known/agent-card.json",
        "hello",
        "my name is Ada",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await within(proc.communicate(), 90, "ADK's client")
    assert proc.returncode == 0, err.decode()[-3000:]
    first, second = json.loads(out.decode().splitlines()[-1])["turns"]
    assert any("what is your name?" in t for t in first), first
    assert "▶ workflow started" in first, "the first turn is streamed"
    assert json.loads(second[-1]) == {"said": "hello, Ada"}, second
    tasks = (await client.list_tasks("adk_chat")).tasks
    assert len(tasks) == 1, "the second turn continued the first turn's task"
    assert tasks[0].status.state == TaskState.COMPLETED
