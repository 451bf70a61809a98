"""The answers an execution gives its caller: the final Task, and the INPUT_REQUIRED Task of a pause.

Functions of explicit arguments, called by :class:`~a2amesh.executor.runner.ExecutionRunner`, which
decides when to answer (and keeps what answering changes: its final task, its targets, its reply).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from a2amesh.bus import headers as h
from a2amesh.config import Settings
from a2amesh.jsontext import JsonValue
from a2amesh.protocol import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from a2amesh.protocol.base import utc_timestamp
from a2amesh.protocol.vocabulary import NODE_RESULT
from a2amesh.store.artifacts import ArtifactMeta, ArtifactScope, ArtifactStore
from a2amesh.store.tasks import Subscriber
from a2amesh.worker.replies import ReplyInfo, ReplyPublisher, Target
from a2amesh.worker.results import RESULT_ARTIFACT, encoded_size, file_part, spill_large_file, url_part
from a2amesh.workflow.engine_protocol import RunState
from a2amesh.workflow.events import ExecutionStatus, RequestReview

__all__ = ["answer_all", "final_task", "paused_task"]

_TASK_STATE: dict[str, TaskState] = {
    ExecutionStatus.COMPLETED: TaskState.COMPLETED,
    ExecutionStatus.FAILED: TaskState.FAILED,
    ExecutionStatus.CANCELED: TaskState.CANCELED,
}


OUTPUT_TEXT_LIMIT = 4000
"""Characters of a workflow's output that its final status message carries as text (longer: the summary)."""


def completed_text(workflow: str, output: Any) -> str:
    """The text of a completed workflow's final status message: its output as text (a string as itself, a JSON
    value compact), for the A2A clients that show only a final's text parts (ADK, Strands: docs/interop.md); the
    summary ``workflow NAME completed`` when there is no output or it is longer than :data:`OUTPUT_TEXT_LIMIT`.
    The output itself is ``artifacts[0]`` either way."""
    if output is None or output == {} or output == "":
        text = ""
    elif isinstance(output, str):
        text = output
    else:
        text = json.dumps(output, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if 0 < len(text) <= OUTPUT_TEXT_LIMIT else f"workflow {workflow} completed"


async def final_task(
    state: RunState,
    *,
    task_id: str,
    reply: ReplyInfo,
    settings: Settings,
    artifacts: ArtifactStore,
    history: list[Message] | None = None,
) -> Task:
    """The final Task of a workflow's task: output as ``artifacts[0]`` (a large output saved as an artifact),
    plus the node result part when the caller is a workflow node; ``history``: its callers' messages."""
    task_state = _TASK_STATE.get(state.status, TaskState.FAILED)
    ok = state.status == ExecutionStatus.COMPLETED
    output = state.output if ok else None
    text = completed_text(state.workflow, output) if ok else (state.error or f"workflow {state.workflow} failed")
    parts = [Part.of_text(text)]
    artifacts_out: list[Artifact] | None = None
    node_result: dict[str, Any] | None = None
    if reply.node_request is not None:
        node_result = {
            "type": NODE_RESULT,
            "status": "success" if ok else "failure",
            "execution_id": state.execution_id,
            "node_id": reply.node_request.get("node_id"),
            "attempts": 1,
            "usage": state.usage,
        }
        if not ok:
            node_result["error"] = text
    if ok:
        value = {} if output is None else output
        part, meta = await _result_part(state, value, task_id=task_id, reply=reply, settings=settings, store=artifacts)
        if node_result is not None:
            if meta is None:
                node_result["output"] = value
            else:
                node_result["artifact"] = meta.ref()
        artifacts_out = [Artifact(artifact_id=f"{task_id}-result", name="result", parts=[part])]
    if node_result is not None:
        parts.append(Part.of_data(node_result))
    return Task(
        id=task_id,
        context_id=state.context_id,
        status=TaskStatus(
            state=task_state,
            timestamp=utc_timestamp(state.finished_at),
            message=Message(
                message_id=f"{task_id}-final",
                role=Role.AGENT,
                parts=parts,
                task_id=task_id,
                context_id=state.context_id,
            ),
        ),
        artifacts=artifacts_out,
        history=history or None,
        metadata={"execution_id": state.execution_id, "workflow": state.workflow, "usage": state.usage},
    )


async def _result_part(
    state: RunState, value: JsonValue, *, task_id: str, reply: ReplyInfo, settings: Settings, store: ArtifactStore
) -> tuple[Part, ArtifactMeta | None]:
    """``artifacts[0]``'s part, as an agent's (agent/node_handler.py): a node's file result passed through is
    that file part, and bytes or a value above the inline threshold are saved as the ``result`` artifact."""
    scope = ArtifactScope(state.context_id or task_id, task_id)
    user = reply.headers.get(h.USER)
    file = file_part(value) if state.output_file else None
    if file is not None:

        async def save(content: bytes, media_type: str) -> ArtifactMeta:
            return await store.save(scope, RESULT_ARTIFACT, content, media_type=media_type, user=user)

        return await spill_large_file(file, threshold=settings.inline_threshold, save=save)
    if encoded_size(value) > settings.inline_threshold:
        meta = await store.save(scope, RESULT_ARTIFACT, value, user=user)
        return url_part(meta), meta
    return (Part.of_text(value) if isinstance(value, str) else Part.of_data(value)), None


def paused_task(state: RunState, command: RequestReview, *, task_id: str, history: list[Message] | None = None) -> Task:
    """The TASK_STATE_INPUT_REQUIRED Task of a pause, with the review (SPEC §7)."""
    review = dict(command.review)
    prompt = str(review.get("prompt") or "input required")
    return Task(
        id=task_id,
        context_id=state.context_id,
        status=TaskStatus(
            state=TaskState.INPUT_REQUIRED,
            timestamp=utc_timestamp(),
            message=Message(
                message_id=f"{task_id}-review-{state.seq}",
                role=Role.AGENT,
                parts=[Part.of_text(prompt), Part.of_data(review)],
                task_id=task_id,
                context_id=state.context_id,
            ),
        ),
        history=history or None,
        metadata={"execution_id": state.execution_id, "workflow": state.workflow, "review": review},
    )


async def answer_all(
    publisher: ReplyPublisher,
    task: Task,
    seq: int,
    *,
    reply: ReplyInfo,
    others: Iterable[Subscriber],
    task_id: str,
    primary_errors: bool,
) -> None:
    """Send ``task`` as the final answer (:meth:`ReplyPublisher.answer`): to the caller's reply subject (its
    errors raised when ``primary_errors``), then once to every other subject in ``others``, each with its own
    request id (their errors dropped)."""
    targets = [Target(reply.reply_to, primary=True, answer_id=reply.request_id)] if reply.reply_to else []
    targets += [Target(s.subject, primary=False, answer_id=s.answer_id(task_id)) for s in others]
    await publisher.answer(targets, task, seq, streaming=reply.streaming, primary_errors=primary_errors)
