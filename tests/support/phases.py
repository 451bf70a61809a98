"""Which test files hold the tests of ``.ci/test``'s later phases, as the parallel phase's collection found them.

Every pytest session collects every file it is given, and collecting the whole suite costs a session ~10 s of
CPU (it imports every test module). The parallel phase collects everything anyway; with ``A2AMESH_TEST_LATER``
set, each of its sessions writes which files hold ``quiet`` and which ``alone`` tests, and ``.ci/test`` hands the
later phases those files alone (their ``-m`` still selects the tests).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

RECORD = "A2AMESH_TEST_LATER"
"""The variable naming the record's path (each session writes ``PATH.PID``)."""
LATER = ("quiet", "alone")
"""The markers of the later phases."""


def record(items: Iterable[pytest.Item], root: Path) -> None:
    """Write the files under ``root`` holding tests of each later phase, if ``A2AMESH_TEST_LATER`` asks for it."""
    where = os.environ.get(RECORD)
    if not where:
        return
    files: dict[str, set[str]] = {marker: set() for marker in LATER}
    for item in items:
        for marker in LATER:
            if item.get_closest_marker(marker) is not None:
                files[marker].add(str(item.path.relative_to(root) if item.path.is_relative_to(root) else item.path))
    path = Path(f"{where}.{os.getpid()}")
    written = path.with_name(path.name + ".tmp")
    written.write_text(json.dumps({marker: sorted(names) for marker, names in files.items()}))
    written.replace(path)  # whole or not at all


def read(where: Path) -> dict[str, list[str]] | None:
    """The files of each later phase the sessions of the parallel phase wrote under ``where`` (all of them: a
    session a test starts inside one writes too); None if none did."""
    found: dict[str, set[str]] = {}
    for path in where.parent.glob(f"{where.name}.*"):
        if path.suffix != ".tmp":
            for marker, names in json.loads(path.read_text()).items():
                found.setdefault(marker, set()).update(names)
    return {marker: sorted(names) for marker, names in found.items()} if found else None
