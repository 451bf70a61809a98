"""The one exception hierarchy of a2amesh, and the mapping of errors to JSON-RPC.

Every error's ``str()`` is the one line a user sees. Numbers of the wire protocol live in
:mod:`a2amesh.protocol.codes`; this module is the only place that maps exceptions to and from them.
"""

from __future__ import annotations

from typing import Any

from a2amesh.protocol import codes


class A2AMeshError(Exception):
    """Root of every error raised by a2amesh."""


class ConfigError(A2AMeshError, ValueError):
    """A user's configuration or definition file is wrong.

    Attributes:
        source: the file or setting source (path, ``env``).
        field: the dotted field that is wrong, or ``""``.
        problem: what is wrong with it.
    """

    def __init__(self, source: str, field: str, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        where = f"{source}: {field}: " if field else f"{source}: "
        super().__init__(f"{where}{problem}")


class DefinitionError(ConfigError):
    """A workflow definition is invalid.

    Attributes:
        node_id: the node at fault, or ``""`` for the workflow itself.
    """

    def __init__(self, source: str, node_id: str, field: str, problem: str) -> None:
        self.node_id = node_id
        location = ".".join(p for p in (f"nodes[{node_id}]" if node_id else "", field) if p)
        super().__init__(source, location, problem)


class ScheduleError(ConfigError):
    """A workflow's ``executionMode`` or ``schedule`` is wrong.

    Attributes:
        value: the mode or schedule as given.
        reason: what is wrong with it (without the location).
    """

    def __init__(self, value: object, reason: str, *, source: str = "<schedule>", field: str = "schedule") -> None:
        self.value = value
        self.reason = reason
        super().__init__(source, field, f"{value!r}: {reason}")


class InvalidTransition(A2AMeshError, ValueError):
    """An event or a new turn does not fit the state of an execution (resume of a run that is not paused…).

    Attributes:
        problem: what does not fit, in one line.
    """

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


class ServerError(A2AMeshError, RuntimeError):
    """An embedded server (nats-server, valkey-server) failed to start or stop."""


class WorkerNotReady(A2AMeshError):
    """A worker started by :meth:`a2amesh.lifecycle.Worker.start` ended, or was not serving in time, before it
    was ready."""


class RemoteError(A2AMeshError):
    """A remote A2A agent (``remote:`` in an agent folder) cannot be used: unreachable, not A2A, or invalid.

    Attributes:
        url: the remote's URL as declared.
        problem: what is wrong, in one line.
    """

    def __init__(self, url: str, problem: str) -> None:
        self.url = url
        self.problem = problem
        super().__init__(f"remote agent {url}: {problem}")


class UsageError(A2AMeshError):
    """A command-line mistake: a missing argument, an unknown run id (the CLI exits with 2)."""


class StoreError(A2AMeshError):
    """Redis/Valkey is unreachable or misconfigured."""


class StoreUnavailable(StoreError):
    """Redis/Valkey cannot be reached for now (restart, pause, network, a dropped connection).

    Raised by :mod:`a2amesh.store` in place of redis-py's connection and timeout errors. The work that met
    it is handed back and retried later, never failed.
    """


class StateConflict(A2AMeshError):
    """A guarded write lost (lease epoch, version check): another writer owns the state."""


class TaskFenced(StateConflict):
    """This replica no longer holds the task: another replica claimed it since (this one's claim lapsed while
    its process was paused or starved). Raised by ``ctx.fence()`` and by a fenced ``ctx.save_checkpoint``;
    the worker stops, and nothing more of its run is stored or answered."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id} was taken over by another replica; this run's work stops here")


class TransportError(A2AMeshError):
    """A call failed below A2A: the agent is unknown, the deadline passed, the payload is too big.

    Attributes:
        reason: one of :data:`a2amesh.protocol.codes.TRANSPORT_REASONS`.
        retryable: whether trying the same call again may succeed.
    """

    def __init__(self, reason: str, message: str, *, metadata: dict[str, str] | None = None) -> None:
        self.reason = reason
        self.metadata = metadata or {}
        self.retryable = reason in (codes.UNAVAILABLE, codes.DEADLINE_EXCEEDED)
        super().__init__(message)


class RpcError(A2AMeshError):
    """A JSON-RPC error answered by a peer (or to be answered to one).

    Attributes:
        code: the JSON-RPC error code.
        data: the A2A ``data`` list (``google.rpc.ErrorInfo`` objects).
    """

    def __init__(self, code: int, message: str, data: list[dict[str, Any]] | None = None) -> None:
        self.code = code
        self.data = data or []
        super().__init__(message)

    @property
    def reason(self) -> str | None:
        """The ``reason`` of the first ErrorInfo, if any."""
        for item in self.data:
            if isinstance(item, dict) and "reason" in item:
                return str(item["reason"])
        return None


class TaskNotFound(RpcError):
    """The task id is unknown (A2A -32001)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(codes.TASK_NOT_FOUND, f"task {task_id} not found")


class TaskNotCancelable(RpcError):
    """The task is already in a terminal state (A2A -32002)."""

    def __init__(self, task_id: str, state: str) -> None:
        super().__init__(codes.TASK_NOT_CANCELABLE, f"task {task_id} is {state} and cannot be canceled")


class VersionNotSupported(RpcError):
    """The request's A2A-Version is missing or not served (A2A -32009)."""

    def __init__(self, got: str | None) -> None:
        served = ", ".join(codes.SERVED_VERSIONS)
        what = f"A2A-Version {got!r} is not supported" if got else "the A2A-Version header is missing"
        super().__init__(codes.VERSION_NOT_SUPPORTED, f"{what}; this agent serves A2A-Version {served}")


class NodeFailed(A2AMeshError):
    """A workflow node failed after its attempts.

    Attributes:
        node_id: the failing node.
        attempts: how many attempts ran.
        errors: the errors reported, one line each.
    """

    def __init__(self, node_id: str, attempts: int, errors: list[str]) -> None:
        self.node_id = node_id
        self.attempts = attempts
        self.errors = errors
        super().__init__(f"node {node_id} failed after {attempts} attempt(s): {'; '.join(errors)}")


class ArtifactError(A2AMeshError, ValueError):
    """An artifact cannot be stored or read: a bad name or URI, content too large, not the caller's."""


class ArtifactNotFound(ArtifactError, LookupError):
    """No readable artifact has that name and version (or URI).

    Attributes:
        name: the artifact name.
        version: the version asked for, or ``None`` for the latest.
        scope: ``{context_id}/{task_id}`` of the lookup.
    """

    def __init__(self, name: str, version: int | None, scope: str) -> None:
        self.name = name
        self.version = version
        self.scope = scope
        which = "any version" if version is None else f"version {version}"
        super().__init__(f"artifact {name!r} ({which}) not found in scope {scope}")


class LlmError(A2AMeshError):
    """The model endpoint failed (after its HTTP retries) or the tool loop could not finish.

    Attributes:
        status: the HTTP status the endpoint answered, if any.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class RequestRejected(A2AMeshError):
    """Raised by agent code: decline the request (``TASK_STATE_REJECTED``) with this answer, e.g. a guardrail."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        super().__init__(answer)


class ToolError(A2AMeshError):
    """Raised by a tool: the call failed, and this message goes back to the model instead of a result."""


class RetryWithFeedback(A2AMeshError):
    """Raised by agent code: ask the node handler to try again with this feedback."""

    def __init__(self, feedback: str) -> None:
        self.feedback = feedback
        super().__init__(feedback)


class InputRequired(A2AMeshError):
    """Raised by agent code: pause the task in ``TASK_STATE_INPUT_REQUIRED`` with this prompt."""

    def __init__(self, prompt: str, data: Any = None) -> None:
        self.prompt = prompt
        self.data = data
        super().__init__(prompt)


def error_info(reason: str, metadata: dict[str, str] | None = None, domain: str = codes.DOMAIN) -> dict[str, Any]:
    """Build one A2A ``google.rpc.ErrorInfo`` object."""
    return {"@type": codes.ERROR_INFO_TYPE, "reason": reason, "domain": domain, "metadata": metadata or {}}


def transport_rpc_error(reason: str, message: str, metadata: dict[str, str] | None = None) -> RpcError:
    """A transport-level failure as the JSON-RPC error that carries it (-32000, domain a2amesh)."""
    return RpcError(codes.TRANSPORT_ERROR, message, [error_info(reason, metadata)])


def to_rpc_error(exc: BaseException) -> RpcError:
    """Map any exception to the JSON-RPC error that reports it on the wire."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, TransportError):
        return transport_rpc_error(exc.reason, str(exc), exc.metadata)
    return RpcError(codes.INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")


def from_rpc_error(code: int, message: str, data: list[dict[str, Any]] | None) -> A2AMeshError:
    """Map a JSON-RPC error received from a peer to our exception class."""
    if code == codes.TRANSPORT_ERROR:
        for item in data or []:
            if isinstance(item, dict) and item.get("domain") == codes.DOMAIN and "reason" in item:
                return TransportError(str(item["reason"]), message, metadata=item.get("metadata") or {})
    return RpcError(code, message, data)
