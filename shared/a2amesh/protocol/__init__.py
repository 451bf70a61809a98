"""A2A 1.0 protocol models (ProtoJSON over JSON-RPC 2.0)."""

from a2amesh.protocol.card import (
    AgentCapabilities,
    AgentCard,
    AgentCardSignature,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
)
from a2amesh.protocol.events import (
    SendMessageResponse,
    StreamResponse,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)
from a2amesh.protocol.jsonrpc import (
    CancelTaskRequest,
    GetTaskRequest,
    JsonRpcErrorObject,
    JsonRpcRequest,
    JsonRpcResponse,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from a2amesh.protocol.parts import Message, Part, Role
from a2amesh.protocol.task import Artifact, Task, TaskState, TaskStatus

__all__ = [
    "AgentCapabilities",
    "AgentCard",
    "AgentCardSignature",
    "AgentExtension",
    "AgentInterface",
    "AgentProvider",
    "AgentSkill",
    "Artifact",
    "CancelTaskRequest",
    "GetTaskRequest",
    "JsonRpcErrorObject",
    "JsonRpcRequest",
    "JsonRpcResponse",
    "ListTasksRequest",
    "ListTasksResponse",
    "Message",
    "Part",
    "Role",
    "SendMessageConfiguration",
    "SendMessageRequest",
    "SendMessageResponse",
    "StreamResponse",
    "SubscribeToTaskRequest",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskState",
    "TaskStatus",
    "TaskStatusUpdateEvent",
]
