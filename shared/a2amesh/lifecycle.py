"""The lifecycle every long-running worker shares (agent host, workflow executor).

``run()`` serves until ``shutdown()`` (or the event given to ``run_until``) and returns when shutdown
is done; ``shutdown()`` is idempotent, safe before ``run()``, and waits.
"""

from __future__ import annotations

import asyncio


class Worker:
    """Base of the agent host and the workflow executor: ``ready``, ``run_until`` and ``shutdown``."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._stopped = asyncio.Event()

    async def run(self) -> None:
        """Serve until asked to stop; subclasses set ``ready`` once serving and ``_stopped`` when done."""
        raise NotImplementedError

    async def run_until(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set."""
        self._stop = stop
        await self.run()

    async def shutdown(self) -> None:
        """Ask the worker to stop and wait until it has (idempotent, safe before ``run()``)."""
        self._stop.set()
        if self.ready.is_set():
            await self._stopped.wait()
