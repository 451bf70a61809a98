"""What an execution, schedule or event request can fail with, each mapped by the API to one HTTP status.

Every class is a :class:`~a2amesh.errors.UsageError`, so the CLI prints it as one line with exit code 2.
"""

from __future__ import annotations

from typing import Any

from a2amesh.errors import UsageError

__all__ = ["ActionConflict", "InvalidRequest", "NotFound", "RunsError"]


class RunsError(UsageError):
    """A request about executions, schedules or events that cannot be carried out."""

    status = 400


class NotFound(RunsError, LookupError):
    """No such execution or schedule (HTTP 404)."""

    status = 404

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"no {kind} {ident!r}")
        self.kind = kind
        self.ident = ident


class ActionConflict(RunsError):
    """The action does not apply to the execution as it is now, e.g. a resume of a running one (HTTP 409)."""

    status = 409


class InvalidRequest(RunsError, ValueError):
    """A request the mesh refused as invalid (HTTP 422), with one ``{path, message}`` entry per error."""

    status = 422

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or [{"path": "body", "message": message}]
