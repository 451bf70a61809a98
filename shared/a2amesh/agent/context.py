"""The per-invocation context an agent handler receives (``ctx``), and the outcome it produces."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from a2amesh.protocol import Message, Part, TaskState

if TYPE_CHECKING:
    from a2amesh.client import Client
    from a2amesh.protocol import Task

CONTROL_PART_TYPES = frozenset({"workflow_node_request", "graph_node_request"})

Emitter = Callable[[list[Part], dict[str, Any] | None], Awaitable[None]]


def control_part(message: Message, kind: str) -> dict[str, Any] | None:
    """The data of the first DataPart of ``message`` whose ``type`` is ``kind``."""
    for p in message.parts:
        if isinstance(p.data, dict) and p.data.get("type") == kind:
            return p.data
    return None


def input_of(message: Message) -> Any:
    """The input of a task (SPEC §3.5): first non-control DataPart, else first URL part, else the joined text."""
    for p in message.parts:
        if p.data is not None and not (isinstance(p.data, dict) and p.data.get("type") in CONTROL_PART_TYPES):
            return p.data
    for p in message.parts:
        if p.url is not None:
            return {"artifact_url": p.url}
    return {"text": message.text()}


@dataclass
class TaskOutcome:
    """What an agent's work came to: the final state, its output and an optional status message."""

    state: TaskState
    output: Any = None
    message: str | None = None
    status_parts: list[Part] = field(default_factory=list)
    metadata: dict[str, Any] | None = None


@dataclass
class TaskContext:
    """Everything one invocation may use; never shared between invocations."""

    agent: str
    task_id: str
    context_id: str
    message: Message
    attempt: int
    deadline: float | None
    call_depth: int
    max_call_depth: int
    headers: dict[str, str]
    client: Client
    emitter: Emitter
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    history: list[Message] = field(default_factory=list)
    execution_id: str | None = None
    node_id: str | None = None

    @property
    def input(self) -> Any:
        """The task's input (SPEC §3.5 input contract)."""
        return input_of(self.message)

    @property
    def remaining(self) -> float | None:
        """Seconds until the deadline, if there is one."""
        return None if self.deadline is None else self.deadline - time.time()

    async def emit_status(
        self, text: str | None = None, *, data: Any = None, metadata: dict[str, Any] | None = None
    ) -> None:
        """Send a progress status update (state WORKING) to the caller of a streaming call."""
        parts: list[Part] = []
        if text is not None:
            parts.append(Part.of_text(text))
        if data is not None:
            parts.append(Part.of_data(data))
        await self.emitter(parts, metadata)

    async def call(self, agent: str, message: Message | str | dict[str, Any], **kwargs: Any) -> Task:
        """Call another agent or workflow over the mesh, within this task's deadline and call depth.

        Raises:
            TransportError: ``CALL_DEPTH_EXCEEDED`` when the mesh's maximum depth would be passed.
        """
        from a2amesh.client import make_message
        from a2amesh.errors import TransportError
        from a2amesh.protocol import codes

        depth = self.call_depth + 1
        if depth > self.max_call_depth:
            raise TransportError(
                codes.CALL_DEPTH_EXCEEDED,
                f"calling {agent!r} would make the call depth {depth}, above the maximum {self.max_call_depth}",
            )
        if isinstance(message, str):
            message = make_message(message, context_id=self.context_id)
        elif isinstance(message, dict):
            message = make_message(data=message, context_id=self.context_id)
        elif message.context_id is None:
            message = message.model_copy(update={"context_id": self.context_id})
        if self.deadline is not None:
            kwargs.setdefault("deadline", self.deadline)
        return await self.client.send(agent, message, headers=self.headers, call_depth=depth, **kwargs)
