"""DAG engine steps of human review: review nodes, callees that asked for input, answers, pausing."""

from __future__ import annotations

from typing import Any

from a2amesh.diagnostics import schema_errors
from a2amesh.errors import InvalidTransition
from a2amesh.protocol.vocabulary import REVIEW_REQUEST
from a2amesh.workflow.dag.calls import CallSteps
from a2amesh.workflow.dag.nodes import HumanReviewNode
from a2amesh.workflow.dag.state import NodePaused, NodeRun, NodeStatus
from a2amesh.workflow.dag.step import EXECUTION_TIMEOUT, timeout_timer
from a2amesh.workflow.events import ExecutionStatus, RequestReview, ReviewAnswered
from a2amesh.workflow.templates import JsonValue, TemplateError, render, resolve

__all__ = ["ReviewSteps"]


class ReviewSteps(CallSteps):
    """DAG engine steps of human review: review nodes, callees that asked for input, answers, pausing."""

    def _start_review(self, run: NodeRun, node: HumanReviewNode) -> None:
        scope = self.scope_for(run)
        try:
            prompt = render(node.prompt, scope, path="prompt")
            data = None if node.data is None else resolve(node.data, scope, path="data")
        except TemplateError as exc:
            self.fail(run, str(exc), "error")
            return
        run.status = NodeStatus.WAITING_INPUT
        run.input = data
        run.review = {
            "type": REVIEW_REQUEST,
            "path": run.path,
            "prompt": prompt,
            "data": data,
            "edit_schema": node.edit_schema,
        }
        if node.timeout:
            run.timer = f"review:{run.path}"
            self.set_timer(run.timer, self.now + float(node.timeout))
        self.emit("node.waiting_input", run, prompt=prompt)

    def on_paused(self, event: NodePaused) -> None:
        """A callee asked for input: its calling node waits for a human too (the path bubbles up)."""
        run = self._current_call(event.path, event.attempt)
        if run is None:
            return
        self.clear_timer(timeout_timer(run.path, run.attempt))
        if event.task_id:
            run.task_id = event.task_id
        review = dict(event.review)
        inner = str(review.get("path") or "")
        review["path"] = f"{run.path}/{inner}" if inner else run.path
        review.setdefault("type", REVIEW_REQUEST)
        run.review = review
        run.status = NodeStatus.WAITING_INPUT
        self.emit("node.waiting_input", run, prompt=review.get("prompt"), callee_task_id=run.task_id)

    def _waiting(self) -> list[NodeRun]:
        """The instances waiting for input, in the state's order (each copied, to change)."""
        self.nodes.refresh()
        waiting = self.nodes.waiting
        paths = list(waiting) if len(waiting) < 2 else [p for p in self.nodes if p in waiting]
        return [self.nodes[p] for p in paths]

    def on_review(self, event: ReviewAnswered) -> None:
        """A human answered: decide a human_review node, or forward the answer to the paused callee."""
        waiting = self._waiting()
        if not waiting:
            raise InvalidTransition(
                f"cannot resume: execution {self.state.execution_id} is {self.state.status.value} "
                "with no review waiting"
            )
        target, rest = waiting[0], ""
        if event.path:
            found = [r for r in waiting if event.path == r.path or event.path.startswith(r.path + "/")]
            if not found:
                paths = ", ".join(str((r.review or {}).get("path") or r.path) for r in waiting)
                raise InvalidTransition(f"no review waits at path {event.path!r} (waiting: {paths})")
            target, rest = found[0], event.path[len(found[0].path) + 1 :]
        review = target.review or {}
        if event.decision == "edit":
            schema = review.get("edit_schema")
            problems = schema_errors(schema if isinstance(schema, dict) else None, event.data)
            if problems:
                raise InvalidTransition(
                    f"the edit for review {review.get('path') or target.path!r} does not match its edit_schema: "
                    + "; ".join(problems)
                )
        node = self.definition.node(target.node_id)
        if isinstance(node, HumanReviewNode):
            self.clear_timer(target.timer)
            target.timer = None
            self._decide(target, node, event.decision, event.data, event.reason)
            return
        self._forward_review(target, event, rest)

    def _forward_review(self, run: NodeRun, event: ReviewAnswered, rest: str) -> None:
        """Continue the callee's paused task with the answer; its result arrives like any call's."""
        run.status = NodeStatus.RUNNING
        run.resumes += 1
        run.attempt_started_at = self.now
        run.reply_to = None
        deadline = self.state.deadline
        timeout = self._call_timeout(run)
        if timeout:
            due = self.now + timeout
            self.set_timer(timeout_timer(run.path, run.attempt), due)
            deadline = due if deadline is None else min(deadline, due)
        body: dict[str, Any] = {"decision": event.decision, "data": event.data}
        if event.reason:
            body["reason"] = event.reason
        if rest:
            body["path"] = rest
        command = self.engine.dispatch_command(self.state, run, deadline, resume=body)
        self.commands.append(command.model_copy(update={"message_id": f"{run.message_id}:resume{run.resumes}"}))
        self.emit("node.resumed", run, decision=event.decision, callee_task_id=run.task_id)

    def _decide(self, run: NodeRun, node: HumanReviewNode, decision: str, data: JsonValue, reason: str | None) -> None:
        if decision == "reject":
            if node.on_reject != "fail":
                run.selected = node.on_reject
                self.complete(run, {"decision": "reject", "reason": reason, "data": run.input})
            else:
                self.fail(run, f"rejected by the reviewer{': ' + reason if reason else ''}", "failure")
            return
        self.complete(run, run.input if decision == "approve" else data)

    def _review_timed_out(self, run: NodeRun) -> None:
        node = self.definition.node(run.node_id)
        assert isinstance(node, HumanReviewNode)
        text = f"the review timed out after {float(node.timeout or 0):g}s"
        self.emit("node.review_timeout", run, on_timeout=node.on_timeout)
        if node.on_timeout == "fail":
            self.fail(run, text, "error")
        else:
            self._decide(run, node, node.on_timeout, None, text)

    def settle_pause(self, *, announce: bool) -> None:
        """Pause when only humans are awaited (no call in flight, no retry waiting); un-pause otherwise.

        While paused the execution timeout stops (re-armed with the paused time added on resume) and
        the caller's request ends; ``RequestReview`` tells the executor to answer it with the review.
        """
        state = self.state
        if state.finished:
            return
        waiting = self._waiting()
        busy = bool(self.nodes.busy)
        if waiting and not busy:
            if state.status is ExecutionStatus.RUNNING:
                state.status = ExecutionStatus.PAUSED
                state.paused_at = self.now
                state.deadline = None  # the caller's request ends with the pause (SPEC §7)
                self.clear_timer(EXECUTION_TIMEOUT)
                announce = True
            if announce:
                first = waiting[0]
                review: dict[str, JsonValue] = dict(first.review or {})
                path = str(review.get("path") or first.path)
                self.emit("execution.paused", first, status="paused", reason=review.get("prompt"), review_path=path)
                self.commands.append(RequestReview(path=path, node_id=first.node_id, review=review))
        elif state.status is ExecutionStatus.PAUSED:
            state.status = ExecutionStatus.RUNNING
            state.paused_seconds += self.now - (state.paused_at or self.now)
            state.paused_at = None
            timeout = self.definition.timeout
            if timeout and state.phase == "dag":
                self.set_timer(EXECUTION_TIMEOUT, state.started_at + state.paused_seconds + timeout)
            self.emit("execution.resumed", status="running", paused_ms=int(state.paused_seconds * 1000))
