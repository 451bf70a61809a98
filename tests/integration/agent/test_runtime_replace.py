"""An agent whose runtime is replaced (a stored LLM agent updated): running tasks finish on the old runtime,
which is closed after the last of them; an idle old runtime is closed at once."""

from __future__ import annotations

import asyncio
from typing import Any

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.node_handler import NodeHandler
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.client import Client
from a2amesh.protocol import TaskState
from tests.support.waiting import eventually, within


class ClosingAgent(PythonAgent):
    """A Python agent that answers with its version and records being closed (as an LLM agent's HTTP
    connections are)."""

    def __init__(self, version: str, release: asyncio.Event | None = None) -> None:
        self.started = asyncio.Event()
        self.closed = 0

        async def handler(input: Any, ctx: Any) -> Any:
            self.started.set()
            if release is not None:
                await release.wait()
            return {"version": version}

        super().__init__(AgentDefinition(name="versioned", handler="inline:handler"), handler)

    async def aclose(self) -> None:
        self.closed += 1


async def test_replaced_runtime_closes_after_its_last_task(agent_host: Any, client: Client) -> None:
    release = asyncio.Event()
    v1 = ClosingAgent("v1", release)
    host = await agent_host("versioned", runtime=NodeHandler(v1))
    running = asyncio.create_task(client.send("versioned", {"n": 1}))
    await within(v1.started.wait(), 10, "the first task to start on v1")

    v2 = ClosingAgent("v2")
    await host.replace_runtime(NodeHandler(v2))
    assert v1.closed == 0, "v1 was closed while a task still ran on it"

    second = await within(client.send("versioned", {"n": 2}), 10, "a task on v2")
    assert second.output() == {"version": "v2"}
    assert v1.closed == 0

    release.set()
    first = await within(running, 10, "the task on v1 to finish")
    assert (first.status.state, first.output()) == (TaskState.COMPLETED, {"version": "v1"})
    await eventually(lambda: v1.closed == 1, timeout=10, what="v1 to be closed after its last task")
    assert v2.closed == 0

    v3 = ClosingAgent("v3")
    await host.replace_runtime(NodeHandler(v3))
    assert v2.closed == 1, "an idle replaced runtime is closed at once"
    third = await within(client.send("versioned", {"n": 3}), 10, "a task on v3")
    assert third.output() == {"version": "v3"}
    assert (v1.closed, v2.closed, v3.closed) == (1, 1, 0)
