"""The state words people read: one set for the CLI, the management API, the dashboard and MCP.

A2A's ``TASK_STATE_*`` names belong to the A2A wire only; the store keeps ``canceled`` (its indexes are
named by it). Everything shown to a person, and every management JSON, says one of :data:`STATES`; what a
person types is read by :func:`parse_state`, which takes every spelling variant.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import PlainSerializer

from a2amesh.protocol.base import utc_timestamp
from a2amesh.protocol.task import TaskState

__all__ = ["NODE_STATES", "STATES", "Instant", "State", "parse_state", "rfc3339", "state_word"]

State = Literal["running", "paused", "completed", "failed", "cancelled"]
STATES: tuple[State, ...] = ("running", "paused", "completed", "failed", "cancelled")
"""An execution's or a task's state as people read it."""

NODE_STATES: tuple[str, ...] = (*STATES, "pending", "skipped")
"""A node instance's state: the run's words and two of its own."""

_WORDS: dict[str, str] = {
    # A2A task states (their enum names, with and without the prefix)
    TaskState.SUBMITTED.value: "running",
    TaskState.WORKING.value: "running",
    TaskState.COMPLETED.value: "completed",
    TaskState.FAILED.value: "failed",
    TaskState.REJECTED.value: "failed",
    TaskState.CANCELED.value: "cancelled",
    TaskState.INPUT_REQUIRED.value: "paused",
    TaskState.AUTH_REQUIRED.value: "paused",
    # other spellings: the store's, A2A 0.3's, the engines' node statuses
    "submitted": "running",
    "working": "running",
    "rejected": "failed",
    "canceled": "cancelled",
    "input_required": "paused",
    "input-required": "paused",
    "auth_required": "paused",
    "auth-required": "paused",
    "waiting_input": "paused",
}


def state_word(state: TaskState | str) -> str:
    """The word people read for ``state`` (an A2A state, a stored or a node status); unknown words pass."""
    text = state.value if isinstance(state, TaskState) else str(state)
    return _WORDS.get(text, text)


def parse_state(text: str, allowed: tuple[str, ...] = STATES) -> str:
    """The word of what a person typed (``canceled``, ``CANCELLED``, ``TASK_STATE_CANCELED``, ``working``…).

    Raises:
        ValueError: not a spelling of any of ``allowed``, with the choices.
    """
    raw = text.strip()
    upper = raw.upper()
    key = upper if upper.startswith("TASK_STATE_") else raw.lower()
    if key.startswith("TASK_STATE_"):
        key = key.removeprefix("TASK_STATE_").lower()
    word = _WORDS.get(key, key)
    if word not in allowed:
        raise ValueError(f"{text!r} is not one of {', '.join(allowed)}")
    return word


def rfc3339(moment: datetime | float | None) -> str | None:
    """``moment`` (a datetime, or epoch seconds) as RFC 3339 in UTC with milliseconds and ``Z``; None stays."""
    if moment is None:
        return None
    if isinstance(moment, datetime):
        moment = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    return utc_timestamp(float(moment))


Instant = Annotated[datetime, PlainSerializer(rfc3339, return_type=str)]
"""A moment in a management model, written as RFC 3339 in UTC with milliseconds and ``Z`` (every timestamp of
the API's, the CLI's and the dashboard's JSON)."""
