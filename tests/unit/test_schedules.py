"""Schedules (SPEC §7, seed 003): parsing, DST-correct fire times, one catch-up, run ids, schedule state."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from a2amesh.errors import ConfigError, ScheduleError
from a2amesh.schedules import (
    Continuous,
    Daily,
    Every,
    OneTime,
    ScheduleState,
    Weekly,
    due_fires,
    next_fire,
    parse_schedule,
    previous_fire,
    resolve_timezone,
    run_id,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def chain(spec: object, after: datetime, tz: object, count: int) -> list[datetime]:
    fires = []
    for _ in range(count):
        fire = next_fire(spec, after, tz)  # type: ignore[arg-type]
        assert fire is not None
        fires.append(fire)
        after = fire
    return fires


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "schedule", "expected", "text"),
    [
        ("one_time", None, OneTime(), None),
        ("one_time", "60", OneTime(), None),
        (None, None, OneTime(), None),
        ("interval", "60", Every(60), "60"),
        ("interval", 90, Every(90), "90"),
        ("interval", "5m", Every(300), "300"),
        (None, "daily@09:00", Daily(time(9, 0)), "daily@09:00"),
        ("interval", "daily", Daily(time(0, 0)), "daily@00:00"),
        ("Interval", " DAILY@7:05 ", Daily(time(7, 5)), "daily@07:05"),
        ("interval", "weekly@1,3,5", Weekly((1, 3, 5), time(0, 0)), "weekly@1,3,5@00:00"),
        ("interval", "weekly@5, 0,5@18:30", Weekly((0, 5), time(18, 30)), "weekly@0,5@18:30"),
        ("continuous", None, Continuous(5.0), "5"),
        ("continuous", "0", Continuous(0.0), "0"),
        ("continuous", 2.5, Continuous(2.5), "2.5"),
        ("one-time", None, OneTime(), None),
    ],
)
def test_parse_schedule(mode: object, schedule: object, expected: object, text: str | None) -> None:
    """Every mode and schedule form parses to its spec, with a canonical text."""
    spec = parse_schedule(mode, schedule)
    assert spec == expected
    assert spec.text == text


@pytest.mark.parametrize(
    ("mode", "schedule", "field", "message"),
    [
        (
            "sometimes",
            "60",
            "executionMode",
            "'sometimes': unknown execution mode; expected one_time, interval or continuous",
        ),
        (3, None, "executionMode", "3: expected one_time, interval or continuous"),
        ("interval", None, "schedule", "None: interval mode needs a schedule; expected seconds (60), daily@HH:mm"),
        ("interval", "", "schedule", "'': empty schedule"),
        ("interval", "0", "schedule", "'0': an interval is a whole number of seconds, at least 1"),
        ("interval", "1.5", "schedule", "'1.5': an interval is a whole number of seconds, at least 1"),
        ("interval", "-5", "schedule", "'-5': must not be negative"),
        ("interval", "10 parsecs", "schedule", "unknown unit 'parsecs'"),
        ("interval", True, "schedule", "a boolean is not a duration"),
        ("interval", "daily@", "schedule", "'daily@': missing time of day after daily@ (HH:mm)"),
        ("interval", "daily@25:00", "schedule", "'daily@25:00': hour 25 in '25:00' is not 0–23"),
        ("interval", "daily@12:60", "schedule", "minute 60 in '12:60' is not 0–59"),
        ("interval", "daily@9", "schedule", "time of day '9' is not HH:mm"),
        ("interval", "daily@9am", "schedule", "time of day '9am' is not HH:mm"),
        ("interval", "daily@09:00@10:00", "schedule", "daily takes one time of day: daily@HH:mm"),
        ("interval", "weekly", "schedule", "weekly needs its days: weekly@d1,d2,…[@HH:mm] with days 0–6 (0 = Sunday)"),
        ("interval", "weekly@7", "schedule", "day '7' is not 0–6 (0 = Sunday … 6 = Saturday)"),
        ("interval", "weekly@mon", "schedule", "day 'mon' is not 0–6"),
        ("interval", "weekly@1,,3", "schedule", "empty day in the list of days"),
        ("interval", "weekly@1@", "schedule", "missing time of day after the days' @ (HH:mm)"),
        ("interval", "weekly@1@10:00@x", "schedule", "too many '@'"),
        ("interval", "hourly@5", "schedule", "unknown schedule kind 'hourly'"),
        ("continuous", "daily@09:00", "schedule", "continuous mode takes a delay in seconds between runs"),
    ],
)
def test_bad_schedules_say_exactly_what_is_wrong(mode: object, schedule: object, field: str, message: str) -> None:
    """A bad mode or schedule raises ScheduleError (a ConfigError) naming the field, the value and the problem."""
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(mode, schedule, source="flow.json")
    error = caught.value
    assert isinstance(error, ConfigError)
    assert error.field == field
    assert str(error).startswith(f"flow.json: {field}: ")
    assert message in str(error)


def test_describe() -> None:
    """Each spec describes itself in one line for `a2amesh schedules`."""
    assert parse_schedule("interval", "60").describe() == "every 60 s"
    assert parse_schedule("interval", "weekly@1,3,5@09:00").describe() == "weekly on Mon, Wed, Fri at 09:00"
    assert parse_schedule("interval", "daily@09:00").describe() == "daily at 09:00"
    assert parse_schedule("continuous", None).describe() == "continuously, 5 s after each run"
    assert OneTime().describe() == "only when called"


# --- fire times ------------------------------------------------------------------------------


def test_intervals_tick_on_multiples_since_the_epoch() -> None:
    """Second intervals fire at k × N seconds since the epoch, strictly after the given instant."""
    spec = Every(60)
    assert next_fire(spec, utc(2024, 1, 1, 10, 0, 30)) == utc(2024, 1, 1, 10, 1)
    assert next_fire(spec, utc(2024, 1, 1, 10, 1)) == utc(2024, 1, 1, 10, 2)
    assert previous_fire(spec, utc(2024, 1, 1, 10, 1, 59)) == utc(2024, 1, 1, 10, 1)
    # Absolute time: a DST change does not move the ticks.
    fires = chain(Every(3600), datetime(2024, 3, 31, 1, 30, tzinfo=BERLIN), BERLIN, 2)
    assert [f.astimezone(UTC) for f in fires] == [utc(2024, 3, 31, 1), utc(2024, 3, 31, 2)]


def test_daily_keeps_local_time_across_dst() -> None:
    """daily@09:00 in Berlin fires at 08:00 UTC in winter and 07:00 UTC in summer."""
    fires = chain(Daily(time(9, 0)), datetime(2024, 3, 29, 12, tzinfo=BERLIN), BERLIN, 3)
    assert [f.astimezone(UTC) for f in fires] == [utc(2024, 3, 30, 8), utc(2024, 3, 31, 7), utc(2024, 4, 1, 7)]
    assert all(f.hour == 9 for f in fires)
    fires = chain(Daily(time(9, 0)), datetime(2024, 10, 26, 12, tzinfo=BERLIN), BERLIN, 2)
    assert [f.astimezone(UTC) for f in fires] == [utc(2024, 10, 27, 8), utc(2024, 10, 28, 8)]


def test_daily_in_the_spring_gap_fires_when_the_clocks_jump() -> None:
    """daily@02:30 on Berlin's spring-forward day (02:00→03:00) fires at 03:00 CEST, the first valid instant."""
    fires = chain(Daily(time(2, 30)), datetime(2024, 3, 29, 12, tzinfo=BERLIN), BERLIN, 3)
    assert [f.astimezone(UTC) for f in fires] == [utc(2024, 3, 30, 1, 30), utc(2024, 3, 31, 1), utc(2024, 4, 1, 0, 30)]
    assert fires[1].isoformat() == "2024-03-31T03:00:00+02:00"


def test_daily_in_the_autumn_overlap_fires_once() -> None:
    """daily@02:30 on Berlin's fall-back day (02:00–03:00 twice) fires at the first 02:30 only."""
    fires = chain(Daily(time(2, 30)), datetime(2024, 10, 26, 12, tzinfo=BERLIN), BERLIN, 2)
    assert [f.astimezone(UTC) for f in fires] == [utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)]
    # From inside the repeated hour (02:10 CET, the second pass) the next fire is tomorrow's.
    second_pass = utc(2024, 10, 27, 1, 10)
    assert next_fire(Daily(time(2, 30)), second_pass, BERLIN) == datetime(2024, 10, 28, 2, 30, tzinfo=BERLIN)
    assert due_fires(Daily(time(2, 30)), utc(2024, 10, 27, 0, 30), utc(2024, 10, 27, 1, 45), BERLIN) == []


def test_weekly_across_both_dst_changes() -> None:
    """weekly@0@02:30 (Sundays) in Berlin: the gap Sunday fires at 03:00, the overlap Sunday once."""
    spec = parse_schedule("interval", "weekly@0@02:30")
    spring = chain(spec, datetime(2024, 3, 25, tzinfo=BERLIN), BERLIN, 2)
    assert [f.isoformat() for f in spring] == ["2024-03-31T03:00:00+02:00", "2024-04-07T02:30:00+02:00"]
    autumn = chain(spec, datetime(2024, 10, 21, tzinfo=BERLIN), BERLIN, 2)
    assert [f.isoformat() for f in autumn] == ["2024-10-27T02:30:00+02:00", "2024-11-03T02:30:00+01:00"]


def test_weekly_days_and_new_york_dst() -> None:
    """weekly@1,3,5 fires Mon/Wed/Fri (0 = Sunday); in New York a 01:30 fall-back Sunday fires at the EDT one."""
    fires = chain(parse_schedule("interval", "weekly@1,3,5@09:00"), datetime(2024, 1, 1, 9, tzinfo=UTC), UTC, 4)
    assert [f.strftime("%a %d %H:%M") for f in fires] == [
        "Wed 03 09:00",
        "Fri 05 09:00",
        "Mon 08 09:00",
        "Wed 10 09:00",
    ]
    sunday = parse_schedule("interval", "weekly@0@01:30")
    (fire,) = chain(sunday, datetime(2024, 11, 1, tzinfo=NEW_YORK), NEW_YORK, 1)
    assert fire.astimezone(UTC) == utc(2024, 11, 3, 5, 30)  # 01:30 EDT, not 01:30 EST (06:30 UTC)
    gap = parse_schedule("interval", "weekly@0@02:30")
    (fire,) = chain(gap, datetime(2024, 3, 8, tzinfo=NEW_YORK), NEW_YORK, 1)
    assert fire.isoformat() == "2024-03-10T03:00:00-04:00"


def test_continuous_starts_after_the_delay() -> None:
    """A continuous schedule's next run starts `delay` seconds after the previous one ended."""
    ended = utc(2024, 1, 1, 12)
    assert next_fire(Continuous(5), ended) == ended + timedelta(seconds=5)
    assert due_fires(Continuous(5), ended, ended + timedelta(seconds=4)) == []
    assert due_fires(Continuous(5), ended, ended + timedelta(hours=3)) == [ended + timedelta(seconds=5)]
    assert next_fire(OneTime(), ended) is None
    assert due_fires(OneTime(), ended, ended + timedelta(days=1)) == []


# --- catch-up and run ids --------------------------------------------------------------------


def test_after_downtime_at_most_one_catch_up_run() -> None:
    """Many missed ticks give exactly one fire: the most recent one; nothing is due when up to date."""
    spec = Every(60)
    last = utc(2024, 1, 1, 10)
    assert due_fires(spec, last, utc(2024, 1, 1, 18, 0, 30)) == [utc(2024, 1, 1, 18)]
    assert due_fires(spec, last, utc(2024, 1, 1, 10, 0, 59)) == []
    assert due_fires(spec, last, utc(2024, 1, 1, 10, 1)) == [utc(2024, 1, 1, 10, 1)]
    daily = Daily(time(9, 0))
    assert due_fires(daily, utc(2024, 3, 20, 8), utc(2024, 4, 2, 12), BERLIN) == [
        datetime(2024, 4, 2, 9, tzinfo=BERLIN)
    ]


def test_run_ids_are_deterministic() -> None:
    """The run id of a fire is sched:{workflow}:{branch}:{unix seconds}, 'main' for the workflow's own graph."""
    fire = datetime(2024, 3, 31, 3, 0, tzinfo=BERLIN)
    assert run_id("reports", None, fire) == "sched:reports:main:1711846800"
    assert run_id("reports", "nightly", fire.astimezone(UTC)) == "sched:reports:nightly:1711846800"


def test_time_zones_and_naive_datetimes() -> None:
    """Unknown zones are ConfigErrors; naive datetimes are refused."""
    assert resolve_timezone(None) is UTC
    assert resolve_timezone("utc") is UTC
    assert resolve_timezone("Europe/Berlin") == BERLIN
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus'"):
        resolve_timezone("Mars/Olympus")
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire(Every(60), datetime(2024, 1, 1))


# --- schedule state --------------------------------------------------------------------------


def test_schedule_state_fires_catches_up_once_and_pauses() -> None:
    """The state registers, fires, catches up once after downtime, and skips ticks missed while paused."""
    now = utc(2024, 1, 1, 10, 0, 30)
    state = ScheduleState.new("wf", Every(60), now=now)
    assert state.next_fire == utc(2024, 1, 1, 10, 1)
    assert state.due(utc(2024, 1, 1, 10, 0, 59)) is None
    fire = state.due(utc(2024, 1, 1, 10, 1, 2))
    assert fire == utc(2024, 1, 1, 10, 1)
    state = state.fired(fire)
    assert state.next_fire == utc(2024, 1, 1, 10, 2)
    assert state.due(utc(2024, 1, 1, 10, 1, 30)) is None  # the same tick never fires twice
    assert state.due(utc(2024, 1, 1, 15, 30, 10)) == utc(2024, 1, 1, 15, 30)  # one catch-up after downtime
    paused = state.pause()
    assert paused.due(utc(2024, 1, 2)) is None
    assert paused.next_fire is None
    resumed = paused.resume(utc(2024, 1, 2, 0, 0, 30))
    assert resumed.due(utc(2024, 1, 2, 0, 0, 45)) is None  # nothing from the paused day
    assert resumed.next_fire == utc(2024, 1, 2, 0, 1)
    row = resumed.row()
    assert row["workflow"] == "wf"
    assert row["branch"] == "main"
    assert row["describe"] == "every 60 s"
    assert row["paused"] is False
    assert row["next_fire"] == "2024-01-02T00:01:00+00:00"


def test_schedule_state_for_continuous_and_zones() -> None:
    """A continuous schedule waits for the run to end; calendar states list times in their zone."""
    start = utc(2024, 1, 1, 12)
    state = ScheduleState.new("wf", Continuous(5), now=start, branch="loop")
    fire = state.due(start + timedelta(seconds=5))
    assert fire == start + timedelta(seconds=5)
    running = state.fired(fire)
    assert running.running
    assert running.due(start + timedelta(hours=1)) is None
    assert running.next_fire is None
    ended = running.ended(start + timedelta(seconds=65))
    assert ended.next_fire == start + timedelta(seconds=70)
    assert ended.due(start + timedelta(seconds=70)) == start + timedelta(seconds=70)
    daily = ScheduleState.new("wf", Daily(time(2, 30)), now=utc(2024, 3, 30, 12), timezone="Europe/Berlin")
    assert daily.row()["next_fire"] == "2024-03-31T03:00:00+02:00"
    assert ScheduleState.model_validate_json(daily.model_dump_json()) == daily
