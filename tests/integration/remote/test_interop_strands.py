"""Interop with Strands Agents (strands-agents[a2a] 1.62, on the a2a-sdk 0.3 line, so in a virtualenv of its own run
as subprocesses): its A2A server as a remote node of our DAG workflow, its model on our fake OpenAI server, and its
A2A client (``A2AAgent``) calling our workflow through our gateway. Localhost only."""

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
from a2amesh.protocol import TaskState
from a2amesh.remote.service import RemoteWorker
from a2amesh.remote.spec import parse_remote
from a2amesh.store.redis import Redis
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall
from tests.integration.agent.test_llm_agent import tool_messages
from tests.support.interop import SCRIPTS, framework_python, serve_script
from tests.support.nodes import llm_agent
from tests.support.waiting import within

pytestmark = pytest.mark.timeout(1500)  # a first install of the Strands virtualenv (see strands_python)


@pytest.fixture(scope="session")
def strands_python() -> str:
    """The Python of the Strands virtualenv (``A2AMESH_STRANDS_PYTHON``, else ``.venv-strands``: Strands needs
    a2a-sdk<0.4, which ours cannot share). A first install takes minutes: these tests have a longer timeout."""
    return framework_python("A2AMESH_STRANDS_PYTHON", ".venv-strands", "install-strands")


@pytest.fixture
async def strands_server(strands_python: str, fake_llm: FakeOpenAIServer, tmp_path: Path) -> AsyncIterator[str]:
    """A Strands agent served by Strands' A2AServer on a free port; yields its URL."""
    async with serve_script(
        strands_python, "strands_server.py", fake_llm.base_url, log=tmp_path / "strands.log"
    ) as url:
        yield url


@pytest.fixture
async def strands_proxy(strands_server: str, bus: Bus, redis: Redis, settings: Settings) -> AsyncIterator[str]:
    spec = parse_remote({"remote": {"url": strands_server, "name": "strands", "backoff": 0.05}}, "test")
    worker = RemoteWorker(spec, source="test", bus=bus, redis=redis, settings=settings)
    stop = asyncio.Event()
    running = await worker.start(stop, limit=30)
    yield strands_server
    stop.set()
    await asyncio.wait_for(running, 15)


FLOW = """
name: strands_flow
nodes:
  - {id: s, type: agent, agent_name: strands, input: {topic: "{{workflow.input.topic}}"}, instruction: "Say hello"}
output_mapping: {said: "{{s.output}}"}
"""


async def test_strands_server_as_a_dag_node(
    strands_proxy: str, client: Client, executor: Any, fake_llm: FakeOpenAIServer
) -> None:
    """A Strands agent (0.3 card and JSON-RPC) is a node of our DAG workflow; its model answer is the output."""
    card = await client.registry.wait_for("strands", 10)
    assert card.extension("urn:a2amesh:ext:remote:v1")["version"].startswith("0.3")  # type: ignore[index]
    fake_llm.script("hello from strands")
    await executor({"strands_flow": FLOW})
    await client.registry.wait_for("strands_flow", 5)
    task = await within(client.send("strands_flow", {"topic": "tests"}), 60, "the workflow's answer")
    assert task.status.state == TaskState.COMPLETED, task.status.message and task.status.message.text()
    output = task.output()
    assert isinstance(output, dict)
    assert output["said"].strip() == "hello from strands"  # Strands ends its text artifact with a newline
    sent = json.dumps(fake_llm.requests[0]["messages"])
    assert "Say hello" in sent  # the node's instruction reached the Strands agent's model
    assert "tests" in sent


async def test_strands_server_is_an_llm_agents_tool(
    strands_proxy: str, agent_host: Any, client: Client, settings: Settings, fake_llm: FakeOpenAIServer
) -> None:
    """An LLM agent whose peers include the Strands server gets it as a tool. Both models are on the fake server,
    called in turn: our planner's (the tool call), Strands' (its answer), our planner's again (the final)."""
    await client.registry.wait_for("strands", 10)
    fake_llm.script(Reply(tool_calls=[ToolCall("strands", {"message": "say hello"})]), "hello from strands", "done")
    await agent_host("planner", runtime=llm_agent(settings, fake_llm.base_url, "planner", peers=["strands"]))
    task = await within(client.send("planner", "ask the Strands agent"), 60, "the LLM agent's answer")
    assert task.status.state == TaskState.COMPLETED, task.status.message and task.status.message.text()
    assert task.output() == "done"
    assert "say hello" in json.dumps(fake_llm.requests[1]["messages"])  # the tool call reached Strands' model
    answer = json.loads(tool_messages(fake_llm.requests[2])[0])
    assert answer["status"] == "completed", answer
    assert answer["output"].strip() == "hello from strands"  # Strands ends its text artifact with a newline


async def test_strands_client_calls_our_workflow(
    strands_python: str, strands_proxy: str, client: Client, executor: Any, gateway: Any, fake_llm: FakeOpenAIServer
) -> None:
    """Strands' A2AAgent (a2a-sdk 0.3 client) calls our workflow through the gateway; the workflow runs (its remote
    Strands node answers) and the client gets the final.

    Strands reads only the *text* parts of the last event of the stream, our final status update, whose message
    carries the workflow's output as text (docs/interop.md)."""
    fake_llm.script("hi via the gateway")
    await executor({"strands_flow": FLOW})
    await client.registry.wait_for("strands_flow", 5)
    url = await gateway()
    proc = await asyncio.create_subprocess_exec(
        strands_python,
        str(SCRIPTS / "strands_client.py"),
        f"{url}/agents/strands_flow",
        json.dumps({"topic": "gateway"}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await within(proc.communicate(), 90, "Strands' client")
    assert proc.returncode == 0, err.decode()[-3000:]
    (line,) = out.decode().splitlines()
    shown = json.loads(json.loads(line)["text"].strip())
    assert shown["said"].strip() == "hi via the gateway", "the workflow's output, as the final's text"
    assert len(fake_llm.requests) == 1  # the workflow's Strands node ran once
