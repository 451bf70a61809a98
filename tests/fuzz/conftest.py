"""The wire fuzzer's counts, printed at the end of the session (messages, answers by code, valid calls, tracebacks)."""

from __future__ import annotations

from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.fuzz.harness import SUMMARIES

    if not SUMMARIES:
        return
    terminalreporter.write_sep("-", "wire fuzz counts")
    for target, counts in SUMMARIES.items():
        terminalreporter.write_line(f"{target}: " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
