"""This replica's presence: announced every ``ttl/3``; when it may have lapsed, the runners stop first.

Other replicas release the leases of a replica whose presence expired and take its executions over
(:meth:`~a2amesh.store.presence.ExecutorPresence.release_dead`, from :meth:`Takeover.tick`), a few
seconds after a crash instead of a whole lease later. So that this never happens to a replica that is
merely slow (a stalled loop, a slow Redis) while it still drives, a replica counts itself present only
until ``ttl`` minus a margin after the start of its last successful renewal: past that, each runner stops
at its next step (:meth:`PresenceKeeper.alive`, read by the runner), and the runners that lived through
the gap are stopped when the next renewal lands. Their executions are then taken over as after a crash
(maybe by this replica). The epoch fence still refuses any write of a runner that was too late.
"""

from __future__ import annotations

import asyncio
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
        self._valid_until = 0.0  # monotonic

    def alive(self) -> bool:
        """Whether this replica's presence surely still stands (its runners may act)."""
        return time.monotonic() < self._valid_until

    async def announce(self) -> None:
        """Renew the presence once; stop the runners that lived through a gap in it."""
        started = time.monotonic()
        await self.presence.announce(self.instance)
        if time.monotonic() >= self._valid_until > 0:
            self._stop_runners()  # the key may have lapsed before this renewal landed
        self._valid_until = started + self.ttl * (1 - PRESENCE_MARGIN)

    async def run(self) -> None:
        """Renew every ``ttl/3`` until cancelled."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.announce()
            except Exception as e:
                self.log.warning("executor.presence_failed", error=str(e) or type(e).__name__)

    async def withdraw(self) -> None:
        """Remove the presence (a clean stop, once the executions are handed over)."""
        await self.presence.withdraw(self.instance)

    def _stop_runners(self) -> None:
        stopped = 0
        for runner in list(self.runners.values()):
            if not runner.lost:
                runner.lost = True
                runner.inbox.put_nowait(_WAKE)
                stopped += 1
        if stopped:
            self.log.warning("executor.presence_lapsed", stopped=stopped)
