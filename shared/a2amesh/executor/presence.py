"""This replica's presence: renewed every ``ttl/3`` from a thread; when it may have lapsed, the runners stop.

Other replicas release the leases of a replica whose presence expired and take its executions over
(:meth:`~a2amesh.store.presence.ExecutorPresence.release_dead`, from :meth:`Takeover.tick`), a few
seconds after a crash instead of a whole lease later. The renewals run in a thread of their own, with
their own event loop and Redis connection, so a busy event loop (10,000 executions stepping at once)
does not hold them up: presence says that the process lives, and a stalled loop is still bounded by the
lease as before. So that a replica that is merely frozen or cut off from Redis is not taken over while
it still drives, it counts itself present only until ``ttl`` minus a margin after the start of its last
renewal that landed: past that, each runner stops at its next step (:meth:`PresenceKeeper.alive`, read by
the runner), and when a renewal lands after such a gap every runner that lived through it is stopped
before any takes another step. Each such runner hands its lease over when it has stopped (if it still
holds it), so its execution is taken over at once (maybe by this replica) rather than a lease later. The
epoch fence still refuses any write of a runner that was too late.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Mapping
from typing import Any

from a2amesh.store.presence import ExecutorPresence
from a2amesh.workflow.events import TimerFired

__all__ = ["PRESENCE_MARGIN", "PresenceKeeper"]

PRESENCE_MARGIN = 0.2
"""Share of the presence TTL a replica gives up at the end, for the clocks of two hosts and Redis."""

_WAKE = TimerFired(timer_id="__wake__")


class PresenceKeeper:
    """Keeps one replica's presence key alive and tells its runners whether they may still act.

    Args:
        presence: the store's presence keys.
        instance: this replica's instance id.
        runners: the runners of the executions driven here (read when stopping them).
        log: the executor's logger.
    """

    def __init__(self, presence: ExecutorPresence, instance: str, runners: Mapping[str, Any], log: Any) -> None:
        self.presence = presence
        self.instance = instance
        self.runners = runners
        self.log = log
        self.ttl = presence.ttl_ms / 1000
        self._valid_until = 0.0  # monotonic; written by the renewal thread, read by the runners
        self._gap = False  # a renewal landed after a gap: no runner steps until they are all stopped
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def alive(self) -> bool:
        """Whether this replica's presence surely still stands (its runners may act)."""
        return not self._gap and time.monotonic() < self._valid_until

    async def start(self) -> None:
        """Announce once (before anything is driven), then renew from the thread."""
        started = time.monotonic()
        await self.presence.announce(self.instance)
        self._valid_until = started + self.ttl * (1 - PRESENCE_MARGIN)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._renew_forever, name="executor-presence", daemon=True)
        self._thread.start()

    async def withdraw(self) -> None:
        """Stop renewing and remove the presence (a clean stop, once the executions are handed over)."""
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5)
        await self.presence.withdraw(self.instance)

    def _renew_forever(self) -> None:
        loop = asyncio.new_event_loop()
        own = self.presence.on_own_connection()
        try:
            while not self._stop.wait(self.ttl / 3):
                started = time.monotonic()
                try:
                    loop.run_until_complete(self._announce(own))
                except Exception as e:
                    self._call(self.log.warning, "executor.presence_failed", error=str(e) or type(e).__name__)
                    continue
                if time.monotonic() >= self._valid_until:
                    self._gap = True  # the key may have lapsed before this renewal landed
                    self._call(self._stop_runners)
                self._valid_until = started + self.ttl * (1 - PRESENCE_MARGIN)
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(own.aclose())
            loop.close()

    async def _announce(self, own: ExecutorPresence) -> None:
        async with asyncio.timeout(self.ttl):
            await own.announce(self.instance)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        """Run ``fn`` on the executor's loop (from the renewal thread)."""
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
            self._loop.call_soon_threadsafe(lambda: fn(*args, **kwargs))

    def _stop_runners(self) -> None:
        stopped = 0
        for runner in list(self.runners.values()):
            if not runner.lost:
                runner.lost = runner.fenced = True
                runner.inbox.put_nowait(_WAKE)
                stopped += 1
        self._gap = False
        self.log.warning("executor.presence_lapsed", stopped=stopped)
