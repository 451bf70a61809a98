"""Exit codes of the CLI, and the one place that turns an error into a line on stderr and a code.

The one table (docs/operations.md), the same with and without ``--json``:

- 0: done. A verb that waits for a run or a task (``run``, ``retry``, ``resume``, ``call``, ``chat``) ended
  ``completed`` or ``paused`` (a pause for a review or a question is not an error); any other verb did
  what it was asked (``show`` of a failed run has shown it).
- 1: the run or task it waited for ended ``failed`` or ``cancelled``; or the mesh failed the request
  (unreachable, timed out, an error answer).
- 2: a usage or input error: bad arguments, a bad file, unknown ids, an action that does not apply.
- 130: interrupted (Ctrl-C).

A traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from a2amesh.errors import A2AMeshError, ConfigError, RpcError, TransportError, UsageError
from a2amesh.protocol.states import state_word
from a2amesh.protocol.task import TaskState

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "exit_code_of", "exit_of_state"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT), as a shell reports it."""


def exit_of_state(state: TaskState | str) -> int:
    """The exit code of a verb whose run or task ended in ``state`` (an A2A state or a state word)."""
    return EXIT_OK if state_word(state) in ("completed", "paused") else EXIT_FAILED


def exit_code_of(args: argparse.Namespace, e: Exception) -> int:
    """Print ``e`` as one line on stderr (with its traceback under ``--debug``); the exit code it means."""
    if isinstance(e, UsageError | ConfigError):
        return _fail(args, e, EXIT_USAGE)
    if isinstance(e, RpcError):
        return _fail(args, e, EXIT_FAILED, prefix=f"error {e.code}")
    if isinstance(e, TransportError):
        return _fail(args, e, EXIT_FAILED, prefix=e.reason)
    if isinstance(e, A2AMeshError):
        return _fail(args, e, EXIT_FAILED)
    # the outer edge: one line, never a traceback unless --debug
    return _fail(args, e, EXIT_FAILED, prefix=f"internal error ({type(e).__name__}; --debug shows more)")


def _fail(args: argparse.Namespace, e: BaseException, code: int, prefix: str = "") -> int:
    if getattr(args, "debug", False):
        traceback.print_exception(e)
    label = f"{prefix}: " if prefix else ""
    print(f"a2amesh: {label}{e}", file=sys.stderr)
    return code
