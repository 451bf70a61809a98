"""What the pages show, computed from the data functions: the overview's counts, the timeline's bars, and the
filters that format values (JSON, times, durations) in the templates."""

from __future__ import annotations

import datetime as dt
import difflib
import json
import time
from dataclasses import dataclass
from typing import Any

import yaml

from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.gateway.dashboard import data
from a2amesh.manage.executions import Execution, NodeRun

__all__ = [
    "SINCE",
    "Bar",
    "Segment",
    "version_label",
    "as_yaml",
    "diff_lines",
    "duration",
    "iso",
    "overview",
    "pretty",
    "short_id",
    "timeline",
]

SINCE = {"1h": 3600, "24h": 86400, "7d": 7 * 86400}
"""The time filter's choices, in seconds."""
COLLAPSE_CHARS = 400
"""Payloads longer than this are shown collapsed."""


def pretty(value: Any) -> str:
    """A JSON value as indented text (a string as itself)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def iso(at: dt.datetime | None) -> str:
    """An instant as ISO 8601 UTC to the millisecond (the browser shows it in its own zone)."""
    if at is None:
        return ""
    return at.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(start: dt.datetime | None, end: dt.datetime | None = None) -> str:
    """``1.25 s``, ``3 min 4 s``; running ones count to now; empty without a start."""
    if start is None:
        return ""
    seconds = max(((end or dt.datetime.now(dt.UTC)) - start).total_seconds(), 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def short_id(value: str) -> str:
    """The first 12 characters of an id."""
    return value[:12]


def as_yaml(value: Any) -> str:
    """A definition as YAML, in its own key order."""
    return str(yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=100))


def diff_lines(old: Any, new: Any, old_name: str, new_name: str) -> list[tuple[str, str]]:
    """A unified diff of two definitions as YAML: (kind, line) with kind ``add``, ``del``, ``hunk`` or ``same``."""
    lines = difflib.unified_diff(
        as_yaml(old).splitlines(), as_yaml(new).splitlines(), old_name, new_name, lineterm="", n=3
    )
    out: list[tuple[str, str]] = []
    for line in lines:
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        out.append((kind, line))
    return out


@dataclass(frozen=True)
class Segment:
    """One attempt's bar: left offset and width in percent of the run's span, and how the attempt ended."""

    attempt: int
    status: str
    left: float
    width: float
    error: str | None = None


@dataclass(frozen=True)
class Bar:
    """One node instance's row on the timeline: a segment per attempt (a retried node has several).

    ``nested``: the instance is inside a container (a map item, loop iteration or fork branch)."""

    node: NodeRun
    segments: list[Segment]
    label: str
    nested: bool


def _seconds(at: dt.datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def timeline(execution: Execution, nodes: list[NodeRun]) -> list[Bar]:
    """A row per node instance on the execution's time axis, with one bar per attempt (not started ones last,
    empty)."""
    now = time.time()
    starts = [s for n in nodes if (s := _seconds(n.started_at)) is not None]
    t0 = _seconds(execution.started_at) or min(starts, default=now)
    ends = [_seconds(n.finished_at) or now for n in nodes if n.started_at is not None]
    t1 = max([_seconds(execution.finished_at) or now, *ends])
    span = max(t1 - t0, 0.001)

    def segment(attempt: int, status: str, start: float, end: float | None, error: str | None) -> Segment:
        left = min(max(start - t0, 0.0) / span * 100, 99.4)
        width = min(max(((end or t1) - start) / span * 100, 0.6), 100 - left)
        return Segment(attempt, status, round(left, 2), round(width, 2), error)

    bars: list[Bar] = []
    for n in nodes:
        label = n.path + (f" (attempt {n.attempt})" if n.attempt > 1 else "")
        attempts = [a for a in n.attempts if a.started_at is not None]
        if attempts:
            segments = [
                segment(
                    a.attempt,
                    a.status if a.finished_at else n.status,
                    _seconds(a.started_at) or t0,
                    _seconds(a.finished_at),
                    a.error,
                )
                for a in attempts
            ]
        elif (started := _seconds(n.started_at)) is not None:
            segments = [segment(max(n.attempt, 1), n.status, started, _seconds(n.finished_at), n.error)]
        else:
            segments = []
        cut = max(n.path.rfind("["), n.path.rfind("#"))
        bars.append(Bar(n, segments, label, nested=cut > 0))
    return bars


async def overview(mesh: ApiMesh) -> dict[str, Any]:
    """The overview: live agents and workflows, the last hour's executions per status, failures, waiting reviews."""
    agents = await data.list_agents(mesh)
    since = data.now() - dt.timedelta(hours=1)
    counts = await data.count_executions(mesh, since=since)
    failures = await data.list_executions(mesh, status="failed", since=since, limit=10)
    paused = await data.list_executions(mesh, status="paused", limit=10)
    return {
        "agents": [a for a in agents if a.type != "workflow"],
        "workflows": [a for a in agents if a.type == "workflow"],
        "counts": counts,
        "failures": failures.items,
        "paused": paused.items,
    }


def version_label(key: str) -> str:
    """How a version key reads: ``v3`` for a stored version, the digest's start otherwise."""
    return f"v{key}" if key.isdigit() else key[:12]
