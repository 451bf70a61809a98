"""Run a long-lived service (an agent, the executor) in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from a2amesh.config import Settings
from a2amesh.errors import UsageError
from a2amesh.lifecycle import side_task

__all__ = ["METRICS_HELP", "serve_metrics", "serve_until_signal"]

METRICS_HELP = "serve Prometheus metrics on this port of 127.0.0.1 (also A2AMESH_METRICS_PORT, A2AMESH_METRICS_HOST)"


def serve_metrics(settings: Settings) -> None:
    """Serve this process's Prometheus metrics on ``settings.metrics_port``, when set (docs/observability.md).

    Raises:
        UsageError: the port cannot be bound.
    """
    if settings.metrics_port is None:
        return
    from a2amesh import metrics

    try:
        metrics.serve(settings.metrics_port, settings.metrics_host)
    except OSError as e:
        raise UsageError(f"metrics port {settings.metrics_host}:{settings.metrics_port}: {e.strerror or e}") from e


async def serve_until_signal(
    run: Callable[[], Coroutine[Any, Any, None]], shutdown: Callable[[], Awaitable[None]]
) -> None:
    """Run ``run()``; a signal sets an event, and the event calls ``shutdown()`` (signals never cancel)."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def on_signal() -> None:
        stopping.set()

    async def stop_when_signalled() -> None:
        await stopping.wait()
        await shutdown()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    async with side_task(stop_when_signalled(), name="a2amesh-signals"):
        await run()
