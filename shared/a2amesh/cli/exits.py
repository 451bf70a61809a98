"""Exit codes of the CLI, and the one place that turns an error into a line on stderr and a code.

0 ok, 1 the task or run failed, 2 a usage or input error; a traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from a2amesh.errors import A2AMeshError, ConfigError, RpcError, TransportError, UsageError

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "exit_code_of"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT), as a shell reports it."""


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
