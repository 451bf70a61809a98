"""The event loop every a2amesh process runs on: uvloop where it is installed, else asyncio's own.

uvloop (libuv) spends less CPU per socket read, write and poll than asyncio's selector loop, which is
where a mesh process spends most of its time. ``A2AMESH_UVLOOP=0`` turns it off.

The cyclic garbage collector is tuned before the loop starts (``A2AMESH_GC=default`` keeps Python's
settings): a mesh process allocates and frees many small objects per message (pydantic models, parsed
JSON), and with Python's default thresholds (700, 10, 10) the executor under load spent ~16 % of its
CPU in collections (gen 0 every ~1,000 node steps' worth of allocations, a full collection of the
whole heap every few seconds). Almost all of those objects are freed by reference counting; the
collector only needs to find cycles, which a process makes few of. Thresholds of (50,000, 20, 10)
and the startup objects frozen out of the collector's scans (``gc.freeze()``) cut that to < 1 %.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["GC_THRESHOLDS", "loop_name", "run", "tune_gc"]

GC_THRESHOLDS = (50_000, 20, 10)

T = TypeVar("T")


def _uvloop_wanted() -> bool:
    return os.environ.get("A2AMESH_UVLOOP", "1").strip().lower() not in {"0", "false", "no", "off"}


def tune_gc() -> None:
    """Freeze what is alive now (imports, settings) out of collections and raise the thresholds, unless
    ``A2AMESH_GC=default``."""
    if os.environ.get("A2AMESH_GC", "tuned").strip().lower() == "default":
        return
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop when it is installed and wanted, with the collector tuned."""
    tune_gc()
    if _uvloop_wanted():
        try:
            import uvloop
        except ImportError:
            pass
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main)
    return asyncio.run(main)


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: what the running loop is (for logs)."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
