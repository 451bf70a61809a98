"""Review edit forms generated from ``edit_schema``, read back and validated; the CSRF token (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from starlette.requests import Request

from a2amesh.gateway.dashboard import forms, session
from a2amesh.gateway.dashboard.views import diff_lines, duration, iso, timeline
from a2amesh.manage.executions import Execution, NodeAttempt, NodeRun

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "maximum": 100},
        "count": {"type": "integer"},
        "urgent": {"type": "boolean"},
        "tier": {"enum": ["gold", "silver"]},
        "note": {"type": "string", "title": "Note"},
    },
    "required": ["amount"],
}


def test_fields_follow_the_schema() -> None:
    """One input per property, of the right kind; required ones marked."""
    fields = {f.name: f for f in forms.fields_of(SCHEMA) or []}
    assert fields["field.amount"].kind == "number"
    assert fields["field.amount"].required
    assert fields["field.count"].step == "1"
    assert fields["field.urgent"].kind == "checkbox"
    assert fields["field.tier"].choices == ("gold", "silver")
    assert fields["field.note"].label == "Note"


def test_nested_schema_is_edited_as_json() -> None:
    """A schema whose properties are not simple values is edited as JSON text (no fields)."""
    assert forms.fields_of({"type": "object", "properties": {"items": {"type": "array"}}}) is None
    assert forms.parse(None, {forms.JSON_FIELD: '{"items": [1]}'}) == {"items": [1]}
    with pytest.raises(ValueError, match="line 1 column 2"):
        forms.parse(None, {forms.JSON_FIELD: "{oops"})


def test_form_values_are_typed_and_validated() -> None:
    """Numbers become numbers, an unchecked box false, blanks absent; the schema check names the field."""
    value = forms.parse(SCHEMA, {"field.amount": "500", "field.count": "3", "field.tier": "gold", "field.note": ""})
    assert value == {"amount": 500, "count": 3, "urgent": False, "tier": "gold"}
    assert forms.validate(SCHEMA, value) == ["$.amount: 500 is greater than the maximum of 100"]
    assert forms.validate(SCHEMA, forms.parse(SCHEMA, {"field.amount": "12.5", "field.urgent": "on"})) == []
    assert forms.validate(SCHEMA, forms.parse(SCHEMA, {"field.amount": "lots"})) == [
        "$.amount: 'lots' is not of type 'number'"
    ]


def _request(cookie: str = "", origin: str | None = None) -> Request:
    headers = [(b"host", b"127.0.0.1:8080")]
    if cookie:
        headers.append((b"cookie", f"{session.COOKIE}={cookie}".encode()))
    if origin:
        headers.append((b"origin", origin.encode()))
    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""})


def test_csrf_token_is_bound_to_the_key_and_the_site() -> None:
    """The token depends on the caller's key; a wrong token or another site's Origin is refused."""
    mine = session.csrf_token(_request("key-a"))
    assert mine != session.csrf_token(_request("key-b"))
    assert session.csrf_ok(_request("key-a"), mine)
    assert not session.csrf_ok(_request("key-b"), mine)
    assert not session.csrf_ok(_request("key-a"), "")
    assert not session.csrf_ok(_request("key-a", origin="https://evil.example"), mine)
    assert session.csrf_ok(_request("key-a", origin="http://127.0.0.1:8080"), mine)


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_timeline_places_one_bar_per_attempt_on_the_run_span() -> None:
    """Bars start at their offset into the run and are as wide as they took; each attempt of a retried node is
    its own bar; a node not started has none."""
    run = Execution(id="x", workflow="w", status="completed", started_at=at(100.0), finished_at=at(110.0))
    nodes = [
        NodeRun(path="a", node_id="a", type="agent", status="completed", started_at=at(100.0), finished_at=at(105.0)),
        NodeRun(
            path="b",
            node_id="b",
            type="agent",
            status="completed",
            attempt=2,
            attempts=[
                NodeAttempt(attempt=1, status="failed", started_at=at(105.0), finished_at=at(107.0), error="boom"),
                NodeAttempt(attempt=2, status="completed", started_at=at(108.0), finished_at=at(110.0)),
            ],
            started_at=at(105.0),
            finished_at=at(110.0),
        ),
        NodeRun(path="c", node_id="c", type="agent", status="pending"),
        NodeRun(path="m[0]/d", node_id="d", type="agent", status="pending"),
    ]
    a, b, c, d = timeline(run, nodes)
    assert [(s.left, s.width) for s in a.segments] == [(0.0, 50.0)]
    assert b.label == "b (attempt 2)"
    assert [(s.attempt, s.status, s.left, s.width) for s in b.segments] == [
        (1, "failed", 50.0, 20.0),
        (2, "completed", 80.0, 20.0),
    ]
    assert b.segments[0].error == "boom"
    assert c.segments == []
    assert not a.nested
    assert d.nested, "a map item's node is drawn inside its container"


def test_times_and_durations_read_well() -> None:
    """Times go to the browser as UTC ISO 8601; durations in the unit that fits."""
    assert iso(at(0)) == "1970-01-01T00:00:00.000Z"
    assert iso(None) == ""
    assert duration(at(10.0), at(10.25)) == "250 ms"
    assert duration(at(10.0), at(13.5)) == "3.50 s"
    assert duration(at(0.0), at(185.0)) == "3 min 5 s"
    assert duration(None) == ""


def test_diff_of_two_definitions_marks_what_changed() -> None:
    """The YAML diff keeps the definition's key order and tags removed, added and context lines."""
    old = {"name": "w", "nodes": [{"id": "a", "agent_name": "x"}]}
    new = {"name": "w", "nodes": [{"id": "a", "agent_name": "y"}]}
    lines = diff_lines(old, new, "w@1", "w@2")
    assert ("del", "-  agent_name: x") in lines
    assert ("add", "+  agent_name: y") in lines
    assert lines[0] == ("file", "--- w@1")
    assert diff_lines(old, old, "a", "b") == []
