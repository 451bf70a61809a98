"""Schedule state in Redis (SPEC §7): one :class:`ScheduleState` per scheduled graph, and its timer.

- ``{ns}:{schedules}`` (hash): schedule id ``{workflow}/{branch}`` → ``ScheduleState`` JSON;
- ``{ns}:{schedules}:due`` (zset): schedule id → when (ms) an executor must look at it next — its
  next fire, or, while a continuous schedule's run is in flight, the fire of that run (so every tick
  checks whether it ended). Paused and one-time schedules have no timer.

Every write is a compare-and-set of the whole state (``schedule_cas.lua``) that moves the timer in
the same script, so replicas (and the CLI pausing a schedule) never undo each other's changes: a
writer that lost the race re-reads and decides again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError

from a2amesh.logs import get_logger
from a2amesh.schedules import MAIN_BRANCH, ScheduleState
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis, load_script

__all__ = ["ScheduleStore", "StoredSchedule", "schedule_id", "split_schedule_id", "timer_ms"]

log = get_logger("store.schedules")

CAS_ATTEMPTS = 20
"""Compare-and-set retries of one update before giving up (each loss means another writer moved on)."""


def schedule_id(workflow: str, branch: str | None) -> str:
    """The id of a schedule: ``{workflow}/{branch}`` (``main`` for the workflow's own graph)."""
    return f"{workflow}/{branch or MAIN_BRANCH}"


def split_schedule_id(text: str) -> tuple[str, str | None]:
    """``reports/daily`` → ``("reports", "daily")``; ``reports`` → ``("reports", None)`` (every branch)."""
    workflow, sep, branch = text.partition("/")
    return workflow, (branch if sep and branch else None)


def timer_ms(state: ScheduleState) -> int | None:
    """When (ms) an executor must look at a schedule next, or ``None`` (paused, nothing scheduled)."""
    if state.paused:
        return None
    if state.running and state.last_fire is not None:
        return int(state.last_fire.timestamp() * 1000)  # due at once: polled until its run ends
    if state.next_fire is None:
        return None
    return int(state.next_fire.timestamp() * 1000)


@dataclass(frozen=True)
class StoredSchedule:
    """One schedule as read from Redis.

    Attributes:
        id: ``{workflow}/{branch}``.
        raw: the stored JSON, exactly (the expected value of the next compare-and-set).
        state: the parsed state, or ``None`` when the stored JSON is not a valid state.
    """

    id: str
    raw: str
    state: ScheduleState | None


def _parse(schedule: str, raw: str) -> StoredSchedule:
    try:
        return StoredSchedule(schedule, raw, ScheduleState.model_validate_json(raw))
    except ValidationError as e:
        log.warning("schedule.invalid_state", schedule=schedule, error=str(e).splitlines()[0])
        return StoredSchedule(schedule, raw, None)


class ScheduleStore:
    """Schedule states and timers of one namespace.

    Args:
        redis: a Redis client (``decode_responses=True``).
        keys: the namespace's key builder.
    """

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._cas = redis.register_script(load_script("schedule_cas"))

    async def get(self, schedule: str) -> StoredSchedule | None:
        """One schedule, or ``None``."""
        raw = await self.redis.hget(self.keys.schedules(), schedule)
        return None if raw is None else _parse(schedule, str(raw))

    async def all(self) -> list[StoredSchedule]:
        """Every schedule, by id."""
        data = await self.redis.hgetall(self.keys.schedules())
        return [_parse(str(k), str(v)) for k, v in sorted(data.items())]

    async def due(self, now_ms: int, limit: int = 100) -> list[str]:
        """Ids of the schedules whose timer is due, earliest first."""
        ids = await self.redis.zrangebyscore(self.keys.schedule_timers(), "-inf", now_ms, start=0, num=limit)
        return [str(i) for i in ids]

    async def write(self, schedule: str, expected: str | None, state: ScheduleState | None) -> bool:
        """Compare-and-set: store ``state`` (``None`` deletes) if the stored JSON is still ``expected``.

        Args:
            schedule: the schedule id.
            expected: the JSON read before (``None``: the schedule must not exist).
            state: the new state, or ``None`` to delete the schedule and its timer.

        Returns:
            Whether it was written (``False``: someone else changed it first).
        """
        timer = None if state is None else timer_ms(state)
        result = await self._cas(
            keys=[self.keys.schedules(), self.keys.schedule_timers()],
            args=[
                schedule,
                expected or "",
                "" if state is None else state.model_dump_json(),
                "" if timer is None else timer,
            ],
        )
        return int(result) == 1

    async def update(self, schedule: str, change: Callable[[ScheduleState], ScheduleState]) -> ScheduleState | None:
        """Apply ``change`` to a schedule's current state, retrying when another writer got there first.

        Returns:
            The state written, or ``None`` when the schedule does not exist.

        Raises:
            RuntimeError: the schedule kept changing under us (``CAS_ATTEMPTS`` lost races).
        """
        for _ in range(CAS_ATTEMPTS):
            stored = await self.get(schedule)
            if stored is None or stored.state is None:
                return None
            new = change(stored.state)
            if await self.write(schedule, stored.raw, new):
                return new
        raise RuntimeError(f"schedule {schedule}: lost {CAS_ATTEMPTS} concurrent updates in a row")

    async def pause(self, schedule: str) -> ScheduleState | None:
        """Pause a schedule (no fire until resumed); ``None`` when it does not exist."""
        return await self.update(schedule, lambda s: s if s.paused else s.pause())

    async def resume(self, schedule: str, now: datetime) -> ScheduleState | None:
        """Resume a schedule from ``now`` (ticks missed while paused are skipped); ``None`` when absent."""
        return await self.update(schedule, lambda s: s.resume(now) if s.paused else s)
