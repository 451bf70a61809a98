"""``Worker.start`` and ``async with``: one way to start a worker and wait until it serves."""

from __future__ import annotations

import asyncio

import pytest

from a2amesh.errors import WorkerNotReady
from a2amesh.lifecycle import Worker


class Serving(Worker):
    """Ready at once; serves until stopped, then records that it stopped cleanly."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped_cleanly = False

    async def run(self) -> None:
        self.ready.set()
        try:
            await self._stop.wait()
            self.stopped_cleanly = True
        finally:
            self._stopped.set()


class Failing(Worker):
    async def run(self) -> None:
        raise RuntimeError("no NATS here")


class Slow(Worker):
    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False

    async def run(self) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def test_async_with_serves_inside_and_stops_on_exit() -> None:
    worker = Serving()
    async with worker:
        assert worker.ready.is_set()
        assert not worker.stopped_cleanly
    assert worker.stopped_cleanly


async def test_start_returns_the_running_task_and_stops_with_the_given_event() -> None:
    worker, stop = Serving(), asyncio.Event()
    task = await worker.start(stop)
    assert not task.done()
    stop.set()
    async with asyncio.timeout(5):
        await task
    assert worker.stopped_cleanly


async def test_a_worker_that_fails_before_serving_is_reported_with_its_error() -> None:
    with pytest.raises(WorkerNotReady, match="ended before it was ready: no NATS here") as e:
        await Failing().start()
    assert isinstance(e.value.__cause__, RuntimeError)


async def test_a_worker_not_ready_in_time_is_stopped_and_reported() -> None:
    worker = Slow()
    with pytest.raises(WorkerNotReady, match="was not ready within 0.2 s"):
        await worker.start(limit=0.2)
    assert worker.cancelled
