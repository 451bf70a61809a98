"""Bounded waiting: await a condition with a timeout and a message saying what did not happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def eventually(
    check: Callable[[], Awaitable[T | None]], *, timeout: float, what: str, interval: float = 0.05
) -> T: ...


@overload
async def eventually(check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.05) -> T: ...


async def eventually(check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``check`` (a function, or an async one) until it returns a truthy value; fail with ``what`` after
    ``timeout`` seconds. That value is returned (so never None)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        last = value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last value: {last!r})")
        await asyncio.sleep(interval)


async def within(awaitable: Awaitable[T], timeout: float, what: str) -> T:
    """Await ``awaitable`` for at most ``timeout`` seconds, failing with ``what``."""
    try:
        async with asyncio.timeout(timeout):
            return await awaitable
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}") from None
