"""The proxies of every remote declared through the management API (``a2amesh remote serve --stored``).

One process serves them all: each stored declaration (``/api/remotes``, :class:`~a2amesh.remote.declare.RemoteStore`)
gets a :class:`~a2amesh.remote.service.RemoteWorker` of its own — its card, durable consumer, control subject,
HTTP client and limits — on the process's one NATS and Redis connection, each a task of one
:class:`asyncio.TaskGroup`. The process listens to ``{ns}.events.remote.*.created|deleted`` (published by the
management API after each change) and re-reads the store on each, and every ``interval`` seconds as the safety
net (an event is core NATS: one sent while the process was reconnecting is lost).

A new declaration starts its proxy (which publishes the card once the remote's card can be fetched; until then it
says why, see ``remote/service.py``). A removed one stops it: tasks in flight finish within the shutdown grace or
are handed back, and the card is withdrawn (deleted once no replica of it is left), so a later call gets
``AGENT_NOT_FOUND``. A declaration that changed (removed and added again under the same name) restarts it. Replicas
of this process each serve every stored remote, sharing each one's queue like an agent's replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from a2amesh.bus.nats import Bus, Received, Subscription
from a2amesh.config import Settings
from a2amesh.errors import ConfigError
from a2amesh.lifecycle import STOP_LIMIT, Worker, cancel_and_wait, reconcile_forever
from a2amesh.logs import get_logger
from a2amesh.remote.declare import REMOTE_EVENTS, RemoteStore, declaration
from a2amesh.remote.service import RemoteWorker
from a2amesh.remote.spec import RemoteSpec
from a2amesh.service import ProcessService
from a2amesh.store.redis import Redis

__all__ = ["StoredRemotes", "stored_remotes_service"]

RELIST_EVERY = 5.0
"""Seconds between re-reads of the store when no event came."""


@dataclass
class _Served:
    """One stored remote's proxy in this process."""

    declared: dict[str, Any]
    worker: RemoteWorker
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class StoredRemotes(Worker):
    """Serves every remote declared through the API (see the module doc); ``run()`` returns when every proxy has
    stopped.

    Args:
        bus: an open bus (not closed here).
        redis: a Redis client (not closed here).
        settings: the process settings.
        interval: seconds between re-reads of the store when no event came.
    """

    def __init__(self, *, bus: Bus, redis: Redis, settings: Settings, interval: float = RELIST_EVERY) -> None:
        super().__init__()
        self.bus = bus
        self.redis = redis
        self.settings = settings
        self.interval = interval
        self.store = RemoteStore(redis, settings.namespace)
        self.served: dict[str, _Served] = {}
        self.log = get_logger("remote")
        self._said: dict[str, str] = {}  # name → the last problem logged for it (each said once)
        self._wake = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None

    async def run(self) -> None:
        """Serve until :meth:`shutdown`."""
        subs: list[Subscription] = []

        async def on_event(msg: Received) -> None:
            self._wake.set()

        try:
            for event in REMOTE_EVENTS:
                subs.append(await self.bus.subscribe(self.bus.subjects.remote_events_of(event), on_event))
            async with asyncio.TaskGroup() as group:
                self._group = group
                try:
                    await self.sync()
                    self.log.info("remotes.ready", remotes=sorted(self.served))
                    self.ready.set()
                    syncing = group.create_task(
                        reconcile_forever(
                            self._wake, self.interval, self.sync, log=self.log, failed="remotes.sync_failed"
                        ),
                        name="stored-remotes-sync",
                    )
                    await self._stop.wait()
                    syncing.cancel()
                finally:
                    await asyncio.gather(*(self._stop_one(name, removed=False) for name in list(self.served)))
        finally:
            self._group = None
            for sub in subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            self.log.info("remotes.stopped")
            self._stopped.set()

    async def sync(self) -> None:
        """Bring the proxies in line with the stored declarations."""
        specs, unreadable = await self.store.readable()
        wanted = {spec.name: spec for spec in specs if spec.name is not None}
        for name, problem in unreadable.items():
            self._say(name, problem)
        gone = [n for n, s in self.served.items() if n not in wanted or declaration(wanted[n]) != s.declared]
        await asyncio.gather(*(self._stop_one(name, removed=True) for name in gone))
        for name in [n for n in self._said if n not in wanted and n not in unreadable]:
            del self._said[name]
        for name, spec in wanted.items():
            if name not in self.served:
                self._start_one(name, spec)

    def _start_one(self, name: str, spec: RemoteSpec) -> None:
        assert self._group is not None
        source = f"stored remote {name}"
        try:
            worker = RemoteWorker(spec, source=source, bus=self.bus, redis=self.redis, settings=self.settings)
        except ConfigError as e:  # a secret it names cannot be read here: tried again on each re-read
            self._say(name, str(e))
            return
        served = _Served(declaration(spec), worker)
        self.served[name] = served
        served.task = self._group.create_task(self._serve(name, served), name=f"remote-{name}")
        self.log.info("remote.added", agent=name, url=spec.url)

    async def _serve(self, name: str, served: _Served) -> None:
        """Run one proxy until it is stopped; one that ends on its own is logged and left to the next re-read."""
        try:
            await served.worker.run_until(served.stop)
        except Exception as e:
            self._say(name, f"remote agent {served.worker.spec.url}: its proxy stopped: {e}")
        finally:
            if not served.stop.is_set() and self.served.get(name) is served:
                del self.served[name]  # started again on the next re-read

    def _say(self, name: str, problem: str) -> None:
        if self._said.get(name) != problem:
            self._said[name] = problem
            self.log.error("remote.not_served", agent=name, problem=problem, retry_in=self.interval)

    async def _stop_one(self, name: str, *, removed: bool) -> None:
        served = self.served.pop(name, None)
        if served is None or served.task is None:
            return
        served.stop.set()
        try:
            async with asyncio.timeout(self.settings.shutdown_grace + 10):
                await asyncio.shield(served.task)
        except TimeoutError:  # a card fetch riding out its HTTP timeout, say: cancelled, so stopping stays bounded
            self.log.warning("remote.stop_slow", agent=name, cancelled_after=self.settings.shutdown_grace + 10)
            await cancel_and_wait(served.task, limit=STOP_LIMIT)
        if removed:
            self.log.info("remote.removed", agent=name)


def stored_remotes_service(settings: Settings) -> ProcessService:
    """The process that serves every remote declared through the API."""
    return ProcessService(
        settings,
        name="remotes",
        build=lambda bus, redis: StoredRemotes(bus=bus, redis=redis, settings=settings),
    )
