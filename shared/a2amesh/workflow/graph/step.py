"""One step of one graph execution (:class:`GraphStep`): input, running nodes, results, routing, guards, endings.

The engine (:mod:`a2amesh.workflow.graph.engine`) builds one per ``start`` or ``step``; the module
docstring there describes the semantics.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from a2amesh.diagnostics import schema_errors
from a2amesh.errors import InvalidTransition
from a2amesh.ids import node_message_id, task_id_for
from a2amesh.jsontext import JsonValue
from a2amesh.protocol.vocabulary import GRAPH_NODE_REQUEST, REVIEW_REQUEST
from a2amesh.workflow.events import (
    CancelCall,
    ClearTimer,
    EmitEvent,
    ExecutionStatus,
    Finish,
    RequestReview,
    ReviewAnswered,
    SetTimer,
)
from a2amesh.workflow.graph.definition import END, END_TOOL, GraphEdge, GraphNode, Guard
from a2amesh.workflow.graph.state import (
    DispatchGraphNode,
    FailureReason,
    GraphCommand,
    GraphFailure,
    GraphMessage,
    GraphState,
    GraphStatus,
    Pending,
    RunTools,
    ToolCall,
    ToolResult,
    ToolsCompleted,
)

if TYPE_CHECKING:
    from a2amesh.workflow.graph.engine import GraphEngine

__all__ = ["CALLER_DEADLINE", "GRAPH_TIMEOUT", "GraphStep"]

GRAPH_TIMEOUT = "graph_timeout"
"""Timer id of the ``timeout`` guard."""
CALLER_DEADLINE = "caller_deadline"
"""Timer id of the caller's ``A2A-Deadline``."""

_FINAL: dict[GraphStatus, ExecutionStatus] = {
    "completed": ExecutionStatus.COMPLETED,
    "failed": ExecutionStatus.FAILED,
    "canceled": ExecutionStatus.CANCELED,
}
_FINISH_EVENT = {"completed": "execution.completed", "failed": "execution.failed", "canceled": "execution.cancelled"}
_EPSILON = 1e-6


def _parse_tool_call(raw: Any, index: int) -> ToolCall:
    if not isinstance(raw, Mapping):
        raise ValueError(f"tool_calls[{index}] is not an object")
    function = raw.get("function")
    if isinstance(function, Mapping):  # the OpenAI shape
        name, arguments = function.get("name"), function.get("arguments")
    else:
        name, arguments = raw.get("name"), raw.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"tool_calls[{index}].arguments is not JSON: {exc.msg}") from None
    if arguments is None:
        arguments = {}
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool_calls[{index}] has no name")
    if not isinstance(arguments, Mapping):
        raise ValueError(f"tool_calls[{index}].arguments is not an object")
    call_id = raw.get("id")
    return ToolCall(id=str(call_id) if call_id else f"call_{index}", name=name, arguments=dict(arguments))


class _Output:
    """An agent's answer, read: ``next``, ``message`` (``has_message``) and ``tool_calls``."""

    def __init__(self, output: JsonValue) -> None:
        self.next: str | None = None
        self.tool_calls: list[ToolCall] = []
        structured = isinstance(output, Mapping) and any(k in output for k in ("next", "message", "tool_calls"))
        if not structured:
            self.message, self.has_message = output, output is not None
            return
        assert isinstance(output, Mapping)
        chosen = output.get("next")
        if chosen is not None and not isinstance(chosen, str):
            raise ValueError(f"next must be a string, got {chosen!r}")
        self.next = chosen or None
        self.message, self.has_message = output.get("message"), "message" in output
        calls = output.get("tool_calls") or []
        if not isinstance(calls, list):
            raise ValueError("tool_calls must be a list")
        self.tool_calls = [_parse_tool_call(item, i) for i, item in enumerate(calls)]


class GraphStep:
    """One step of one execution: mutates its own copy of the state and collects commands."""

    def __init__(self, engine: GraphEngine, state: GraphState, now: float) -> None:
        self.engine = engine
        self.graph = engine.graph
        self.state = state
        self.now = now
        self.commands: list[GraphCommand] = []

    # --- output ---

    def emit(self, event: str, node: GraphNode | None = None, *, status: str | None = None, **data: Any) -> None:
        self.state.seq += 1
        pending = self.state.pending
        self.commands.append(
            EmitEvent(
                event=event,
                seq=self.state.seq,
                path=pending.path if node is not None and pending is not None else None,
                node_id=node.id if node is not None else None,
                status=status or self.state.status,
                data={k: v for k, v in data.items() if v is not None},
                at=self.now,
            )
        )

    def set_timer(self, timer_id: str, due: float) -> None:
        self.state.timers[timer_id] = due
        self.commands.append(SetTimer(timer_id=timer_id, due=due))

    def clear_timer(self, timer_id: str) -> None:
        if self.state.timers.pop(timer_id, None) is not None:
            self.commands.append(ClearTimer(timer_id=timer_id))

    # --- time ---

    def graph_deadline(self) -> float | None:
        if self.state.active_since is None:
            return None
        return self.state.active_since + float(self.graph.timeout) - self.state.active_seconds

    def timed_out(self) -> bool:
        deadline = self.graph_deadline()
        return deadline is not None and self.now + _EPSILON >= deadline

    def arm_timers(self) -> None:
        deadline = self.graph_deadline()
        if deadline is not None:
            self.set_timer(GRAPH_TIMEOUT, deadline)
        if self.state.deadline is not None:
            self.set_timer(CALLER_DEADLINE, self.state.deadline)

    def call_deadline(self) -> float | None:
        due = [t for t in (self.graph_deadline(), self.state.deadline) if t is not None]
        return min(due) if due else None

    # --- input ---

    def add_input(self, value: JsonValue) -> str | None:
        """Append the input as user message(s); a problem with it, as text."""
        if value is None:
            return None
        if isinstance(value, Mapping) and "messages" in value:
            raw = value["messages"]
            if not isinstance(raw, list):
                return "input.messages must be a list of messages"
            for index, item in enumerate(raw):
                try:
                    self.state.messages.append(GraphMessage.model_validate(item))
                except ValidationError as exc:
                    first = exc.errors()[0]
                    where = ".".join(str(p) for p in first["loc"])
                    return f"input.messages[{index}]{'.' + where if where else ''}: {first['msg']}"
            return None
        content = value["text"] if isinstance(value, Mapping) and set(value) == {"text"} else value
        self.state.messages.append(GraphMessage(role="user", content=content))
        return None

    # --- running nodes ---

    def enter(self, node_id: str) -> None:
        """Take the way to a node: count a round when it is the entry node, check the guards, run it."""
        if node_id == self.graph.entry:
            self.state.rounds += 1
            if self.graph.max_rounds is not None and self.state.rounds >= self.graph.max_rounds:
                self.trip("maxRounds")
                return
        if self.state.steps >= self.graph.effective_step_limit:
            self.trip("stepLimit")
            return
        self.run_node(self.graph.node(node_id))

    def run_node(self, node: GraphNode) -> None:
        self.state.steps += 1
        self.state.calls += 1
        path = f"{node.id}#{self.state.calls}"
        if node.node_type == "AGENT":
            self.dispatch(node, path)
        elif node.node_type == "TOOL_EXECUTOR":
            self.run_tools(node, path)
        else:
            self.request_review(node, path)

    def dispatch(self, node: GraphNode, path: str) -> None:
        agent = node.agent or node.id
        self.state.last_agent = node.id
        message_id = node_message_id(self.state.execution_id, node.id, self.state.calls, 1)
        task_id = task_id_for(agent, message_id)
        self.state.pending = pending = Pending(
            kind="agent", node_id=node.id, path=path, agent=agent, task_id=task_id, started_at=self.now
        )
        self.commands.append(self.agent_command(pending))
        self.emit("node.started", node, status="running", agent=agent, task_id=task_id, step=self.state.steps)

    def run_tools(self, node: GraphNode, path: str) -> None:
        self.state.pending = pending = Pending(kind="tools", node_id=node.id, path=path, started_at=self.now)
        if not self.state.tool_calls:
            caller = self.state.last_agent or "?"
            self.node_failed(
                node, "NO_TOOL_CALLS", f"tool executor {node.id!r} was reached from {caller!r} without tool calls"
            )
            return
        self.commands.append(self.tools_command(pending))
        names = [c.name for c in self.state.tool_calls]
        self.emit("node.started", node, status="running", tools=names, step=self.state.steps)

    def request_review(self, node: GraphNode, path: str) -> None:
        self.state.pending = pending = Pending(kind="review", node_id=node.id, path=path, started_at=self.now)
        self.pause()
        command = self.review_command(pending)
        self.commands.append(command)
        self.emit("node.started", node, status="waiting_input", step=self.state.steps)
        self.emit("execution.paused", node, status="paused", reason=command.review["prompt"], guard=command.guard)

    # --- commands (rebuilt the same from the state, so a takeover re-sends the same call) ---

    def agent_command(self, pending: Pending) -> DispatchGraphNode:
        node = self.graph.node(pending.node_id)
        assert pending.agent is not None, pending.path
        assert pending.task_id is not None, pending.path
        if self.graph.format == "graph":
            payload: JsonValue = {
                "messages": [m.model_dump(mode="json", exclude_none=True) for m in self.state.messages]
            }
        else:
            payload = self.state.last_output
        instruction = node.instruction
        if self.graph.is_conversational:
            ending = f"When the conversation is over, call the `{END_TOOL}` tool."
            instruction = f"{instruction}\n\n{ending}" if instruction else ending
        control: dict[str, JsonValue] = {
            "type": GRAPH_NODE_REQUEST,
            "execution_id": self.state.execution_id,
            "workflow_name": self.engine.name,
            "node_id": node.id,
            "node_name": node.name,
            "allowed_next": list(self.graph.allowed_next(node.id)),
            "route_kinds": dict(self.graph.route_kinds(node.id)),
            "tools": list(self.graph.tool_descriptors(node.id)),
            "execute_tools": False,
            "conversational": self.graph.is_conversational,
            "instruction": instruction,
        }
        iteration = int(pending.path.rpartition("#")[2])
        return DispatchGraphNode(
            path=pending.path,
            node_id=node.id,
            agent=pending.agent,
            attempt=pending.attempt,
            iteration=iteration,
            message_id=node_message_id(self.state.execution_id, node.id, iteration, pending.attempt),
            task_id=pending.task_id,
            input=payload,
            control=control,
            deadline=self.call_deadline(),
            call_depth=self.state.call_depth + 1,
            call_chain=[*self.state.call_chain, self.engine.name],
        )

    def tools_command(self, pending: Pending) -> RunTools:
        calls = list(self.state.tool_calls)
        specs = {
            c.name: self.graph.tools[c.name].model_dump(mode="json", by_alias=True, exclude_none=True)
            for c in calls
            if c.name in self.graph.tools
        }
        return RunTools(
            path=pending.path,
            node_id=pending.node_id,
            caller=self.state.last_agent,
            calls=calls,
            tools=specs,
            deadline=self.call_deadline(),
        )

    def review_command(self, pending: Pending) -> RequestReview:
        node = self.graph.node(pending.node_id)
        guard = self.state.limit
        reason = self.guard_text(guard) if guard else None
        if node.prompt:
            prompt = node.prompt
        elif reason:
            prompt = (
                f"Workflow {self.engine.name} stopped: {reason}. Approve to carry on, edit to add a message, or "
                "reject to end it."
            )
        else:
            prompt = f"Workflow {self.engine.name} hands over to a human at {node.name}."
        last = self.state.messages[-1].content if self.state.messages else None
        review: dict[str, JsonValue] = {
            "type": REVIEW_REQUEST,
            "path": pending.path,
            "prompt": prompt,
            "data": {
                "reason": reason,
                "guard": guard,
                "last_message": last,
                "messages": [m.model_dump(mode="json", exclude_none=True) for m in self.state.messages],
            },
            "edit_schema": node.edit_schema,
        }
        return RequestReview(path=pending.path, node_id=node.id, review=review, guard=guard)

    def pause(self) -> None:
        if self.state.active_since is not None:
            self.state.active_seconds += self.now - self.state.active_since
        self.state.active_since = None
        self.state.status = "paused"
        # Paused time does not count, and the caller's request ends with the pause (SPEC §7).
        self.clear_timer(GRAPH_TIMEOUT)
        self.clear_timer(CALLER_DEADLINE)
        self.state.deadline = None

    # --- results ---

    def on_agent_done(
        self, path: str, attempt: int, output: JsonValue, error: str | None, usage: Mapping[str, Any] | None
    ) -> None:
        pending = self.state.pending
        if pending is None or pending.kind != "agent" or pending.path != path or pending.attempt != attempt:
            return  # stale: not the call this execution waits for
        for key, value in (usage or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                self.state.usage[key] = self.state.usage.get(key, 0) + value
        node = self.graph.node(pending.node_id)
        if error is not None and self.timed_out():
            # the call's deadline is the guard's: a callee that gave up on it (its answer may beat the
            # guard's timer) means the guard tripped, not that the node failed
            self.trip("timeout")
            return
        if error is not None:
            self.node_failed(node, "AGENT_FAILED", f"agent node {node.id!r} (agent {pending.agent!r}) failed: {error}")
            return
        try:
            answer = _Output(output)
        except ValueError as exc:
            self.node_failed(node, "BAD_OUTPUT", f"agent node {node.id!r} gave a malformed answer: {exc}", value=output)
            return
        ends = [c for c in answer.tool_calls if c.name == END_TOOL] if self.graph.is_conversational else []
        if ends:
            answer.tool_calls = [c for c in answer.tool_calls if c.name != END_TOOL]
            answer.next = END
            last_words = ends[0].arguments.get("message")
            if not answer.has_message and last_words is not None:
                answer.message, answer.has_message = last_words, True
        if answer.has_message or answer.tool_calls:
            # An assistant turn that asks for tools is kept even without text: tool messages answer it.
            self.state.messages.append(
                GraphMessage(
                    role="assistant",
                    content=answer.message,
                    name=node.name,
                    node_id=node.id,
                    tool_calls=answer.tool_calls or None,
                )
            )
        self.state.next = answer.next
        self.state.tool_calls = answer.tool_calls
        self.state.last_output = output
        self.route_agent(node, answer)

    def route_agent(self, node: GraphNode, answer: _Output) -> None:
        edge: GraphEdge | None
        if answer.next is not None:
            edge = self.graph.conditional_edge(node.id, answer.next)
            if edge is None:
                allowed = ", ".join(self.graph.allowed_next(node.id)) or "none"
                self.node_failed(
                    node,
                    "UNKNOWN_NEXT",
                    f"agent node {node.id!r} chose next {answer.next!r}, which is not one of its edges "
                    f"(allowed_next: {allowed})",
                    value=answer.next,
                )
                return
        elif answer.tool_calls:
            edge = next(
                (
                    e
                    for e in self.graph.edges_from(node.id)
                    if self.graph.has_node(e.target_node_id)
                    and self.graph.node(e.target_node_id or "").node_type == "TOOL_EXECUTOR"
                ),
                None,
            )
            if edge is None:
                self.node_failed(
                    node,
                    "NO_TOOL_ROUTE",
                    f"agent node {node.id!r} asked for tools but no edge leads to a tool executor",
                )
                return
        else:
            edge = self.graph.always_edge(node.id)
            if edge is None and self.graph.edges_from(node.id):
                allowed = ", ".join(self.graph.allowed_next(node.id))
                self.node_failed(
                    node, "MISSING_NEXT", f"agent node {node.id!r} gave no next; expected one of: {allowed}"
                )
                return
        self.node_completed(node, next=answer.next)
        self.take(edge, node)

    def on_tools_done(self, event: ToolsCompleted) -> None:
        pending = self.state.pending
        if pending is None or pending.kind != "tools" or pending.path != event.path:
            return
        node = self.graph.node(pending.node_id)
        calls = self.state.tool_calls
        by_id = {r.id: r for r in event.results}
        results = [by_id.get(c.id) or ToolResult(id=c.id, name=c.name, error="no result was reported") for c in calls]
        self.state.tool_results = results
        self.state.tool_calls = []
        for result in results:
            content = result.output if result.error is None else {"error": result.error}
            self.state.messages.append(
                GraphMessage(role="tool", content=content, name=result.name, tool_call_id=result.id, node_id=node.id)
            )
        # Three tiers (seed 000 §2.4): the edge named after an executed tool, the ALWAYS edge, the caller.
        edge = next((e for c in calls if (e := self.graph.conditional_edge(node.id, c.name)) is not None), None)
        edge = edge or self.graph.always_edge(node.id)
        self.node_completed(node, tools=[r.name for r in results])
        if edge is not None:
            self.take(edge, node)
            return
        caller = self.state.last_agent
        if caller is None or not self.graph.has_node(caller):
            self.fail("NO_TOOL_ROUTE", f"tool executor {node.id!r} has no edge to take and no caller to return to")
            return
        if self.timed_out():
            self.trip("timeout")
            return
        self.enter(caller)

    def on_review(self, event: ReviewAnswered) -> None:
        pending = self.state.pending
        if self.state.status != "paused" or pending is None or pending.kind != "review":
            raise InvalidTransition(f"cannot resume: the execution is {self.state.status}, not paused for a review")
        node = self.graph.node(pending.node_id)
        if event.decision == "edit":
            problems = schema_errors(node.edit_schema, event.data)
            if problems:
                raise InvalidTransition("the edit does not match the editSchema: " + "; ".join(problems))
        self.state.status = "running"
        self.state.active_since = self.now
        if self.state.limit is not None:
            # A human chose to carry on after a guard tripped: the guards count afresh.
            self.state.steps = self.state.rounds = 0
            self.state.active_seconds = 0.0
            self.state.limit = None
        self.arm_timers()
        self.emit("execution.resumed", node, status="running", decision=event.decision, reason=event.reason)
        if event.decision == "edit":
            self.state.messages.append(GraphMessage(role="user", content=event.data, name="human", node_id=node.id))
        edge = self.graph.conditional_edge(node.id, event.decision)
        if edge is None and event.decision != "reject":
            edge = self.graph.always_edge(node.id)
        if edge is None and event.decision == "reject":
            why = f": {event.reason}" if event.reason else ""
            self.node_failed(node, "REJECTED", f"rejected by the reviewer at {node.id!r}{why}")
            return
        self.node_completed(node, decision=event.decision)
        self.take(edge, node)

    # --- routing ---

    def take(self, edge: GraphEdge | None, node: GraphNode) -> None:
        """Follow an edge (``None``: the node has no way on, which ends the execution)."""
        if self.state.finished:
            return
        if edge is None or edge.target_node_id is None:
            self.complete()
            return
        if not self.graph.has_node(edge.target_node_id):
            self.fail(
                "UNDEFINED_TARGET",
                f"{edge.describe()} leads to {edge.target_node_id!r}, which is not a node of the workflow",
                node_id=node.id,
                edge_id=edge.id,
            )
            return
        if self.timed_out():
            self.trip("timeout")
            return
        self.enter(edge.target_node_id)

    def guard_text(self, guard: Guard) -> str:
        if guard == "stepLimit":
            return f"stepLimit {self.graph.effective_step_limit} reached (nodes run: {self.state.steps})"
        if guard == "maxRounds":
            return f"maxRounds {self.graph.max_rounds} reached (returns to the entry node: {self.state.rounds})"
        return f"timeout {float(self.graph.timeout):g}s reached"

    def trip(self, guard: Guard) -> None:
        """A guard tripped: go where ``onLimit`` says (a HUMAN_HANDOFF node, end, or fail)."""
        self.cancel_pending()
        action = self.graph.limit_action(guard)
        text = self.guard_text(guard)
        if action == "end":
            self.state.limit = guard
            self.complete()
        elif action == "fail" or not self.graph.has_node(action):
            self.fail("GUARD", f"{text}; the workflow has no human handoff for it", guard=guard)
        else:
            self.state.limit = guard
            self.run_node(self.graph.node(action))

    # --- timers, cancellation ---

    def on_timer(self, timer_id: str) -> None:
        due = self.state.timers.pop(timer_id, None)
        if due is None or self.state.status != "running":
            return
        if timer_id == GRAPH_TIMEOUT:
            if self.timed_out():
                self.trip("timeout")
            else:  # re-armed since (a resume); keep the current one
                self.state.timers[timer_id] = due
        elif timer_id == CALLER_DEADLINE:
            self.cancel_pending()
            self.fail("DEADLINE", "the caller's deadline passed before the workflow finished")

    def cancel_pending(self) -> None:
        pending = self.state.pending
        if pending is not None and pending.kind == "agent" and pending.agent and pending.task_id:
            self.commands.append(CancelCall(path=pending.path, agent=pending.agent, task_id=pending.task_id))
        self.state.pending = None

    def cancel(self, reason: str) -> None:
        self.cancel_pending()
        self.finish("canceled", GraphFailure(reason="CANCELED", message=reason))

    # --- endings ---

    def node_completed(self, node: GraphNode, **data: Any) -> None:
        self.emit("node.completed", node, status="completed", **data)
        self.state.pending = None

    def node_failed(self, node: GraphNode, reason: FailureReason, message: str, *, value: JsonValue = None) -> None:
        self.emit("node.failed", node, status="failed", error=message)
        self.state.pending = None
        self.fail(reason, message, node_id=node.id, value=value)

    def complete(self) -> None:
        self.state.output = self.state.messages[-1].content if self.state.messages else None
        self.finish("completed", None)

    def fail(
        self,
        reason: FailureReason,
        message: str,
        *,
        node_id: str | None = None,
        edge_id: str | None = None,
        guard: Guard | None = None,
        value: JsonValue = None,
    ) -> None:
        failure = GraphFailure(
            reason=reason, message=message, node_id=node_id, edge_id=edge_id, guard=guard, value=value
        )
        self.finish("failed", failure)

    def finish(self, status: Literal["completed", "failed", "canceled"], failure: GraphFailure | None) -> None:
        if self.state.finished:
            return
        if self.state.active_since is not None:
            self.state.active_seconds += self.now - self.state.active_since
            self.state.active_since = None
        self.state.status = status
        self.state.failure = failure
        self.state.error = failure.message if failure else None
        self.state.finished_at = self.now
        self.state.pending = None
        for timer_id in list(self.state.timers):
            self.clear_timer(timer_id)
        self.emit(
            _FINISH_EVENT[status],
            status=status,
            error=self.state.error,
            steps=self.state.steps,
            rounds=self.state.rounds,
            limit=self.state.limit,
            duration_ms=int((self.now - self.state.started_at) * 1000),
        )
        output = self.state.output if status == "completed" else None
        self.commands.append(Finish(status=_FINAL[status], output=output, error=self.state.error))
