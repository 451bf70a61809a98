"""Process-level services: own the bus and Redis connections around one worker (agent host or executor)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from a2amesh.agent.host import AgentHost
from a2amesh.agent.python_agent import AgentRuntime
from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.lifecycle import Worker
from a2amesh.store.redis import Redis, connect_redis


class ProcessService:
    """One process: connect to NATS and Redis, serve with the worker ``build`` makes, close everything.

    Args:
        settings: the process's settings.
        name: the NATS connection name.
        build: makes the worker from the open connections.
    """

    def __init__(self, settings: Settings, *, name: str, build: Callable[[Bus, Redis], Worker]) -> None:
        self.settings = settings
        self.name = name
        self.build = build
        self.worker: Worker | None = None
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Serve until :meth:`shutdown`."""
        bus = await Bus.connect(self.settings, name=self.name)
        try:
            redis = await connect_redis(self.settings)
            try:
                self.worker = self.build(bus, redis)
                if self._stop.is_set():
                    return
                await self.worker.run_until(self._stop)
            finally:
                await redis.aclose()
        finally:
            await bus.close()

    async def shutdown(self) -> None:
        """Ask the service to stop (idempotent); ``run()`` returns once work is finished or handed back."""
        self._stop.set()


def agent_service(runtime: AgentRuntime, settings: Settings) -> ProcessService:
    """The process of one agent replica."""
    return ProcessService(
        settings,
        name=f"agent:{runtime.definition.name}",
        build=lambda bus, redis: AgentHost(runtime, bus=bus, redis=redis, settings=settings),
    )
