"""Executions paused for a human: the answer that resumes one, its way up a nested pause, and a cancel.

A paused execution is parked (no lease, no runner). :meth:`Resumer.resume` takes it back for a
SendMessage that carries the human's answer; at the leaf of a nested pause it first goes up to the
paused parent (:meth:`Resumer._forward_up`), which routes it back down so the parent carries on too.
:meth:`Resumer.cancel_parked` takes one back to apply a CancelTask (for the control plane).
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

from a2amesh.bus import headers as h
from a2amesh.bus.nats import WorkMsg
from a2amesh.client import already_taken, continuation_refusal
from a2amesh.errors import A2AMeshError, RpcError, TaskNotFound, TransportError
from a2amesh.executor.context import ExecutorContext
from a2amesh.executor.intake import input_of
from a2amesh.executor.runner import ExecutionRunner, open_runner
from a2amesh.protocol import Message, Part, Role, Task, TaskState, TaskStatus, codes
from a2amesh.protocol.base import utc_timestamp
from a2amesh.protocol.vocabulary import NODE_PATH_KEY, REVIEW_FREE_ANSWER
from a2amesh.store.executions import ExecutionRecord
from a2amesh.store.tasks import Subscriber
from a2amesh.worker.decode import WorkRequest
from a2amesh.worker.replies import ReplyInfo, ReplyPublisher, send_error, valid_reply_subject
from a2amesh.workflow.events import ReviewAnswered

__all__ = ["Resumer"]


class Resumer:
    """Resumes and cancels paused executions (see the module docstring).

    Args:
        ctx: the replica's collaborators.
    """

    def __init__(self, ctx: ExecutorContext) -> None:
        self.ctx = ctx

    async def resume(self, msg: WorkMsg, request: WorkRequest) -> None:
        """A SendMessage on a paused task: the human's answer ``{"decision", "data", "reason"?, "path"?}``."""
        ctx, message = self.ctx, request.message
        task_id = str(message.task_id)
        paused = await self._paused(msg, task_id, request)
        if paused is None:
            return  # a resend of an answer the task already took: its caller follows the task
        record, stored = paused
        body = await input_of(message, ctx.artifacts, user=None)
        event = _answer_of(stored, body)
        if NODE_PATH_KEY not in (message.metadata or {}) and await self._forward_up(msg, request, record, event):
            return
        outcome, epoch = await ctx.store.acquire(task_id, ctx.instance)
        if outcome != "acquired":
            await msg.nak(delay=0.2)  # its owner is still letting it go (or another resume is applied)
            return
        token = f"{ctx.instance}:{epoch}"
        raw = await ctx.store.state(task_id)
        engine = await ctx.engine_for(record.digest)
        if raw is None or engine is None:
            await ctx.store.release(task_id, token, handover=False)
            raise RpcError(codes.INTERNAL_ERROR, f"execution {task_id} cannot be resumed: its state is missing")
        old = ReplyInfo.model_validate_json(record.reply or "{}")
        reply = ReplyInfo(
            reply_to=request.reply_to,
            request_id=request.request_id,
            streaming=request.method == codes.SEND_STREAMING_MESSAGE,
            node_request=old.node_request,
            headers={k: v for k, v in msg.headers.items() if k in h.PROPAGATED} or old.headers,
        )
        runner = open_runner(ctx.deps, engine, raw, epoch=epoch, reply=reply)
        if stored is not None:
            # the message that resumed it (a parent's forwarded answer too): a resend of it finds it there
            runner.history = [*(stored.history or []), message]
        latest = await ctx.store.execution(task_id) or ExecutionRecord()
        if latest.cancel:
            # canceled while parked, before this resume took it: the cancellation is applied, not the answer
            self._launch_cancel(runner, old)
            raise _being_canceled(task_id)
        if latest.resumer and NODE_PATH_KEY in (message.metadata or {}):
            runner.targets.append(Subscriber.parse(latest.resumer))  # who resumed at this leaf (see _forward_up)
            await ctx.store.set_fields(task_id, {"resumer": ""})
        try:
            state, commands = runner.engine.resume(runner.state, event, time.time())
        except A2AMeshError as e:
            if not await ctx.store.park(task_id, token, _next_due_ms(runner.state.timers)):
                self._launch_cancel(runner, old)  # marked for cancellation meanwhile: applied here
            raise RpcError(codes.INVALID_PARAMS, f"cannot resume {task_id}: {e}") from e
        if stored is not None and runner.history is not None:
            # WORKING from now on, the answer in its history: GetTask says so, and a resend of it follows the run
            await ctx.tasks.write(_working(stored, runner.history), request.agent, ctx.instance, release=False)
        ok = await runner.checkpoint(state, list(commands), [], extra={"reply": reply.model_dump_json()})
        await msg.ack()
        if not ok:
            return
        ctx.log.info("execution.resumed", execution_id=task_id, decision=event.decision, path=event.path)
        ctx.drivers.launch(runner, [])

    async def _paused(
        self, msg: WorkMsg, task_id: str, request: WorkRequest
    ) -> tuple[ExecutionRecord, Task | None] | None:
        """The record and task of the paused execution a resume answers; refused when it is not paused, cannot
        take the message, or is marked for cancellation (the cancellation is applied then). None for a resend of
        a message the task already took (the same messageId and parts in its history): its caller is added to the task's
        subscribers, and gets the task's next answer (one stored already at once), with its own request id."""
        record = await self.ctx.store.execution(task_id)
        if record is None:
            raise TaskNotFound(task_id)
        stored = await self.ctx.tasks.get(task_id)
        if stored is not None and already_taken(stored, request.message):
            await self._follow(msg, request, task_id, record.epoch or 1)
            return None
        status = record.status
        if status != "paused":
            raise RpcError(
                codes.UNSUPPORTED_OPERATION,
                f"task {task_id} of workflow {request.agent} is {status or 'unknown'}, not paused for a review; "
                "send a new message to start a run",
            )
        refusal = None if stored is None else continuation_refusal(stored, request.message)
        if refusal is not None:
            raise refusal
        if record.cancel:
            await self._apply_cancel(task_id)
        return record, stored

    async def _follow(self, msg: WorkMsg, request: WorkRequest, task_id: str, epoch: int) -> None:
        ctx = self.ctx
        view = await ctx.tasks.add_subscriber(task_id, Subscriber(request.reply_to, request.request_id))
        if view.outcome == "terminal" and view.task is not None:
            publisher = ReplyPublisher(ctx.bus, ctx.settings, agent=request.agent, task_id=task_id, attempt=epoch)
            with contextlib.suppress(TransportError):
                await publisher.final(request.reply_to, request.request_id, view.task, 1, streaming=request.streaming)
        await msg.ack()
        ctx.log.info("resume.attached", execution_id=task_id, delivered=msg.num_delivered)

    async def _forward_up(
        self, msg: WorkMsg, request: WorkRequest, record: ExecutionRecord, event: ReviewAnswered
    ) -> bool:
        """A resume sent to the leaf of a nested pause: hand it to the paused parent, which routes it back down.

        The parent's calling node then gets the leaf's result like any call's, so the parent carries on
        (a resume applied at the leaf alone would leave the parent paused). The resumer's reply subject
        is kept in the leaf's record (``resumer``): it gets the leaf's next answer (its final, or its
        next review). Returns False when there is no paused parent to go through (the leaf is resumed
        on its own).
        """
        ctx, message, reply_to = self.ctx, request.message, request.reply_to
        parent = ReplyInfo.model_validate_json(record.reply or "{}").node_request or {}
        parent_id, parent_workflow = parent.get("execution_id"), parent.get("workflow_name")
        node_path = parent.get("node_path")
        if not (parent_id and parent_workflow and node_path):
            return False
        parent_record = await ctx.store.execution(str(parent_id))
        if parent_record is None or parent_record.status != "paused":
            return False
        raw = await ctx.store.state(str(message.task_id))
        engine = await ctx.engine_for(record.digest)
        if raw is None or engine is None:
            return False
        try:  # refuse a bad answer here, with the leaf's own words (the engines are pure: a dry run)
            engine.resume(engine.parse_state(raw), event, time.time())
        except A2AMeshError as e:
            raise RpcError(codes.INVALID_PARAMS, f"cannot resume {message.task_id}: {e}") from e
        body = event.model_dump(mode="json", exclude={"kind"}, exclude_none=True)
        body["path"] = f"{node_path}/{event.path}" if event.path else str(node_path)
        if valid_reply_subject(ctx.bus, reply_to):
            # the leaf's task is INPUT_REQUIRED (no subscribers then): the resume coming down adds the target
            resumer = Subscriber(str(reply_to), request.request_id)
            await ctx.store.set_fields(str(message.task_id), {"resumer": resumer.member()})
        up = Message(
            message_id=f"{message.message_id}:up",
            role=Role.USER,
            parts=[Part.of_data(body)],
            task_id=str(parent_id),
        )
        headers = {k: v for k, v in msg.headers.items() if k in h.PROPAGATED}
        call = await ctx.client.dispatch(str(parent_workflow), up, timeout=ctx.settings.call_timeout, headers=headers)
        await msg.ack()
        ctx.log.info("execution.resume_forwarded", execution_id=message.task_id, parent=parent_id, path=body["path"])
        attempt = msg.num_delivered

        async def refused() -> None:
            try:
                await call.result()
            except RpcError as e:  # the parent refused it: tell the resumer
                await send_error(
                    ctx.bus,
                    ctx.settings,
                    agent=request.agent,
                    reply_to=reply_to,
                    request_id=request.request_id,
                    error=e,
                    attempt=attempt,
                )
            except A2AMeshError:
                pass  # the parent's outcome is not the resumer's answer; the leaf's is

        ctx.background.spawn(refused(), name=f"resume-up-{message.task_id}")
        return True

    async def _apply_cancel(self, task_id: str) -> None:
        """A resume of an execution marked for cancellation: the cancellation is applied (here, unless another
        replica holds the execution: it applies it) and the resume refused."""
        await self.cancel_parked(task_id)
        raise _being_canceled(task_id)

    def _launch_cancel(self, runner: ExecutionRunner[Any], reply: ReplyInfo) -> None:
        """Drive ``runner`` (held here) to apply the cancellation, answering whom the pause left to answer."""
        runner.reply = reply
        runner.cancel()
        self.ctx.log.info("execution.cancel_paused", execution_id=runner.execution_id)
        self.ctx.drivers.launch(runner, [])

    async def cancel_parked(self, task_id: str) -> ExecutionRunner[Any] | None:
        """Take back an execution paused for a human and apply a cancellation (``on_cancel`` runs); returns
        its runner, or None when another replica holds it (a resume being applied: the ``cancel`` mark set
        by ``exec_mark_cancel.lua`` makes that replica apply the cancellation).

        Raises:
            RpcError: its state or definition is missing.
        """
        ctx = self.ctx
        outcome, epoch = await ctx.store.acquire(task_id, ctx.instance)
        if outcome != "acquired":
            return None
        record = await ctx.store.execution(task_id) or ExecutionRecord()
        raw = await ctx.store.state(task_id)
        engine = await ctx.engine_for(record.digest)
        if raw is None or engine is None:
            await ctx.store.release(task_id, f"{ctx.instance}:{epoch}", handover=False)
            raise RpcError(codes.INTERNAL_ERROR, f"execution {task_id} cannot be canceled: its state is missing")
        reply = ReplyInfo.model_validate_json(record.reply or "{}")
        runner = open_runner(ctx.deps, engine, raw, epoch=epoch, reply=reply)
        runner.cancel()
        ctx.log.info("execution.cancel_paused", execution_id=task_id)
        ctx.drivers.launch(runner, [])
        return runner


def _working(paused: Task, history: list[Message]) -> Task:
    """The task of a paused execution once an answer resumed it."""
    metadata = {k: v for k, v in (paused.metadata or {}).items() if k != "review"} or None
    status = TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp())
    return paused.model_copy(update={"status": status, "history": history, "metadata": metadata})


def _being_canceled(task_id: str) -> RpcError:
    return RpcError(
        codes.UNSUPPORTED_OPERATION,
        f"task {task_id} is being canceled (a CancelTask came first); it takes no more messages",
    )


def _answer_of(stored: Task | None, body: Any) -> ReviewAnswered:
    """The answer a resume's input gives the paused review.

    Raises:
        RpcError: ``INVALID_PARAMS`` naming the forms an answer takes and what is wrong with this one.
    """
    try:
        return ReviewAnswered.model_validate(body)
    except ValueError as e:
        error = e
    try:
        answer = _free_answer(stored, body) or _text_answer(body)
    except ValueError as e:
        answer, error = None, e
    if answer is None:
        raise RpcError(
            codes.INVALID_PARAMS,
            'a resume carries {"decision": "approve" | "edit" | "reject", "data": ..., "reason"?, "path"?} as a '
            'data part or as its JSON text, or the text "approve" or "reject[: reason]": ' + str(error).splitlines()[0],
        ) from error
    return answer


_DECISION_TEXT = re.compile(r"\s*(approve|reject)\b[\s:,.!-]*(.*)", re.IGNORECASE | re.DOTALL)


def _text_answer(body: Any) -> ReviewAnswered | None:
    """The review answer of a text-only client (other frameworks' A2A clients send text parts alone): the
    answer's JSON as text, or ``approve`` / ``reject`` (what follows a reject is its reason); None for any
    other text.

    Raises:
        ValueError: JSON text that is not a review answer (why is in the message).
    """
    if not (isinstance(body, dict) and body.keys() == {"text"} and isinstance(body["text"], str)):
        return None
    text = body["text"].strip()
    if text.startswith("{"):
        return ReviewAnswered.model_validate_json(text)
    said = _DECISION_TEXT.fullmatch(text)
    if said is None:
        return None
    decision, rest = said.group(1).lower(), said.group(2).strip()
    return ReviewAnswered(decision="reject" if decision == "reject" else "approve", reason=rest or None)


def _free_answer(stored: Task | None, body: Any) -> ReviewAnswered | None:
    """The answer a plain message gives an execution paused on an agent's question (its review says
    ``free_answer``): approved with the message's input as data, as the agent would take a message; None for a
    human review, which takes a review answer only."""
    review = (stored.metadata or {}).get("review") if stored is not None else None
    if not isinstance(review, dict) or review.get(REVIEW_FREE_ANSWER) is not True:
        return None
    path = review.get("path")
    return ReviewAnswered(decision="approve", data=body, path=path if isinstance(path, str) and path else None)


def _next_due_ms(timers: dict[str, float]) -> int | None:
    due = min(timers.values(), default=None)
    return None if due is None else int(due * 1000)
