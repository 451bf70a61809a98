"""a2amesh: A2A 1.0 agents and workflows over NATS JetStream, with execution state in Redis.

The public names are imported on first use (PEP 562 ``__getattr__``), so ``import a2amesh.workflow.engine``
or ``import a2amesh.protocol`` loads neither nats nor redis; ``from a2amesh import Client`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from a2amesh.agent.context import TaskContext, TaskOutcome
    from a2amesh.agent.host import AgentHost
    from a2amesh.client import Call, Client, connect, make_message
    from a2amesh.config import Settings
    from a2amesh.errors import (
        A2AMeshError,
        ConfigError,
        InputRequired,
        RetryWithFeedback,
        RpcError,
        TransportError,
    )
    from a2amesh.protocol import AgentCard, Artifact, Message, Part, Task, TaskState

__version__ = "0.1.0"

_SOURCES: dict[str, str] = {
    "A2AMeshError": "a2amesh.errors",
    "AgentCard": "a2amesh.protocol",
    "AgentHost": "a2amesh.agent.host",
    "Artifact": "a2amesh.protocol",
    "Call": "a2amesh.client",
    "Client": "a2amesh.client",
    "ConfigError": "a2amesh.errors",
    "InputRequired": "a2amesh.errors",
    "Message": "a2amesh.protocol",
    "Part": "a2amesh.protocol",
    "RetryWithFeedback": "a2amesh.errors",
    "RpcError": "a2amesh.errors",
    "Settings": "a2amesh.config",
    "Task": "a2amesh.protocol",
    "TaskContext": "a2amesh.agent.context",
    "TaskOutcome": "a2amesh.agent.context",
    "TaskState": "a2amesh.protocol",
    "TransportError": "a2amesh.errors",
    "connect": "a2amesh.client",
    "make_message": "a2amesh.client",
}
"""Public name → the module that defines it."""

__all__ = [
    "A2AMeshError",
    "AgentCard",
    "AgentHost",
    "Artifact",
    "Call",
    "Client",
    "ConfigError",
    "InputRequired",
    "Message",
    "Part",
    "RetryWithFeedback",
    "RpcError",
    "Settings",
    "Task",
    "TaskContext",
    "TaskOutcome",
    "TaskState",
    "TransportError",
    "connect",
    "make_message",
]


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'a2amesh' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
