"""Runtimes: which runtime a task runs on, and when a replaced one is closed."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog.testing

from a2amesh.agent.runtimes import Runtimes
from a2amesh.logs import get_logger


class FakeRuntime:
    def __init__(self, fail: bool = False) -> None:
        self.closed = 0
        self.fail = fail

    async def aclose(self) -> None:
        self.closed += 1
        if self.fail:
            raise OSError("connection pool already gone")


def runtimes(first: Any) -> Runtimes:
    return Runtimes(first, log=get_logger("test"))


async def test_a_task_keeps_its_runtime_and_the_last_one_closes_it() -> None:
    old, new = FakeRuntime(), FakeRuntime()
    slot = runtimes(old)
    a, b = slot.acquire(), slot.acquire()
    assert a is b is old
    await slot.replace(new)  # type: ignore[arg-type]
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
    await slot.replace(old)  # type: ignore[arg-type]
    assert old.closed == 0
    await slot.replace(new)  # type: ignore[arg-type]
    assert old.closed == 1


async def test_aclose_closes_the_current_and_the_retired_and_survives_a_failing_close() -> None:
    old, new = FakeRuntime(fail=True), FakeRuntime()
    slot = runtimes(old)
    slot.acquire()
    await slot.replace(new)  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        await slot.aclose()
    assert (old.closed, new.closed) == (1, 1)
    assert [e["event"] for e in logs] == ["agent.close_failed"]
    assert logs[0]["error"] == "connection pool already gone"
