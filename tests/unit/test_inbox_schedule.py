"""When a call in flight is read back from the replies stream (``a2amesh.inbox``): quiet calls at doubling
intervals up to a cap, every call at once after a reconnect and soon again after it."""

from __future__ import annotations

import pytest

from a2amesh.inbox import AFTER_RECONNECT, QUIET_FIRST, QUIET_MAX, PendingCall, reread_soon, take_due


def reads_until(calls: dict[str, PendingCall], end: float, step: float = 0.25) -> list[float]:
    """The times (from 0) at which the calls were due, walking the clock in ``step`` s."""
    seen: list[float] = []
    now = 0.0
    while now <= end:
        seen += [now for _ in take_due(calls, now)]
        now = round(now + step, 6)
    return seen


def fresh(at: float = 0.0) -> PendingCall:
    return PendingCall("echo", "reply.i.echo.c", quiet=QUIET_FIRST, read_at=at + QUIET_FIRST)


def test_a_quiet_call_is_read_back_at_doubling_intervals_up_to_the_cap() -> None:
    calls = {"c": fresh()}
    seen = reads_until(calls, 1000)
    gaps = [b - a for a, b in zip([0.0, *seen], seen, strict=False)]
    assert gaps[:5] == [QUIET_FIRST, QUIET_FIRST, 2 * QUIET_FIRST, 4 * QUIET_FIRST, 8 * QUIET_FIRST]
    assert max(gaps) == QUIET_MAX, "never quieter than the cap"
    assert len(seen) <= 12, "a long call costs few reads"


def test_a_call_answered_meanwhile_is_not_read_back_again() -> None:
    calls = {"c": fresh(), "d": fresh()}
    assert [c for c, _ in take_due(calls, QUIET_FIRST)] == ["c", "d"]
    del calls["c"]  # forgotten once answered
    assert [c for c, _ in take_due(calls, 3 * QUIET_FIRST)] == ["d"]


@pytest.mark.parametrize("age", [0.0, 5.0, 500.0])
def test_a_reconnect_reads_every_call_at_once_and_soon_again(age: float) -> None:
    calls = {"young": fresh(age), "old": fresh(0.0)}
    take_due(calls, age)  # whatever each call's schedule was
    reread_soon(calls.values(), age)
    assert {c for c, _ in take_due(calls, age)} == {"young", "old"}, "at once"
    after = [round(t - age, 6) for t in reads_until(calls, age + 8)[::2] if t > age]
    assert after[:3] == [AFTER_RECONNECT, 3 * AFTER_RECONNECT, 7 * AFTER_RECONNECT]
