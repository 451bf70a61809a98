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

__all__ = ["SINCE", "Bar", "as_yaml", "diff_lines", "duration", "iso", "overview", "pretty", "short_id", "timeline"]

SINCE = {"1h": 3600, "24h": 86400, "7d": 7 * 86400}
"""The time filter's choices, in seconds."""
COLLAPSE_CHARS = 400
"""Payloads longer than this are shown collapsed."""


def pretty(value: Any) -> str:
    """A JSON value as indented text (a string as itself)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def iso(seconds: float | None) -> str:
    """Epoch seconds as ISO 8601 UTC (the browser shows it in its own zone)."""
    if seconds is None:
        return ""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(start: float | None, end: float | None = None) -> str:
    """``1.25 s``, ``3 min 4 s``; running ones count to now; empty without a start."""
    if start is None:
        return ""
    seconds = max((end if end is not None else time.time()) - start, 0.0)
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
class Bar:
    """One node attempt on the timeline: left offset and width in percent of the run's span."""

    node: data.NodeRecord
    left: float
    width: float
    label: str
    earlier: float = 0.0
    """Width (percent) of the earlier attempts at the start of the bar (a retried node), 0 otherwise."""


def timeline(execution: data.Execution, nodes: list[data.NodeRecord]) -> list[Bar]:
    """A bar per started node instance, on the execution's time axis (not started ones last, empty)."""
    t0 = execution.started_at or min((n.started_at for n in nodes if n.started_at), default=time.time())
    ends = [n.finished_at or time.time() for n in nodes if n.started_at]
    t1 = max([execution.finished_at or time.time(), *ends])
    span = max(t1 - t0, 0.001)
    bars: list[Bar] = []
    for n in nodes:
        label = n.path + (f" (attempt {n.attempt})" if n.attempt > 1 else "")
        if n.started_at is None:
            bars.append(Bar(n, 0.0, 0.0, label))
            continue
        left = max(n.started_at - t0, 0.0) / span * 100
        width = min(max(((n.finished_at or t1) - n.started_at) / span * 100, 0.6), 100 - left)
        earlier = 0.0
        if n.attempt > 1 and n.attempt_started_at is not None and n.attempt_started_at > n.started_at:
            earlier = min((n.attempt_started_at - n.started_at) / span * 100, width)
        bars.append(Bar(n, round(left, 2), round(width, 2), label, round(earlier, 2)))
    return bars


async def overview(mesh: ApiMesh) -> dict[str, Any]:
    """The overview: live agents and workflows, the last hour's executions per status, failures, waiting reviews."""
    agents = await data.list_agents(mesh)
    recent = await data.list_executions(mesh, limit=1000)
    cutoff = time.time() - 3600
    last_hour = [e for e in recent.items if (e.started_at or 0) >= cutoff]
    counts = {status: sum(1 for e in last_hour if e.status == status) for status in data.STATUSES}
    failures = [e for e in last_hour if e.status == "failed"][:10]
    paused = [e for e in recent.items if e.status == "paused"][:10]
    return {
        "agents": [a for a in agents if a.type != "workflow"],
        "workflows": [a for a in agents if a.type == "workflow"],
        "counts": counts,
        "failures": failures,
        "paused": paused,
    }
