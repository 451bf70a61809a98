"""Process-level services: own the bus and Redis connections around a host (agent or executor)."""

from __future__ import annotations

import asyncio

from a2amesh.agent.host import AgentHost
from a2amesh.agent.python_agent import AgentRuntime
from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.store.redis import connect_redis


class AgentService:
    """One agent process: connect, serve with an :class:`AgentHost`, close everything on shutdown."""

    def __init__(self, runtime: AgentRuntime, settings: Settings) -> None:
        self.runtime = runtime
        self.settings = settings
        self.host: AgentHost | None = None
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Serve until :meth:`shutdown`."""
        bus = await Bus.connect(self.settings, name=f"agent:{self.runtime.definition.name}")
        try:
            redis = await connect_redis(self.settings)
            try:
                self.host = AgentHost(self.runtime, bus=bus, redis=redis, settings=self.settings)
                if self._stop.is_set():
                    return
                await self.host.run_until(self._stop)
            finally:
                await redis.aclose()
        finally:
            await bus.close()

    async def shutdown(self) -> None:
        """Ask the service to stop (idempotent); ``run()`` returns once work is finished or handed back."""
        self._stop.set()
