"""Fault hooks for the chaos suite (SPEC §11): ``A2AMESH_FAULT=crash:POINT[,crash:POINT…]``.

At a named point a process whose variable names that point exits at once (``os._exit``), hitting a
narrow window deterministically. Without the variable every call is a no-op.
"""

from __future__ import annotations

import os
import sys

_POINTS = frozenset(
    p.strip().removeprefix("crash:") for p in os.environ.get("A2AMESH_FAULT", "").split(",") if p.strip()
)


def crash_point(name: str) -> None:
    """Exit the process at once if the fault hook names this point."""
    if name in _POINTS:
        sys.stderr.write(f"a2amesh: fault hook crash:{name}\n")
        sys.stderr.flush()
        os._exit(137)


def armed(name: str) -> bool:
    """Whether the fault hook names this point."""
    return name in _POINTS
