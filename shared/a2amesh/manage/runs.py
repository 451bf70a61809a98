"""Actions on executions — execute, cancel, resume a review, retry — shared by the API, the CLI and MCP.

Every action goes through the mesh :class:`~a2amesh.client.Client` like any other caller: an execution
starts with an A2A message to its workflow, a review is answered with a message on the paused task, a
cancel is an A2A ``CancelTask``, a retry a message carrying the ``workflow_retry`` control part. So the
executor applies them exactly as it applies the same calls from an agent or a peer workflow.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.client import Call, Client, make_message
from a2amesh.diagnostics import schema_errors
from a2amesh.errors import RpcError, TaskNotCancelable, TaskNotFound, TransportError
from a2amesh.manage.executions import ExecutionDetail, Executions
from a2amesh.manage.failures import ActionConflict, InvalidRequest, NotFound
from a2amesh.protocol import AgentCard, Message, Part, Task, codes
from a2amesh.protocol.states import state_word
from a2amesh.protocol.vocabulary import BRANCH_KEY, RETRY_REQUEST

__all__ = ["ExecuteRequest", "Started", "ResumeRequest", "RetryRequest", "Runs"]

Decision = Literal["approve", "edit", "reject"]


class ExecuteRequest(BaseModel):
    """The body of an execute request: ``{"input": …}`` (an unknown field, or an input not wrapped, is refused)."""

    model_config = ConfigDict(extra="forbid")

    input: Any = Field(
        description="The workflow's input (JSON), checked against its input_schema before anything runs."
    )
    branch: str | None = Field(
        None, description="A branch of a graph workflow to run on its own (seed 003); null: the whole workflow."
    )


class ResumeRequest(BaseModel):
    """A reviewer's answer to a paused execution."""

    model_config = ConfigDict(extra="forbid")

    decision: Decision
    data: Any = Field(None, description="With ``edit``: the edited data, validated against the review's edit_schema.")
    reason: str | None = Field(None, description="Why (shown in the run's trail; a reject's error).")
    path: str | None = Field(
        None, description="The review to answer, as its ``path`` (a nested review); default: the one waiting."
    )


class RetryRequest(BaseModel):
    """A retry of a finished execution."""

    model_config = ConfigDict(extra="forbid")

    from_node: str | None = Field(
        None, description="Run again from this node; the outputs of the nodes before it are reused."
    )


@dataclass(frozen=True)
class Started:
    """An execution an action started or moved on: its id, and its state when the caller waited for it."""

    execution_id: str
    execution: ExecutionDetail | None = None


def _invalid(e: RpcError, field: str) -> InvalidRequest:
    return InvalidRequest(str(e), [{"path": field, "message": str(e)}])


class Runs:
    """Starts and steers executions over the mesh.

    Args:
        client: a started mesh client.
        executions: the reader of execution records.
        call_timeout: how long an action that waits for its execution waits (seconds).
    """

    def __init__(self, client: Client, executions: Executions, *, call_timeout: float | None = None) -> None:
        self.client = client
        self.executions = executions
        self.call_timeout = call_timeout or client.settings.call_timeout

    async def _workflow(self, workflow: str) -> AgentCard:
        card = self.client.registry.get(workflow)
        if card is None:
            try:
                card = await self.client.registry.resolve(workflow)
            except TransportError as e:
                if e.reason == codes.AGENT_NOT_FOUND:
                    raise NotFound("workflow", workflow) from e
                raise
        if card.agent_type != "workflow":
            raise NotFound("workflow", workflow)
        return card

    async def _send(
        self, workflow: str, message: Message, *, wait: bool, field: str, headers: Mapping[str, str] | None
    ) -> Started:
        """Send ``message`` to ``workflow``; return once the executor took it (or, with ``wait``, once it
        finished or paused). A refusal of the request (``INVALID_PARAMS``) is an :class:`InvalidRequest`
        about ``field``."""
        try:
            call = await self.client.dispatch(
                workflow, message, stream=True, timeout=self.call_timeout, headers=headers
            )
            await (self._finish(call) if wait else self._accepted(call))
        except RpcError as e:
            if e.code == codes.INVALID_PARAMS:
                raise _invalid(e, field) from e
            raise
        except TransportError as e:
            if e.reason == codes.AGENT_NOT_FOUND:
                raise NotFound("workflow", workflow) from e
            raise
        execution = await self.executions.get(call.task_id) if wait else None
        return Started(call.task_id, execution)

    @staticmethod
    async def _accepted(call: Call) -> None:
        # the first answer is the task, sent once the execution exists; the run goes on without us
        async with contextlib.aclosing(call.events()) as events:
            async for _ in events:
                break

    @staticmethod
    async def _finish(call: Call) -> None:
        await call.result()

    async def execute(
        self,
        workflow: str,
        request: ExecuteRequest,
        *,
        wait: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Started:
        """Start an execution of ``workflow``.

        Raises:
            NotFound: no live workflow of that name.
            InvalidRequest: the workflow refused the request.
        """
        card = await self._workflow(workflow)
        if request.branch is None:
            _check_input(card, request.input)
        metadata = None if request.branch is None else {BRANCH_KEY: request.branch}
        message = make_message(data=request.input if request.input is not None else {}, metadata=metadata)
        field = "body" if request.branch is None else "body.branch"
        return await self._send(workflow, message, wait=wait, field=field, headers=headers)

    async def cancel_task(self, execution_id: str, *, headers: Mapping[str, str] | None = None) -> Task:
        """Cancel a running or paused execution (and every callee it has running); its task as CancelTask answered.

        Raises:
            NotFound: no such execution.
            ActionConflict: it already finished, or no executor of its workflow is live.
        """
        record = await self.executions.record(execution_id)
        status = record.get("status", "")
        if status not in ("running", "paused"):
            raise ActionConflict(
                f"execution {execution_id} is {_shown(status)}: only a running or paused one can be cancelled"
            )
        try:
            return await self.client.cancel_task(record.get("workflow", ""), execution_id, headers=headers)
        except TaskNotCancelable as e:
            raise ActionConflict(f"execution {execution_id} can no longer be cancelled: {e}") from e
        except TaskNotFound as e:
            raise NotFound("execution", execution_id) from e
        except TransportError as e:
            if e.reason == codes.AGENT_NOT_FOUND:
                raise ActionConflict(
                    f"workflow {record.get('workflow', '')!r} of execution {execution_id} has no live executor"
                ) from e
            raise

    async def cancel(self, execution_id: str, *, headers: Mapping[str, str] | None = None) -> ExecutionDetail:
        """Cancel a running or paused execution (see :meth:`cancel_task`); the execution afterwards."""
        await self.cancel_task(execution_id, headers=headers)
        return await self.executions.get(execution_id)

    async def resume_message(self, execution_id: str, request: ResumeRequest) -> tuple[str, Message]:
        """The workflow and the message that answer the review a paused execution waits for.

        Raises:
            NotFound: no such execution.
            ActionConflict: it is not paused.
            InvalidRequest: an edit without data.
        """
        record = await self.executions.record(execution_id)
        status = record.get("status", "")
        if status != "paused":
            raise ActionConflict(f"execution {execution_id} is {_shown(status)}, not paused for a review")
        if request.decision == "edit" and request.data is None:
            raise InvalidRequest(
                "data: an edit needs the edited data", [{"path": "body.data", "message": "required with decision edit"}]
            )
        body: dict[str, Any] = {"decision": request.decision}
        if request.data is not None:
            body["data"] = request.data
        if request.reason:
            body["reason"] = request.reason
        if request.path:
            body["path"] = request.path
        message = make_message(
            data=body, task_id=record.get("task_id") or execution_id, context_id=record.get("context_id") or None
        )
        return record.get("workflow", ""), message

    async def resume(
        self,
        execution_id: str,
        request: ResumeRequest,
        *,
        wait: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Started:
        """Answer the review a paused execution waits for.

        Raises:
            NotFound: no such execution.
            ActionConflict: it is not paused.
            InvalidRequest: an edit without data, an edit that fails the review's ``edit_schema``, a path that
                waits for no review (the execution stays paused).
        """
        workflow, message = await self.resume_message(execution_id, request)
        field = "body.data" if request.decision == "edit" else "body"
        return await self._send(workflow, message, wait=wait, field=field, headers=headers)

    async def retry_message(self, execution_id: str, request: RetryRequest) -> tuple[str, Message]:
        """The workflow and the message that start a retry of a finished execution.

        Raises:
            NotFound: no such execution, or its workflow is not live.
            ActionConflict: it has not finished.
        """
        record = await self.executions.record(execution_id)
        status = record.get("status", "")
        if status in ("running", "paused"):
            raise ActionConflict(f"execution {execution_id} is {status}: only a finished execution can be retried")
        workflow = record.get("workflow", "")
        control = {"type": RETRY_REQUEST, "execution_id": execution_id, "from_node": request.from_node}
        message = make_message(data=json.loads(record.get("input") or "{}"), parts=[Part.of_data(control)])
        await self._workflow(workflow)
        return workflow, message

    async def retry(
        self,
        execution_id: str,
        request: RetryRequest,
        *,
        wait: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Started:
        """Start a new execution with the same input that reuses the outputs of the nodes before ``from_node``.

        Raises:
            NotFound: no such execution.
            ActionConflict: it has not finished.
            InvalidRequest: the workflow has no such node.
        """
        workflow, message = await self.retry_message(execution_id, request)
        return await self._send(workflow, message, wait=wait, field="body.from_node", headers=headers)


def _check_input(card: AgentCard, value: Any) -> None:
    """Refuse an input the workflow's ``input_schema`` (from its card) refuses, before anything runs; the
    executor would fail the execution with the same errors (:func:`~a2amesh.diagnostics.schema_errors`)."""
    errors = schema_errors(card.input_schema, value if value is not None else {}, limit=20)
    if errors:
        entries = []
        for error in errors:
            where, _, message = error.partition(": ")
            entries.append({"path": "body.input" + where.removeprefix("$"), "message": message})
        listed = "; ".join(f"{e['path']}: {e['message']}" for e in entries[:5])
        raise InvalidRequest(f"the input does not match workflow {card.name!r}'s input_schema: {listed}", entries)


def _shown(status: str) -> str:
    return state_word(status) if status else "unknown"
