"""The per-invocation context an agent handler receives (``ctx``), and the outcome it produces."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from a2amesh.agent.usage import Usage
from a2amesh.bus import headers as h
from a2amesh.errors import ArtifactError, TaskFenced
from a2amesh.ids import idempotency_key_for
from a2amesh.jsontext import dumps_text, loads
from a2amesh.protocol import Message, Part, TaskState
from a2amesh.protocol.vocabulary import CONTROL_PART_TYPES
from a2amesh.worker.deltas import DeltaSink

if TYPE_CHECKING:
    from a2amesh.client import Client
    from a2amesh.protocol import Task
    from a2amesh.store.artifacts import ArtifactMeta, ArtifactScope, ArtifactStore, StoredArtifact
    from a2amesh.store.conversations import ConversationStore
    from a2amesh.store.tasks import TaskStore

Emitter = Callable[[list[Part], dict[str, Any] | None], Awaitable[None]]
Fencer = Callable[[], Awaitable[bool]]
"""Whether this replica's claim still holds the task (renewing it if so): ``ctx.fence()``'s check."""

_UNSET: Any = object()


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
    result_part: Part | None = None
    """The part of ``artifacts[0]`` when it is not built from ``output`` (an ``artifact://`` URL part)."""


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
    artifacts: ArtifactStore | None = None
    task_store: TaskStore | None = None
    conversations: ConversationStore | None = None
    delta: DeltaSink | None = None
    inline_threshold: int = 256 * 1024
    usage: Usage = field(default_factory=Usage)
    feedback: str | None = None
    """Set by the node handler when a Python agent is called again after raising ``RetryWithFeedback``."""
    namespace: str = ""
    handler_try: int = 1
    """Which call of the handler this is within the invocation (the node handler's ``RetryWithFeedback``)."""
    fence_token: str = ""
    """The fencing token of this replica's claim on the task: its checkpoints carry it."""
    fencer: Fencer | None = None
    _input: Any = field(default=_UNSET, repr=False)
    _saved: dict[str, StoredArtifact] = field(default_factory=dict, repr=False)
    """The latest version of each artifact this invocation saved (its scope is this task's alone)."""

    @property
    def input(self) -> Any:
        """The task's input (SPEC §3.5 input contract; an artifact URL input is loaded by the node handler)."""
        return input_of(self.message) if self._input is _UNSET else self._input

    def set_input(self, value: Any) -> None:
        """Replace the input (the node handler sets the loaded value of an artifact URL input)."""
        self._input = value

    @property
    def idempotency_key(self) -> str:
        """A key for this invocation's effects outside the mesh (send it as an ``Idempotency-Key``): the same on
        every redelivery of the task and every re-dispatch of the same workflow node attempt, so an outside
        service that de-duplicates by it applies the effect once; another for a new node attempt, another
        turn of the task, or another call of the handler after ``RetryWithFeedback`` (docs/agents.md)."""
        return idempotency_key_for(self.namespace, self.agent, self.task_id, self.message.message_id, self.handler_try)

    async def fence(self) -> None:
        """Make sure this replica still holds the task; call it right before an effect outside the mesh.

        A process paused or starved past its claim's TTL may find that another replica took the task over
        (and runs the handler again): then this raises, and the rest of this run is neither stored nor
        answered. Otherwise the claim is renewed, so no other replica can take the task for a claim TTL
        (docs/agents.md, "Effects outside the mesh"). One Redis round trip.

        Raises:
            TaskFenced: another replica took the task over.
        """
        if self.fencer is not None and not await self.fencer():
            raise TaskFenced(self.task_id)

    @property
    def user(self) -> str | None:
        """The ``A2A-User`` of the request, which scopes its artifacts."""
        return self.headers.get(h.USER) or None

    @property
    def scope(self) -> ArtifactScope:
        """Where this task's artifacts are written: ``{context_id}/{task_id}``."""
        from a2amesh.store.artifacts import ArtifactScope

        return ArtifactScope(self.context_id, self.task_id)

    def _artifact_store(self) -> ArtifactStore:
        if self.artifacts is None:
            raise ArtifactError("this agent has no artifact store (the host was built without Redis)")
        return self.artifacts

    async def save_artifact(
        self, name: str, content: Any, *, media_type: str | None = None, metadata: dict[str, Any] | None = None
    ) -> ArtifactMeta:
        """Save the next version of an artifact in this task's scope.

        Raises:
            ArtifactError: a bad name, content that cannot be stored, or content too large.
            TaskFenced: another replica took the task over (the artifact is not saved).
        """
        await self.fence()  # the artifact's keys are not in the task's slot: checked before, not with, the write
        saved = await self._artifact_store().put(
            self.scope, name, content, media_type=media_type, metadata=metadata, user=self.user
        )
        self._saved[name] = saved
        return saved.meta

    async def load_artifact(self, name_or_uri: str, *, version: int | None = None) -> StoredArtifact:
        """Load an artifact of this task by name (latest unless ``version``), or any artifact by its URI.

        Raises:
            ArtifactNotFound: nothing readable by this request's user has that name, version or URI.
        """
        store = self._artifact_store()
        if name_or_uri.startswith("artifact://"):
            return await store.load_uri(name_or_uri, user=self.user)
        saved = self._saved.get(name_or_uri)
        if saved is not None and (version is None or version == saved.meta.version):
            return saved  # written by this invocation: no round trip to read it back
        return await store.load(self.scope, name_or_uri, version, user=self.user)

    async def list_artifacts(self) -> list[ArtifactMeta]:
        """The latest version of every artifact of this task."""
        return await self._artifact_store().list(self.scope, user=self.user)

    async def emit_delta(self, text: str) -> None:
        """Publish a text delta of a streaming answer (best effort; nothing happens for a non-streaming call)."""
        if self.delta is not None and text:
            await self.delta(text)

    async def save_checkpoint(self, data: dict[str, Any]) -> None:
        """Store this task's resumable progress in its task record (SPEC §3.6).

        Raises:
            TaskFenced: another replica took the task over (nothing is stored).
        """
        if self.task_store is not None and not await self.task_store.save_checkpoint(
            self.task_id, dumps_text(data), fence=self.fence_token
        ):
            raise TaskFenced(self.task_id)

    async def load_checkpoint(self) -> dict[str, Any] | None:
        """The last checkpoint of this task, if any."""
        if self.task_store is None:
            return None
        raw = await self.task_store.checkpoint(self.task_id)
        if not raw:
            return None
        value = loads(raw)
        return value if isinstance(value, dict) else None

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
