"""The proxy process of one remote agent (``a2amesh remote serve FILE``): an agent host whose runtime forwards.

Until the remote's card can be fetched and used, the proxy serves nothing and says why once (one error line
naming the URL and the problem, again only when the problem changes), trying again with backoff; the rest of
the mesh is not affected. Once it has a card it publishes it under the mesh name and serves the agent's
subjects. The card is fetched again every ``refresh`` seconds and soon after a task failed to reach the remote;
a changed card replaces the runtime (tasks running finish on the old one), a failed refresh keeps the last card.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.node_handler import NodeHandler
from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.errors import RemoteError
from a2amesh.lifecycle import Worker, side_task
from a2amesh.logs import get_logger
from a2amesh.remote.cards import RemoteCard, fetch_card, mesh_card, mesh_name
from a2amesh.remote.http import make_http_client
from a2amesh.remote.limit import MeshSemaphore
from a2amesh.remote.runtime import RemoteRuntime
from a2amesh.remote.spec import RemoteSpec
from a2amesh.service import ProcessService
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis

__all__ = ["RemoteWorker", "remote_service"]

RETRY_LIMIT = 60.0
"""Most seconds between two attempts to fetch a card that could not be used."""
FAILURE_REFRESH_GAP = 5.0
"""Fewest seconds between two card refreshes asked for by failing tasks."""


class RemoteWorker(Worker):
    """Makes one remote agent a member of the mesh (see the module doc)."""

    def __init__(self, spec: RemoteSpec, *, source: str, bus: Bus, redis: Redis, settings: Settings) -> None:
        super().__init__()
        self.spec = spec
        self.source = source
        self.bus = bus
        self.redis = redis
        self.settings = settings
        self.http: httpx.AsyncClient = make_http_client(spec, source=source)
        self.host: AgentHost | None = None
        self.name: str | None = None
        self._wake = asyncio.Event()
        self.gate: MeshSemaphore | None = None
        self.log = get_logger("remote", url=spec.url)

    def definition(self, name: str, remote: RemoteCard) -> AgentDefinition:
        """The agent definition the host serves (its handler names the runtime; nothing imports it)."""
        card = mesh_card(self.spec, remote, self.settings.namespace, name)
        return AgentDefinition(
            name=name,
            description=card.description,
            handler="a2amesh.remote.runtime:RemoteRuntime",
            input_schema=card.input_schema,
            output_schema=card.output_schema,
            max_retries=0,
            max_concurrency=self.spec.max_concurrency,
            replicas=self.spec.replicas,
            timeout=self.spec.task_timeout,
            mcp_export=self.spec.mcp_export,
        )

    def runtime(self, name: str, remote: RemoteCard, *, problem: str | None = None) -> NodeHandler:
        """The runtime for this card, wrapped in the node handler (schemas, node results) like any agent's;
        ``problem``: why the remote's card cannot be fetched now (its card says so)."""
        card = mesh_card(self.spec, remote, self.settings.namespace, name, problem=problem)
        if self.gate is None and self.spec.mesh_concurrency is not None:
            key = Keys(self.settings.namespace).remote_slots(name)
            self.gate = MeshSemaphore(self.redis, key, self.spec.mesh_concurrency)
        forward = RemoteRuntime(
            self.definition(name, remote), self.spec, remote, card, self.http, on_failure=self._wake.set, gate=self.gate
        )
        return NodeHandler(forward)

    async def run(self) -> None:
        """Serve until asked to stop."""
        try:
            remote = await self._first_card()
            if remote is None:
                return
            self.name = mesh_name(self.spec, remote)
            self.host = AgentHost(
                self.runtime(self.name, remote), bus=self.bus, redis=self.redis, settings=self.settings
            )
            hosting = await self.host.start(self._stop)
            self.log.info(
                "remote.serving", agent=self.name, endpoint=remote.url, binding=remote.binding, version=remote.version
            )
            self.ready.set()
            async with side_task(self._refresh(remote), name=f"{self.name}-card-refresh"):
                await hosting
        finally:
            await self.http.aclose()
            self._stopped.set()

    async def _first_card(self) -> RemoteCard | None:
        """The remote's card, tried until it can be used or the worker is stopped (then None)."""
        delay, said = 1.0, ""
        while not self._stop.is_set():
            try:
                return await fetch_card(self.http, self.spec)
            except RemoteError as e:
                if str(e) != said:
                    self.log.error("remote.card_unusable", problem=e.problem, source=self.source, retry_in=delay)
                    said = str(e)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()
            delay = min(delay * 2, RETRY_LIMIT, self.spec.refresh)
        return None

    async def _refresh(self, current: RemoteCard) -> None:
        assert self.host is not None
        assert self.name is not None
        problem: str | None = None
        while True:
            try:
                async with asyncio.timeout(self.spec.refresh):
                    await self._wake.wait()
                await asyncio.sleep(FAILURE_REFRESH_GAP)  # woken by failing tasks: one refresh for a burst
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                fresh = await fetch_card(self.http, self.spec)
            except RemoteError as e:
                self.log.warning("remote.card_refresh_failed", problem=e.problem, agent=self.name)
                if problem != e.problem:  # the card shows the remote unreachable (the last card still serves)
                    problem = e.problem
                    await self.host.replace_runtime(self.runtime(self.name, current, problem=problem))
                continue
            if fresh.same_as(current) and problem is None:
                continue
            current, problem = fresh, None
            await self.host.replace_runtime(self.runtime(self.name, fresh))
            self.log.info("remote.card_changed", agent=self.name, endpoint=fresh.url, binding=fresh.binding)


def remote_service(spec: RemoteSpec, settings: Settings, *, source: str) -> ProcessService:
    """The process of one proxy replica."""
    return ProcessService(
        settings,
        name=f"remote:{spec.name or spec.url}",
        build=lambda bus, redis: RemoteWorker(spec, source=source, bus=bus, redis=redis, settings=settings),
    )
