"""Run a long-lived service (an agent, the executor) in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

__all__ = ["serve_until_signal"]


async def serve_until_signal(
    run: Callable[[], Coroutine[Any, Any, None]], shutdown: Callable[[], Awaitable[None]]
) -> None:
    """Run ``run()``; a signal sets an event, and the event calls ``shutdown()`` (signals never cancel)."""
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(run())
    stopping = asyncio.Event()

    def on_signal() -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    waiter = asyncio.create_task(stopping.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if stopping.is_set() and not task.done():
        await shutdown()
    waiter.cancel()
    await task
