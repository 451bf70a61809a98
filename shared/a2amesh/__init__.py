"""a2amesh: A2A 1.0 agents and workflows over NATS JetStream, with execution state in Redis."""

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
