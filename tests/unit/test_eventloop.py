"""The process event loop's garbage-collector tuning, checked in fresh interpreters."""

from __future__ import annotations

import os
import subprocess
import sys

from a2amesh.eventloop import GC_THRESHOLDS

PROBE = """
import asyncio, gc, json
from a2amesh import eventloop
async def main():
    return {"threshold": list(gc.get_threshold()), "frozen": gc.get_freeze_count() > 0}
print(json.dumps(eventloop.run(main())))
"""


def probe(**env: str) -> dict[str, object]:
    import json

    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=True
    )
    return dict(json.loads(out.stdout))


def test_processes_run_with_the_tuned_collector() -> None:
    assert probe() == {"threshold": list(GC_THRESHOLDS), "frozen": True}


def test_a2amesh_gc_default_keeps_pythons_settings() -> None:
    import gc

    assert GC_THRESHOLDS != gc.get_threshold()  # this test process runs with Python's own settings
    assert probe(A2AMESH_GC="default") == {"threshold": list(gc.get_threshold()), "frozen": False}
