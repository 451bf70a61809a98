"""The pooled LLM host (``a2amesh llm-host``): every enabled stored LLM agent served as its own A2A agent.

Each stored LLM agent (``/api/llm-agents``, ``a2amesh llm-agents apply``) gets an :class:`AgentHost` of its
own in this process — its own card, durable consumer, control subject and concurrency — on the process's
one NATS and Redis connection. The pool listens to the agents' lifecycle events
(``{ns}.events.agent.*.created|updated|deleted``) and reconciles with the store on each and every
``interval`` seconds. An update swaps the agent's runtime in place (new tasks use it, running ones finish
on theirs; the card is re-published); a delete or a disable stops that agent's host (running tasks finish
within the shutdown grace, the rest is handed back). A version that does not load is reported once and
leaves the last good one served.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from a2amesh.agent.definition import parse_agent
from a2amesh.agent.host import AgentHost
from a2amesh.agent.llm_agent import LlmAgent
from a2amesh.agent.node_handler import NodeHandler
from a2amesh.bus.nats import Bus, Received, Subscription
from a2amesh.bus.setup import init_mesh
from a2amesh.config import Settings
from a2amesh.errors import ConfigError, WorkerNotReady
from a2amesh.lifecycle import Worker, reconcile_forever, side_task
from a2amesh.logs import get_logger
from a2amesh.store.definitions import LLM_AGENTS, DefinitionHead, DefinitionStore, definition_body
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis

__all__ = ["LlmAgentPool"]

_EVENTS = ("created", "updated", "deleted")
_START_LIMIT = 15.0
"""Seconds an agent's host may take to publish its card."""


@dataclass
class _Hosted:
    etag: str
    host: AgentHost
    stop: asyncio.Event
    task: asyncio.Task[None]


class LlmAgentPool(Worker):
    """Serves every enabled stored LLM agent; ``run()`` returns when every agent's host has stopped.

    Args:
        bus: an open bus (not closed here).
        redis: a Redis client (not closed here).
        settings: the process settings (the LLM endpoint, key and model come from them).
        interval: seconds between reconciles with the store when no event came.
    """

    def __init__(self, *, bus: Bus, redis: Redis, settings: Settings, interval: float = 5.0) -> None:
        super().__init__()
        self.bus = bus
        self.redis = redis
        self.settings = settings
        self.interval = interval
        self.store = DefinitionStore(redis, Keys(settings.namespace), kind=LLM_AGENTS)
        self.hosts: dict[str, _Hosted] = {}
        self.log = get_logger("llm-host")
        self._failed: dict[str, str] = {}
        self._wake = asyncio.Event()

    async def run(self) -> None:
        """Serve until :meth:`shutdown`."""
        await init_mesh(self.bus, self.settings)
        subs: list[Subscription] = []

        async def on_event(msg: Received) -> None:
            self._wake.set()

        try:
            for event in _EVENTS:
                subs.append(await self.bus.subscribe(self.bus.subjects.agent_events_of(event), on_event))
            await self.sync()
            self.log.info("llm_host.ready", agents=sorted(self.hosts))
            self.ready.set()
            async with side_task(self._loop(), name="llm-host-sync"):
                await self._stop.wait()
        finally:
            for sub in subs:
                await sub.unsubscribe()
            await asyncio.gather(*(self._stop_host(name) for name in list(self.hosts)))
            self.log.info("llm_host.stopped")
            self._stopped.set()

    async def _loop(self) -> None:
        await reconcile_forever(self._wake, self.interval, self.sync, log=self.log, failed="llm_host.sync_failed")

    async def sync(self) -> None:
        """Bring the hosted agents in line with the enabled stored ones."""
        heads = {h.id: h for h in await self.store.heads() if h.enabled}
        for name in [n for n in self.hosts if n not in heads]:
            await self._stop_host(name)
        for name, head in heads.items():
            hosted = self.hosts.get(name)
            if hosted is not None and hosted.etag == head.etag:
                continue
            runtime = await self._runtime(head)
            if runtime is None:
                continue
            if hosted is None:
                await self._start_host(name, head.etag, runtime)
            else:
                await hosted.host.replace_runtime(runtime)
                hosted.etag = head.etag
                self.log.info("llm_agent.updated", agent=name, version=head.version)

    async def _runtime(self, head: DefinitionHead) -> NodeHandler | None:
        if self._failed.get(head.id) == head.etag:
            return None
        document = await self.store.document(head.id, head.version)
        source = f"stored LLM agent {head.id} v{head.version}"
        try:
            definition = parse_agent(definition_body(document), source)
            if definition.llm is None or definition.name != head.id:
                raise ConfigError(source, "llm", "not an LLM agent named by its id")
            agent = LlmAgent.from_definition(definition, settings=self.settings, base_dir=None, source=source)
        except ConfigError as e:
            self._failed[head.id] = head.etag
            self.log.error("llm_agent.invalid", agent=head.id, version=head.version, error=str(e))
            return None
        self._failed.pop(head.id, None)
        return NodeHandler(agent)

    async def _start_host(self, name: str, etag: str, runtime: Any) -> None:
        host = AgentHost(runtime, bus=self.bus, redis=self.redis, settings=self.settings)
        stop = asyncio.Event()
        try:
            task = await host.start(stop, limit=_START_LIMIT)  # owned by _Hosted
        except WorkerNotReady as e:
            self.log.error("llm_agent.not_served", agent=name, error=str(e))
            return
        self.hosts[name] = _Hosted(etag, host, stop, task)
        self.log.info("llm_agent.served", agent=name)

    async def _stop_host(self, name: str) -> None:
        hosted = self.hosts.pop(name, None)
        if hosted is None:
            return
        hosted.stop.set()
        try:
            async with asyncio.timeout(self.settings.shutdown_grace + 10):
                await asyncio.shield(hosted.task)
        except Exception as e:
            self.log.warning("llm_agent.stop_failed", agent=name, error=str(e) or type(e).__name__)
        # the host closes its runtime's HTTP connections as it stops (AgentHost.run)
        self.log.info("llm_agent.removed", agent=name)
