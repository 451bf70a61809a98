"""The hot-path JSON helpers read and write what the standard library does."""

from __future__ import annotations

import json
import math

import pytest

from a2amesh.jsontext import dumps_text, loads


def test_loads_reads_what_orjson_refuses_like_the_standard_parser() -> None:
    big = 2**70
    assert loads(f'{{"n": {big}}}') == {"n": big}
    assert math.isnan(loads(b"[NaN]")[0])


def test_loads_raises_a_value_error_for_what_is_not_json() -> None:
    with pytest.raises(ValueError, match="Expecting value"):
        loads(b'{"jsonrpc": "2.0", "id": 1, "method": ')
    with pytest.raises(ValueError, match="Expecting value"):
        loads(b"\xff\xfe")  # not UTF-8


def test_round_trip_matches_the_standard_library() -> None:
    value = {"a": [1, 2.5, None, True], "b": {"ü": "x"}, "big": 2**70}
    assert loads(dumps_text(value)) == json.loads(json.dumps(value)) == value
