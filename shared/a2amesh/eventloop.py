"""The event loop every a2amesh process runs on: uvloop where it is installed, else asyncio's own.

uvloop (libuv) spends less CPU per socket read, write and poll than asyncio's selector loop, which is
where a mesh process spends most of its time. ``A2AMESH_UVLOOP=0`` turns it off.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["loop_name", "run"]

T = TypeVar("T")


def _uvloop_wanted() -> bool:
    return os.environ.get("A2AMESH_UVLOOP", "1").strip().lower() not in {"0", "false", "no", "off"}


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop when it is installed and wanted."""
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
