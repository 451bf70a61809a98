"""A small unbounded queue for one consumer, for objects that live as long as an execution or a call.

``asyncio.Queue`` allocates three deques and an Event (about 2 KB even when empty); a mesh holding
10,000 executions in flight keeps one queue per execution and one per call. A mailbox is a list and,
only while its consumer waits, one future.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

__all__ = ["Mailbox"]

T = TypeVar("T")


class Mailbox(Generic[T]):
    """Unbounded, first in first out, one consumer (``get``/``take_all``), any number of producers."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: T) -> None:
        """Add an item and wake the consumer (safe from callbacks and other tasks of the loop)."""
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    def __len__(self) -> int:
        return len(self._items)

    async def wait(self) -> None:
        """Return once at least one item is there."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def get(self) -> T:
        """The oldest item, waiting for one."""
        await self.wait()
        return self._items.pop(0)

    def take_all(self) -> list[T]:
        """Every item there now, oldest first (empty list when none)."""
        items, self._items = self._items, []
        return items
