"""Bounded waiting: await a condition with a timeout and a message saying what did not happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(check: Callable[[], Awaitable[T] | T], *, timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns a truthy value; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
            value = await value  # type: ignore[assignment]
        if value:
            return value  # type: ignore[return-value]
        last = value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last value: {last!r})")
        await asyncio.sleep(interval)


async def within(awaitable: Awaitable[T], timeout: float, what: str) -> T:
    """Await ``awaitable`` for at most ``timeout`` seconds, failing with ``what``."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}") from None
