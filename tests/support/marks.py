"""A pytest plugin that lists the collected tests with their markers, a line each (``-p tests.support.marks``):
``.ci/test``'s phases are checked against it (tests/unit/test_ci_runner.py)."""

from __future__ import annotations

import pytest

PREFIX = "marks: "


def pytest_collection_finish(session: pytest.Session) -> None:
    reporter: pytest.TerminalReporter = session.config.pluginmanager.getplugin("terminalreporter")
    for item in session.items:
        reporter.write_line(f"{PREFIX}{item.nodeid} {' '.join(sorted({m.name for m in item.iter_markers()}))}")
