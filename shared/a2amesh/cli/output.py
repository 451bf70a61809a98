"""Human output of the CLI: tables, times and durations."""

from __future__ import annotations

import time
from collections.abc import Sequence

__all__ = ["duration", "print_table", "seconds_of_ms", "when"]


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
