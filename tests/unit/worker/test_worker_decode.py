"""The one decode path: limits on nesting, Unicode and numeric headers, each failure a precise RpcError."""

from __future__ import annotations

import json

import pytest

from a2amesh.errors import RpcError
from a2amesh.protocol import codes
from a2amesh.worker.decode import (
    MAX_INT_ID,
    MAX_JSON_DEPTH,
    call_depth_of,
    deadline_of,
    parse_body,
    request_id_of,
    validate_request,
)


def _rejected(data: bytes) -> RpcError:
    """The error that decoding ``data`` as a control request gives."""
    with pytest.raises(RpcError) as e:
        validate_request(parse_body(data), {"A2A-Version": "1.0"}, allowed=codes.CONTROL_METHODS)
    return e.value


def test_nesting_within_the_limit_parses() -> None:
    """A body exactly MAX_JSON_DEPTH deep is accepted."""
    body = parse_body(("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH).encode())
    assert body.problem is None


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 600, 2000, 100_000])
def test_nesting_beyond_the_limit_is_a_parse_error(depth: int) -> None:
    """Deeper bodies are -32700, whichever parser gave up (no RecursionError escapes)."""
    error = _rejected(("[" * depth + "]" * depth).encode())
    assert error.code == codes.PARSE_ERROR
    assert f"nested deeper than {MAX_JSON_DEPTH}" in str(error)


def test_deep_params_keep_the_request_id() -> None:
    """Nesting too deep inside params is refused with the id still echoed (it could be read)."""
    deep = "[" * 600 + "]" * 600
    body = parse_body(f'{{"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {{"id": {deep}}}}}'.encode())
    assert body.request_id == 7
    assert body.problem is not None
    assert body.problem.code == codes.PARSE_ERROR


def test_lone_surrogate_names_its_field() -> None:
    """A lone surrogate is -32602 with its path inside params, -32600 outside; a readable id is kept."""
    body = json.dumps({"id": 1, "params": {"message": {"parts": [{"text": "ok"}, {"text": "\ud800"}]}}}).encode()
    assert parse_body(body).request_id == 1
    error = _rejected(body)
    assert error.code == codes.INVALID_PARAMS
    assert "params.message.parts[1].text" in str(error)
    body = json.dumps({"id": "\udc00"}).encode()
    assert parse_body(body).request_id is None
    assert _rejected(body).code == codes.INVALID_REQUEST


def test_nan_and_valid_surrogate_pairs_still_parse() -> None:
    """What only the standard parser reads (NaN) and proper surrogate pairs are not refused."""
    assert parse_body(b'{"n": NaN}').value["n"] != 0
    body = parse_body(b'{"s": "\\ud83d\\ude00"}')
    assert body.value == {"s": "\U0001f600"}
    assert body.problem is None


def test_request_id_of_parsed_body() -> None:
    assert request_id_of({"id": "a"}) == "a"
    assert request_id_of({"id": True}) is None
    assert request_id_of([1]) is None
    assert request_id_of({"id": MAX_INT_ID}) == MAX_INT_ID
    assert request_id_of({"id": MAX_INT_ID + 1}) is None
    assert request_id_of({"id": float("inf")}) is None


@pytest.mark.parametrize("rid", [10**40, -(10**40)])
def test_integer_id_beyond_64_bits_is_an_invalid_request(rid: int) -> None:
    """An id no peer can echo exactly is -32600 (answered with id null), not echoed as a float."""
    data = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "GetTask", "params": {"id": "t"}}).encode()
    error = _rejected(data)
    assert error.code == codes.INVALID_REQUEST
    assert "64 bits" in str(error)


@pytest.mark.parametrize("raw", ["9" * 320, "9" * 16, "-1", "1e3", "\u00b2", " 5"])
def test_deadline_out_of_range(raw: str) -> None:
    """A2A-Deadline is 1-16 ASCII digits up to year 9999, else -32600 naming it."""
    with pytest.raises(RpcError) as e:
        deadline_of({"A2A-Deadline": raw})
    assert e.value.code == codes.INVALID_REQUEST
    assert "A2A-Deadline" in str(e.value)


def test_deadline_and_call_depth_parse() -> None:
    assert deadline_of({}) is None
    assert deadline_of({"A2A-Deadline": "1500"}) == 1.5
    assert call_depth_of({}) == 0
    assert call_depth_of({"A2A-Call-Depth": "3"}) == 3
    with pytest.raises(RpcError):
        call_depth_of({"A2A-Call-Depth": "1" * 7})
