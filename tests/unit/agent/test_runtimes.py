"""Runtimes: which runtime a task runs on, and when a replaced one is closed."""

from __future__ import annotations

import asyncio

import structlog.testing

from a2amesh.agent.context import TaskContext, TaskOutcome
from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.runtimes import Runtimes
from a2amesh.logs import get_logger
from a2amesh.protocol import AgentCard


class FakeRuntime:
    """An ``AgentRuntime`` that only counts its closes (no task runs on it here)."""

    definition: AgentDefinition

    def __init__(self, fail: bool = False) -> None:
        self.closed = 0
        self.fail = fail

    def card(self, namespace: str) -> AgentCard:
        raise NotImplementedError

    async def run(self, ctx: TaskContext) -> TaskOutcome:
        raise NotImplementedError

    async def aclose(self) -> None:
        self.closed += 1
        if self.fail:
            raise OSError("connection pool already gone")


def runtimes(first: FakeRuntime) -> Runtimes:
    return Runtimes(first, log=get_logger("test"))


async def test_a_task_keeps_its_runtime_and_the_last_one_closes_it() -> None:
    old, new = FakeRuntime(), FakeRuntime()
    slot = runtimes(old)
    a, b = slot.acquire(), slot.acquire()
    assert a is b is old
    await slot.replace(new)
    assert slot.acquire() is new
    slot.release(a)
    await asyncio.sleep(0)
    assert old.closed == 0, "closed while a task still ran on it"
    slot.release(b)
    for _ in range(3):
        await asyncio.sleep(0)
    assert (old.closed, new.closed) == (1, 0)


async def test_an_idle_runtime_closes_at_once_and_replacing_with_itself_closes_nothing() -> None:
    old, new = FakeRuntime(), FakeRuntime()
    slot = runtimes(old)
    await slot.replace(old)
    assert old.closed == 0
    await slot.replace(new)
    assert old.closed == 1


async def test_aclose_closes_the_current_and_the_retired_and_survives_a_failing_close() -> None:
    old, new = FakeRuntime(fail=True), FakeRuntime()
    slot = runtimes(old)
    slot.acquire()
    await slot.replace(new)
    with structlog.testing.capture_logs() as logs:
        await slot.aclose()
    assert (old.closed, new.closed) == (1, 1)
    assert [e["event"] for e in logs] == ["agent.close_failed"]
    assert logs[0]["error"] == "connection pool already gone"
