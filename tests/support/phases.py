"""How ``.ci/test``'s phases find and order their test files.

**Longest first.** A session on several pytest-xdist workers (``--dist loadfile``) hands out whole files in
collection order; pytest-xdist would order them by their number of tests, which leaves the slow files of one or two
tests (processes, the CLI, the benchmarks) for last, and the other workers idle while they run. Instead the
sessions take the files longest first, by the seconds each took in a run of the suite (``tests/durations.json``;
a file it does not know counts as an average one). ``A2AMESH_TEST_TIMES=PATH`` has every session write each
file's seconds to ``PATH.PID``; ``python -m tests.support.phases PATH`` makes ``tests/durations.json`` of them.

**Later phases.** Every pytest session collects every file it is given, and collecting the whole suite costs a
session ~10 s of CPU (it imports every test module). The parallel phase collects everything anyway; with
``A2AMESH_TEST_LATER`` set, each of its sessions writes which files hold ``quiet`` and which ``alone`` tests, and
``.ci/test`` hands the later phases those files alone (their ``-m`` still selects the tests).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

RECORD = "A2AMESH_TEST_LATER"
"""The variable naming the record's path (each session writes ``PATH.PID``)."""
LATER = ("quiet", "alone")
"""The markers of the later phases."""
TIMES = "A2AMESH_TEST_TIMES"
"""The variable naming where every session writes the seconds each test file took (``PATH.PID``)."""
DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
"""Seconds each test file took in a run of the suite (setup, call and teardown of its tests)."""
_seconds: dict[str, float] = {}


def longest_first(items: list[pytest.Item], root: Path, known: dict[str, float] | None = None) -> list[pytest.Item]:
    """``items`` with their files longest first (``known``, else ``tests/durations.json``), each file's tests in
    their order."""
    if known is None:
        try:
            known = json.loads(DURATIONS.read_text())
        except (OSError, ValueError):
            return items
    average = sum(known.values()) / len(known) if known else 0.0
    return sorted(items, key=lambda item: -known.get(_name(item.path, root), average))


def _name(path: Path, root: Path) -> str:
    return str(path.relative_to(root) if path.is_relative_to(root) else path)


def add_time(report: pytest.TestReport) -> None:
    """Count a test's setup, call or teardown toward its file's seconds (when ``A2AMESH_TEST_TIMES`` is set)."""
    if os.environ.get(TIMES) and getattr(report, "node", None) is None:  # not a worker's, handed to its controller
        _seconds[report.location[0]] = _seconds.get(report.location[0], 0.0) + report.duration


def write_times() -> None:
    """Write this session's seconds per file (when ``A2AMESH_TEST_TIMES`` is set)."""
    where = os.environ.get(TIMES)
    if where and _seconds:
        _write(where, _seconds)


def merge_times(where: Path) -> dict[str, float]:
    """The seconds per file of every session that wrote under ``where``, summed, to a tenth of a second."""
    total: dict[str, float] = {}
    for seconds_by_file in _records(where):
        for name, seconds in seconds_by_file.items():
            total[name] = total.get(name, 0.0) + seconds
    return {name: round(seconds, 1) for name, seconds in sorted(total.items())}


def record(items: Iterable[pytest.Item], root: Path) -> None:
    """Write the files under ``root`` holding tests of each later phase, if ``A2AMESH_TEST_LATER`` asks for it."""
    where = os.environ.get(RECORD)
    if not where:
        return
    files: dict[str, set[str]] = {marker: set() for marker in LATER}
    for item in items:
        for marker in LATER:
            if item.get_closest_marker(marker) is not None:
                files[marker].add(_name(item.path, root))
    _write(where, {marker: sorted(names) for marker, names in files.items()})


def read(where: Path) -> dict[str, list[str]] | None:
    """The files of each later phase the sessions of the parallel phase wrote under ``where`` (all of them: a
    session a test starts inside one writes too); None if none did."""
    found: dict[str, set[str]] = {}
    for files in _records(where):
        for marker, names in files.items():
            found.setdefault(marker, set()).update(names)
    return {marker: sorted(names) for marker, names in found.items()} if found else None


def _write(where: str, data: Mapping[str, object]) -> None:
    """This session's record under ``where`` (``PATH.PID``), whole or not at all."""
    path = Path(f"{where}.{os.getpid()}")
    written = path.with_name(path.name + ".tmp")
    written.write_text(json.dumps(data))
    written.replace(path)


def _records(where: Path) -> Iterator[dict[str, Any]]:
    """Every session's record under ``where``."""
    for path in where.parent.glob(f"{where.name}.*"):
        if path.suffix != ".tmp":
            yield json.loads(path.read_text())


if __name__ == "__main__":
    times = merge_times(Path(sys.argv[1]))
    DURATIONS.write_text(json.dumps(times, indent=0) + "\n")
    print(f"{DURATIONS}: {len(times)} files, {sum(times.values()):.0f} s")
