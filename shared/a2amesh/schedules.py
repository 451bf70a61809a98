"""Schedules of workflows and their branches (SPEC §7, seed 003): parsing, fire times, catch-up, run ids.

Pure: no clock, no I/O. The executor passes ``now`` in, keeps one :class:`ScheduleState` per
scheduled graph in Redis, arms a timer at :attr:`ScheduleState.next_fire`, and when it rings asks
:meth:`ScheduleState.due` which fire (if any) to run, creating the execution
:func:`run_id` with ``NX`` so that one tick makes one run whatever the number of executors.

Execution modes (``executionMode``) and their ``schedule``:

- ``one_time``: run only when called; never scheduled (a ``schedule`` is ignored).
- ``interval``: ``schedule`` is a number of seconds (``60``, ``"60"``, or a duration such as
  ``"5m"``; whole seconds, at least 1), ``daily@HH:mm`` (``daily`` alone = 00:00), or
  ``weekly@d1,d2,…[@HH:mm]`` with days 0–6, 0 = Sunday, time of day 00:00 when omitted.
  Second intervals tick at every multiple of N seconds since the Unix epoch, so every executor
  computes the same ticks without sharing anything. Calendar schedules are read in the configured
  time zone (default UTC).
- ``continuous``: the next run starts ``schedule`` seconds (default 5) after the previous run ended.

Decisions:

- **DST.** Calendar times are local wall-clock times. A time that does not exist on a day (the
  hour skipped when clocks spring forward) fires at the first valid instant after it, the moment
  the clocks jump (02:30 in Europe/Berlin on the last Sunday of March fires at 03:00 CEST). A time
  that happens twice (clocks falling back) fires once, at its first occurrence.
- **Catch-up.** After downtime, at most one catch-up run: of all the ticks missed since the last
  fire, only the most recent one runs (its id is deterministic, so several executors catching up
  at once still make one run). A schedule never fires for ticks before it was registered or
  resumed.
- **Run ids** are ``sched:{workflow}:{branch}:{fire_ts}``: ``branch`` is :data:`MAIN_BRANCH` for a
  workflow's own graph, ``fire_ts`` the fire instant in whole Unix seconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import ClassVar, Literal, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.durations import DurationError, parse_duration
from a2amesh.errors import ConfigError, ScheduleError

__all__ = [
    "DAY_NAMES",
    "DEFAULT_CONTINUOUS_DELAY",
    "EXECUTION_MODES",
    "MAIN_BRANCH",
    "Continuous",
    "Daily",
    "Every",
    "ExecutionMode",
    "OneTime",
    "ScheduleSpec",
    "ScheduleState",
    "Weekly",
    "due_fires",
    "next_fire",
    "parse_schedule",
    "previous_fire",
    "resolve_timezone",
    "run_id",
]

ExecutionMode: TypeAlias = Literal["one_time", "interval", "continuous"]
EXECUTION_MODES: tuple[ExecutionMode, ...] = ("one_time", "interval", "continuous")
DEFAULT_CONTINUOUS_DELAY = 5.0
MAIN_BRANCH = "main"
"""The branch token of a workflow's own graph in run ids (branches use their own id)."""
DAY_NAMES = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
"""Day names by schedule day number (0 = Sunday)."""

_TIME_RE = re.compile(r"(\d{1,2}):(\d{2})")
_SYNTAX = "expected seconds (60), daily@HH:mm, or weekly@d1,d2,…@HH:mm with days 0–6 (0 = Sunday)"


@dataclass(frozen=True, slots=True)
class OneTime:
    """Run only when called; never scheduled."""

    mode: ClassVar[ExecutionMode] = "one_time"

    @property
    def text(self) -> str | None:
        """No schedule text."""
        return None

    def describe(self) -> str:
        """One line for listings."""
        return "only when called"


@dataclass(frozen=True, slots=True)
class Every:
    """Fire every ``seconds`` seconds, on multiples of ``seconds`` since the Unix epoch.

    Attributes:
        seconds: the interval, a whole number of seconds (at least 1).
    """

    seconds: int

    mode: ClassVar[ExecutionMode] = "interval"

    @property
    def text(self) -> str:
        """The canonical schedule text (``"60"``)."""
        return str(self.seconds)

    def describe(self) -> str:
        """One line for listings."""
        return f"every {self.seconds} s"


@dataclass(frozen=True, slots=True)
class Daily:
    """Fire every day at a local time of day.

    Attributes:
        at: the local time of day.
    """

    at: time

    mode: ClassVar[ExecutionMode] = "interval"

    @property
    def text(self) -> str:
        """The canonical schedule text (``"daily@09:00"``)."""
        return f"daily@{self.at:%H:%M}"

    def describe(self) -> str:
        """One line for listings."""
        return f"daily at {self.at:%H:%M}"


@dataclass(frozen=True, slots=True)
class Weekly:
    """Fire on some days of the week at a local time of day.

    Attributes:
        days: day numbers, sorted and distinct, 0 = Sunday … 6 = Saturday.
        at: the local time of day.
    """

    days: tuple[int, ...]
    at: time

    mode: ClassVar[ExecutionMode] = "interval"

    @property
    def text(self) -> str:
        """The canonical schedule text (``"weekly@1,3,5@09:00"``)."""
        return f"weekly@{','.join(map(str, self.days))}@{self.at:%H:%M}"

    def describe(self) -> str:
        """One line for listings."""
        return f"weekly on {', '.join(DAY_NAMES[d] for d in self.days)} at {self.at:%H:%M}"


@dataclass(frozen=True, slots=True)
class Continuous:
    """Start the next run ``delay`` seconds after the previous one ended.

    Attributes:
        delay: seconds between the end of a run and the start of the next.
    """

    delay: float = DEFAULT_CONTINUOUS_DELAY

    mode: ClassVar[ExecutionMode] = "continuous"

    @property
    def text(self) -> str:
        """The canonical schedule text (the delay in seconds)."""
        return _number(self.delay)

    def describe(self) -> str:
        """One line for listings."""
        return f"continuously, {_number(self.delay)} s after each run"


ScheduleSpec: TypeAlias = OneTime | Every | Daily | Weekly | Continuous
"""A parsed ``executionMode`` + ``schedule``."""

CalendarSpec: TypeAlias = Daily | Weekly
_Fail: TypeAlias = Callable[[str], ScheduleError]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# --- parsing ---------------------------------------------------------------------------------


def _mode_of(mode: object, source: str, field: str) -> ExecutionMode:
    if not isinstance(mode, str):
        raise ScheduleError(mode, "expected one_time, interval or continuous", source=source, field=field)
    key = re.sub(r"[\s-]+", "_", mode.strip().lower())
    known: dict[str, ExecutionMode] = {name: name for name in EXECUTION_MODES}
    known.update(onetime="one_time", once="one_time")
    if key in known:
        return known[key]
    raise ScheduleError(
        mode, "unknown execution mode; expected one_time, interval or continuous", source=source, field=field
    )


def parse_schedule(
    mode: object,
    schedule: object,
    *,
    source: str = "<schedule>",
    mode_field: str = "executionMode",
    schedule_field: str = "schedule",
) -> ScheduleSpec:
    """Parse an ``executionMode`` and its ``schedule``.

    Args:
        mode: ``one_time``, ``interval`` or ``continuous`` (``None``: ``interval`` when a schedule is
            given, else ``one_time``).
        schedule: seconds (number or text), ``daily@HH:mm`` or ``weekly@d1,d2,…[@HH:mm]``; ``None``
            for none.
        source: the file or origin named in errors.
        mode_field: the field named in errors about the mode.
        schedule_field: the field named in errors about the schedule.

    Returns:
        The parsed schedule.

    Raises:
        ScheduleError: the mode is unknown, or the schedule is missing, malformed or does not fit
            the mode; the message says exactly what is wrong.
    """
    kind = ("interval" if schedule is not None else "one_time") if mode is None else _mode_of(mode, source, mode_field)
    if kind == "one_time":
        return OneTime()

    def fail(reason: str) -> ScheduleError:
        return ScheduleError(schedule, reason, source=source, field=schedule_field)

    if kind == "continuous":
        if schedule is None:
            return Continuous()
        if isinstance(schedule, str) and _is_calendar(schedule):
            raise fail("continuous mode takes a delay in seconds between runs, not a calendar schedule")
        return Continuous(_seconds(schedule, fail))
    if schedule is None:
        raise fail(f"interval mode needs a schedule; {_SYNTAX}")
    if isinstance(schedule, str) and _is_calendar(schedule):
        return _calendar(schedule, fail)
    seconds = _seconds(schedule, fail)
    if seconds < 1 or not seconds.is_integer():
        raise fail("an interval is a whole number of seconds, at least 1")
    return Every(int(seconds))


def _is_calendar(text: str) -> bool:
    head = text.strip().lower()
    return head.startswith(("daily", "weekly")) or "@" in head


def _seconds(value: object, fail: _Fail) -> float:
    if isinstance(value, str) and not value.strip():
        raise fail(f"empty schedule; {_SYNTAX}")
    try:
        return parse_duration(value)
    except DurationError as exc:
        # Keep the duration parser's finding, not its own syntax hint: ours lists the calendar forms too.
        problem = exc.problem.split("; expected seconds or")[0]
        if problem.startswith("expected seconds or"):
            problem = "not a number of seconds"
        raise fail(f"{problem}; {_SYNTAX}") from None


def _calendar(text: str, fail: _Fail) -> CalendarSpec:
    kind, sep, rest = text.strip().lower().partition("@")
    kind = kind.strip()
    if kind == "daily":
        if not sep:
            return Daily(time(0, 0))
        if "@" in rest:
            raise fail("daily takes one time of day: daily@HH:mm")
        return Daily(_time_of_day(rest, "daily@", fail))
    if kind == "weekly":
        if not sep or not rest.strip():
            raise fail("weekly needs its days: weekly@d1,d2,…[@HH:mm] with days 0–6 (0 = Sunday)")
        days_text, sep, time_text = rest.partition("@")
        if "@" in time_text:
            raise fail("too many '@': weekly@d1,d2,…@HH:mm")
        at = _time_of_day(time_text, "the days' @", fail) if sep else time(0, 0)
        return Weekly(_days(days_text, fail), at)
    raise fail(f"unknown schedule kind {kind!r}; {_SYNTAX}")


def _time_of_day(text: str, after: str, fail: _Fail) -> time:
    value = text.strip()
    if not value:
        raise fail(f"missing time of day after {after} (HH:mm)")
    match = _TIME_RE.fullmatch(value)
    if match is None:
        raise fail(f"time of day {value!r} is not HH:mm")
    hour, minute = int(match.group(1)), int(match.group(2))
    if hour > 23:
        raise fail(f"hour {hour} in {value!r} is not 0–23")
    if minute > 59:
        raise fail(f"minute {minute} in {value!r} is not 0–59")
    return time(hour, minute)


def _days(text: str, fail: _Fail) -> tuple[int, ...]:
    days: set[int] = set()
    for item in text.split(","):
        day = item.strip()
        if not day:
            raise fail("empty day in the list of days (days are 0–6, 0 = Sunday, separated by commas)")
        if not day.isdigit() or int(day) > 6:
            raise fail(f"day {day!r} is not 0–6 (0 = Sunday … 6 = Saturday)")
        days.add(int(day))
    return tuple(sorted(days))


# --- time zones and local times --------------------------------------------------------------


def resolve_timezone(name: str | tzinfo | None) -> tzinfo:
    """The time zone for calendar schedules: an IANA name (``Europe/Berlin``), a tzinfo, or UTC for ``None``.

    Raises:
        ConfigError: the name is not a known time zone.
    """
    if name is None:
        return UTC
    if isinstance(name, tzinfo):
        return name
    if name.strip().upper() in ("UTC", "Z"):
        return UTC
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        # ZoneInfoNotFoundError is a KeyError: its context is noise for the user.
        raise ConfigError(
            "timezone", "", f"unknown time zone {name!r} (expected an IANA name such as Europe/Berlin)"
        ) from None


def _aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {value.isoformat()}")
    return value


def _local_instant(day: date, at: time, tz: tzinfo) -> datetime:
    """The instant a local wall-clock time happens on a day (DST rules of the module docstring)."""
    naive = datetime.combine(day, at)
    first = naive.replace(tzinfo=tz, fold=0)
    utc0 = first.astimezone(UTC)
    if utc0.astimezone(tz).replace(tzinfo=None) == naive:
        return first  # exists; for an ambiguous time fold=0 is its first occurrence
    # A gap: the transition lies between the two readings of the nonexistent time.
    utc1 = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
    low, high = sorted((int(utc0.timestamp()), int(utc1.timestamp())))
    after = datetime.fromtimestamp(high, tz).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, tz).utcoffset() == after:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, tz)


def _fires_on(spec: CalendarSpec, day: date) -> bool:
    return isinstance(spec, Daily) or (day.weekday() + 1) % 7 in spec.days


def _calendar_fire(spec: CalendarSpec, instant: datetime, zone: tzinfo, *, later: bool) -> datetime:
    """The first calendar fire strictly after ``instant``, or (``later=False``) the last at or before it."""
    start = instant.astimezone(zone).date()
    step = timedelta(days=1 if later else -1)
    for offset in range(9):  # a week, plus a day either side for the zone's offset
        day = start + offset * step
        if _fires_on(spec, day):
            fire = _local_instant(day, spec.at, zone)
            if (fire > instant) if later else (fire <= instant):
                return fire
    side = "after" if later else "before"
    raise AssertionError(f"no fire within 9 days {side} {instant.isoformat()} for {spec.text}")  # pragma: no cover


# --- fire times ------------------------------------------------------------------------------


def next_fire(spec: ScheduleSpec, after: datetime, tz: tzinfo | str | None = None) -> datetime | None:
    """The first fire strictly after an instant.

    Args:
        spec: the schedule.
        after: an aware instant; for ``continuous``, the end of the previous run.
        tz: the time zone of calendar schedules (a name or tzinfo; default UTC).

    Returns:
        The fire instant (aware, in ``tz``), or ``None`` for ``one_time``.
    """
    _aware(after, "after")
    zone = resolve_timezone(tz)
    if isinstance(spec, OneTime):
        return None
    if isinstance(spec, Continuous):
        return (after + timedelta(seconds=spec.delay)).astimezone(zone)
    if isinstance(spec, Every):
        ticks = math.floor(after.timestamp() / spec.seconds) + 1
        return datetime.fromtimestamp(ticks * spec.seconds, zone)
    return _calendar_fire(spec, after, zone, later=True)


def previous_fire(spec: ScheduleSpec, at_or_before: datetime, tz: tzinfo | str | None = None) -> datetime | None:
    """The latest clock fire at or before an instant (``None`` for ``one_time`` and ``continuous``).

    Args:
        spec: the schedule.
        at_or_before: an aware instant.
        tz: the time zone of calendar schedules (default UTC).
    """
    _aware(at_or_before, "at_or_before")
    zone = resolve_timezone(tz)
    if isinstance(spec, OneTime | Continuous):
        return None
    if isinstance(spec, Every):
        ticks = math.floor(at_or_before.timestamp() / spec.seconds)
        return datetime.fromtimestamp(ticks * spec.seconds, zone)
    return _calendar_fire(spec, at_or_before, zone, later=False)


def due_fires(spec: ScheduleSpec, last_fire: datetime, now: datetime, tz: tzinfo | str | None = None) -> list[datetime]:
    """The fire to run now: at most one, however many ticks were missed.

    Args:
        spec: the schedule.
        last_fire: for clock schedules, the last fire (or, for a schedule that never fired, the
            instant it was registered or resumed); for ``continuous``, the end of the previous run.
        now: the current instant.
        tz: the time zone of calendar schedules (default UTC).

    Returns:
        ``[]`` when nothing is due; else one fire: the most recent tick in ``(last_fire, now]``
        (on time, or the single catch-up after downtime), or for ``continuous`` the start
        ``last_fire + delay`` once it has come.
    """
    _aware(last_fire, "last_fire")
    _aware(now, "now")
    zone = resolve_timezone(tz)
    if isinstance(spec, OneTime):
        return []
    if isinstance(spec, Continuous):
        start = next_fire(spec, last_fire, zone)
        return [start] if start is not None and start <= now else []
    latest = previous_fire(spec, now, zone)
    return [latest] if latest is not None and latest > last_fire else []


def run_id(workflow: str, branch: str | None, fire: datetime) -> str:
    """The execution id of one fire: ``sched:{workflow}:{branch}:{fire_ts}`` (whole Unix seconds).

    Args:
        workflow: the workflow name.
        branch: the branch id, or ``None`` for the workflow's own graph (:data:`MAIN_BRANCH`).
        fire: the aware fire instant.
    """
    _aware(fire, "fire")
    return f"sched:{workflow}:{branch or MAIN_BRANCH}:{math.floor(fire.timestamp())}"


# --- schedule state --------------------------------------------------------------------------


class ScheduleState(BaseModel):
    """What the executor keeps about one scheduled graph (listed by ``a2amesh schedules``).

    The methods return updated copies; the executor stores the result.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    workflow: str = Field(description="The workflow name.")
    branch: str = Field(MAIN_BRANCH, description="The branch id, or 'main' for the workflow's own graph.")
    mode: ExecutionMode = Field(description="The execution mode.")
    schedule: str | None = Field(None, description="The canonical schedule text.")
    timezone: str = Field("UTC", description="The IANA time zone of calendar schedules.")
    paused: bool = Field(False, description="A paused schedule does not fire.")
    since: datetime = Field(description="When the schedule was registered or last resumed; no catch-up before it.")
    last_fire: datetime | None = Field(None, description="The last fire that made a run.")
    last_end: datetime | None = Field(None, description="When the last run ended (continuous mode).")
    next_fire: datetime | None = Field(None, description="The next fire, or null (paused, one_time, run in flight).")

    @classmethod
    def new(
        cls, workflow: str, spec: ScheduleSpec, *, now: datetime, branch: str | None = None, timezone: str = "UTC"
    ) -> ScheduleState:
        """The state of a schedule registered at ``now``."""
        state = cls(
            workflow=workflow,
            branch=branch or MAIN_BRANCH,
            mode=spec.mode,
            schedule=spec.text,
            timezone=timezone,
            since=_aware(now, "now"),
        )
        return state.model_copy(update={"next_fire": state._upcoming(spec, now)})

    @property
    def spec(self) -> ScheduleSpec:
        """The parsed schedule."""
        return parse_schedule(self.mode, self.schedule)

    @property
    def tz(self) -> tzinfo:
        """The time zone of calendar schedules."""
        return resolve_timezone(self.timezone)

    @property
    def running(self) -> bool:
        """A continuous schedule whose last run has not ended yet."""
        return (
            self.mode == "continuous"
            and self.last_fire is not None
            and (self.last_end is None or self.last_end < self.last_fire)
        )

    def _upcoming(self, spec: ScheduleSpec, after: datetime) -> datetime | None:
        if self.paused or isinstance(spec, OneTime):
            return None
        if isinstance(spec, Continuous):
            return None if self.running else next_fire(spec, max(self.last_end or self.since, self.since), self.tz)
        return next_fire(spec, after, self.tz)

    def due(self, now: datetime) -> datetime | None:
        """The fire to run at ``now`` (at most one; see :func:`due_fires`), or ``None``."""
        if self.paused or self.running:
            return None
        spec = self.spec
        if isinstance(spec, Continuous):
            anchor = max(self.last_end or self.since, self.since)
        else:
            anchor = max(self.last_fire or self.since, self.since)
        fires = due_fires(spec, anchor, now, self.tz)
        return fires[0] if fires else None

    def fired(self, fire: datetime) -> ScheduleState:
        """The state after ``fire`` made a run."""
        state = self.model_copy(update={"last_fire": _aware(fire, "fire")})
        return state.model_copy(update={"next_fire": state._upcoming(self.spec, fire)})

    def ended(self, at: datetime) -> ScheduleState:
        """The state after the run of the last fire ended (sets the next start in continuous mode)."""
        state = self.model_copy(update={"last_end": _aware(at, "at")})
        return state.model_copy(update={"next_fire": state._upcoming(self.spec, at)})

    def pause(self) -> ScheduleState:
        """The paused state: no fire until resumed."""
        return self.model_copy(update={"paused": True, "next_fire": None})

    def resume(self, now: datetime) -> ScheduleState:
        """The resumed state: fires from ``now`` on; ticks missed while paused are not caught up."""
        state = self.model_copy(update={"paused": False, "since": _aware(now, "now")})
        return state.model_copy(update={"next_fire": state._upcoming(self.spec, now)})

    def row(self) -> dict[str, str | bool | None]:
        """One row of ``a2amesh schedules`` (times in ISO 8601, in the schedule's zone)."""
        tz = self.tz
        return {
            "workflow": self.workflow,
            "branch": self.branch,
            "mode": self.mode,
            "schedule": self.schedule,
            "describe": self.spec.describe(),
            "timezone": self.timezone,
            "paused": self.paused,
            "last_fire": self.last_fire.astimezone(tz).isoformat() if self.last_fire else None,
            "next_fire": self.next_fire.astimezone(tz).isoformat() if self.next_fire else None,
        }
