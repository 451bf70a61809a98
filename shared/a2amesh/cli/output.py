"""Human output of the CLI: tables, times and durations."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from a2amesh.protocol.states import state_word
from a2amesh.protocol.vocabulary import REVIEW_REQUEST

if TYPE_CHECKING:
    from a2amesh.protocol import Task

__all__ = ["duration", "print_table", "review_request", "seconds_of_ms", "task_summary", "when"]


def review_request(task: Task) -> dict[str, Any] | None:
    """The ``review_request`` DataPart of a task paused for a human, or None."""
    message = task.status.message
    for part in message.parts if message is not None else []:
        if isinstance(part.data, dict) and part.data.get("type") == REVIEW_REQUEST:
            return dict(part.data)
    return None


def task_summary(task: Task) -> dict[str, Any]:
    """A finished (or paused) task as the CLI's ``--json`` shows it: the state in people's words, never A2A's.

    ``question`` is what a task that waits for input asks, ``review`` the review a paused workflow waits for.
    """
    state = state_word(task.status.state)
    text = task.status.message.text() if task.status.message else ""
    review = review_request(task)
    out: dict[str, Any] = {
        "task_id": task.id,
        "context_id": task.context_id,
        "status": state,
        "output": task.output() if state == "completed" else None,
        "error": text or None if state in ("failed", "cancelled") else None,
    }
    if state == "paused":
        if review is not None:
            out["review"] = review
        else:
            out["question"] = text
    return out


def print_table(rows: Sequence[tuple[str, ...]]) -> None:
    """Print ``rows`` (the first is the header) as left-aligned columns."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def seconds_of_ms(value: str | None) -> float | None:
    """A stored epoch in milliseconds (``"1712…"``) as seconds, or None."""
    return int(value) / 1000 if value and value.isdigit() else None


def when(epoch: float | None) -> str:
    """Local date and time of ``epoch``, or ``-``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"


def duration(start: float | None, end: float | None) -> str:
    """``start`` to ``end`` (or now): milliseconds below 10 s, else seconds."""
    if start is None:
        return "-"
    seconds = (end or time.time()) - start
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else f"{seconds:.1f}s"
