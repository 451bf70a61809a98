"""Chaos suite support: a summary line per scenario, printed at the end of the run (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from a2amesh.store.redis import Redis

SUMMARIES: list[str] = []
"""This session's summary lines."""


def summary_lines() -> list[str]:
    """A line per scenario run, for the end of the run (tests/conftest.py prints them)."""
    return list(SUMMARIES)


@dataclass
class ChaosSummary:
    """The figures every chaos scenario reports."""

    scenario: str
    runs: int
    completed: int
    lost: int
    duplicated: int
    max_recovery_s: float
    fenced: int | None = None
    """Writes and replies of woken processes refused (starvation scenarios)."""
    limit: int = 0
    """Of ``duplicated``: the documented limit case, a handler already past its outside effect when its
    process was paused (docs/agents.md, "Effects outside the mesh")."""

    def line(self) -> str:
        extra = "" if self.fenced is None else f" fenced={self.fenced} limit_case={self.limit}"
        return (
            f"chaos {self.scenario}: runs={self.runs} completed={self.completed} lost={self.lost} "
            f"duplicated_side_effects={self.duplicated}{extra} max_recovery={self.max_recovery_s:.2f}s"
        )


async def completions(redis: Redis, namespace: str, task_id: str) -> list[str]:
    """The pids that completed the ``side_effect`` handler for a task, in order, one per run of the handler.

    A value pushed twice is one push that redis-py re-sent after a Valkey restart lost its reply, not a
    second run: each run pushes a value of its own (``pid:run``).
    """
    pushed = await redis.lrange(f"{namespace}:test:completed:{task_id}", 0, -1)
    return [str(value).partition(":")[0] for value in dict.fromkeys(pushed)]


@pytest.fixture
def report() -> Callable[[ChaosSummary], None]:
    def add(summary: ChaosSummary) -> None:
        SUMMARIES.append(summary.line())
        print(summary.line())

    return add
