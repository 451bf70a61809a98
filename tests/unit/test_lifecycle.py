"""cancel_and_wait: a task that swallowed a cancellation is cancelled again; a stubborn one is left behind."""

from __future__ import annotations

import asyncio

from a2amesh.lifecycle import cancel_and_wait


async def test_a_swallowed_cancellation_is_delivered_again() -> None:
    seen: list[str] = []

    async def swallows_once() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("first")  # dropped, as a library racing a reply can drop it
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("second")
            raise

    task = asyncio.create_task(swallows_once())
    await asyncio.sleep(0)
    assert await cancel_and_wait(task, limit=30, every=0.05)
    assert task.cancelled()
    assert seen == ["first", "second"]


async def test_a_task_that_never_stops_is_left_behind_at_the_limit() -> None:
    release = asyncio.Event()
    cancels = 0

    async def stubborn() -> str:
        nonlocal cancels
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancels += 1
        return "released"

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    assert not await cancel_and_wait(task, limit=0.2, every=0.05)
    assert not task.done()
    assert cancels >= 2
    release.set()
    assert await task == "released"


async def test_an_error_raised_on_the_way_out_is_not_raised_to_the_canceller() -> None:
    async def fails_when_cancelled() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("clean-up failed") from None

    task = asyncio.create_task(fails_when_cancelled())
    await asyncio.sleep(0)
    assert await cancel_and_wait(task, limit=30, every=0.05)
    assert isinstance(task.exception(), RuntimeError)


async def test_a_finished_task_is_not_cancelled() -> None:
    async def done() -> int:
        return 7

    task = asyncio.create_task(done())
    await task
    assert await cancel_and_wait(task, limit=1)
    assert task.result() == 7
