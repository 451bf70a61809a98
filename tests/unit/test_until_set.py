"""``lifecycle.until_set``: an async iteration that ends when an event is set, even while waiting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

from a2amesh.lifecycle import until_set


async def slow(closed: list[bool]) -> AsyncGenerator[int, None]:
    try:
        yield 1
        await asyncio.Event().wait()  # never
        yield 2
    finally:
        closed.append(True)


async def test_ends_when_set_while_waiting() -> None:
    stop = asyncio.Event()
    closed: list[bool] = []
    items = slow(closed)
    got = []
    first = asyncio.Event()

    async def consume() -> None:
        async for item in until_set(stop, items):
            got.append(item)
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 2)
    stop.set()
    await asyncio.wait_for(task, 2)
    assert got == [1]
    await items.aclose()
    assert closed == [True]


async def test_passes_everything_through_when_never_set() -> None:
    async def three() -> AsyncIterator[int]:
        for i in range(3):
            yield i

    assert [i async for i in until_set(asyncio.Event(), three())] == [0, 1, 2]
