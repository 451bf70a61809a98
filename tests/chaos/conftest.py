"""Chaos suite support: a summary line per scenario, printed at the end of the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

_SUMMARIES: list[str] = []


@dataclass
class ChaosSummary:
    """The figures every chaos scenario reports."""

    scenario: str
    runs: int
    completed: int
    lost: int
    duplicated: int
    max_recovery_s: float

    def line(self) -> str:
        return (
            f"chaos {self.scenario}: runs={self.runs} completed={self.completed} lost={self.lost} "
            f"duplicated_side_effects={self.duplicated} max_recovery={self.max_recovery_s:.2f}s"
        )


@pytest.fixture
def report() -> Callable[[ChaosSummary], None]:
    def add(summary: ChaosSummary) -> None:
        _SUMMARIES.append(summary.line())
        print(summary.line())

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _SUMMARIES:
        terminalreporter.section("chaos summary")
        for line in _SUMMARIES:
            terminalreporter.write_line(line)
