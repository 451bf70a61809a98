"""utc_timestamp: RFC 3339 with milliseconds, the same text as datetime gives, at any moment."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from a2amesh.protocol.base import _check_timestamp, utc_timestamp


def reference(at: float) -> str:
    moment = dt.datetime.fromtimestamp(int(at), tz=dt.UTC)  # whole seconds: no rounding up
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{int(at * 1000) % 1000:03d}Z"


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False, allow_infinity=False))
def test_any_moment_formats_like_datetime(at: float) -> None:
    assert utc_timestamp(at) == reference(at)
    assert _check_timestamp(utc_timestamp(at))


def test_the_cached_second_changes_with_the_second() -> None:
    assert utc_timestamp(1_800_000_000.25) == "2027-01-15T08:00:00.250Z"
    assert utc_timestamp(1_800_000_000.999) == "2027-01-15T08:00:00.999Z"
    assert utc_timestamp(1_800_000_001.0) == "2027-01-15T08:00:01.000Z"
    assert utc_timestamp(1_799_999_999.5) == "2027-01-15T07:59:59.500Z"


def test_now_is_now() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    stamp = dt.datetime.fromisoformat(utc_timestamp().replace("Z", "+00:00"))
    assert before <= stamp <= dt.datetime.now(dt.UTC)
