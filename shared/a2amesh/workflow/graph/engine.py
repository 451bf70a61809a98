"""The graph workflow engine (SPEC §6): a pure, deterministic state machine over a :class:`GraphDefinition`.

``GraphEngine(definition).start(...)`` builds the first state of an execution (one turn of a
conversation), and ``GraphEngine(definition).step(state, event, now)`` applies one event; both
return the new state and the commands the executor carries out. No I/O, no clock (``now`` is epoch
seconds, given), and the state handed in is never mutated, so the executor checkpoints the result
after every step and any replica carries on from a checkpoint; ``in_flight(state)`` rebuilds the
command of the pending call (same ids, same input) for a replica that takes over. The vocabulary is
the DAG engine's (:mod:`a2amesh.workflow.dag.state`) wherever it fits, so one executor loop drives
both; the graph-specific data lives in :mod:`a2amesh.workflow.graph.state`.

Commands (``kind``):

- ``dispatch_graph_node`` :class:`DispatchGraphNode`: call an AGENT node's agent with a
  ``SendMessage`` whose parts are ``control`` as a DataPart (``{"type": "graph_node_request",
  "execution_id", "workflow_name", "node_id", "node_name", "allowed_next": [...], "tools": [...],
  "execute_tools": false, "conversational", "instruction"}``) and ``input`` as a DataPart: the
  conversation ``{"messages": [...]}`` in the graph format, the previous agent's output in the
  simple format. ``message_id`` / ``task_id`` are deterministic (checkpoint before publishing).
  Answer with ``NodeSucceeded(path, attempt, output)`` or ``NodeFailed(path, attempt, error)``.
  The output is ``{"next", "message", "tool_calls"?}`` (``tool_calls``: ``[{"id", "name",
  "arguments"}]``, the OpenAI ``{"function": {...}}`` shape accepted too); any other output is
  taken as the message, with no ``next``.
- ``run_tools`` :class:`RunTools`: run ``calls`` (Python tools or mesh agents, in parallel; ``tools``
  holds the definition's specs of the names it knows), then answer once with
  :class:`ToolsCompleted` ``(path, results=[{"id", "name", "output" | "error"}])``.
- ``request_review`` :class:`RequestReview`: the execution is paused (task state
  ``TASK_STATE_INPUT_REQUIRED``, DataPart ``review`` = ``{"type": "review_request", "path",
  "prompt", "data", "edit_schema"}``); answer with :class:`ReviewAnswered` ``(decision =
  approve | edit | reject, data, reason)`` — the SPEC's resume body ``{"decision", "data"}``
  validates as one. A resume that does not fit raises :class:`~a2amesh.errors.InvalidTransition`
  (say so to the resumer; the state is unchanged).
- ``set_timer`` / ``clear_timer`` (timers :data:`GRAPH_TIMEOUT` and :data:`CALLER_DEADLINE`; feed
  ``TimerFired(timer_id)`` back when due), ``cancel_call`` (cancel a callee's task; a tool run in
  flight is simply dropped: its late ``ToolsCompleted`` is ignored), ``emit`` (lifecycle events
  ``execution.started|paused|resumed|completed|failed|cancelled``, ``node.started|completed|failed``),
  ``finish`` (answer the caller once; the output is the content of the last message;
  ``state.failure`` holds the reason, node, edge and guard of a failure).

Events: ``NodeSucceeded``, ``NodeFailed``, ``TimerFired``, ``CancelRequested`` (from
:mod:`a2amesh.workflow.dag.state`), :class:`ToolsCompleted`, :class:`ReviewAnswered`. An event that
no longer applies (a stale result, a disarmed timer, anything after the finish) changes nothing.

Routing: an AGENT's ``next`` picks its CONDITIONAL edge (unknown → the node fails naming node and
value); no ``next`` takes the edge to the TOOL_EXECUTOR when it asked for tools, else its ALWAYS
edge, else ends the execution when the node has no edges at all (a simple-format sink). A
TOOL_EXECUTOR routes on the CONDITIONAL edge named after an executed tool (first in call order),
else its ALWAYS edge, else back to the calling agent. A HUMAN_HANDOFF routes on the edge named after
the decision, else (approve, edit) its ALWAYS edge or END; a reject without an edge fails. An edge
with ``targetNodeId: null`` ends the execution; an edge to an undefined node fails it naming the
edge. In a conversational workflow, calling the ``end`` tool sets ``next`` to END.

Guards: ``stepLimit`` (node runs), ``timeout`` (seconds running; paused time excluded) and
``maxRounds`` (returns to the entry node) each count per execution (per turn); a tripped guard goes
where ``onLimit`` says: a HUMAN_HANDOFF node (resuming it restarts the counts), ``end`` or ``fail``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

from pydantic import BaseModel

from a2amesh.errors import ConfigError, InvalidTransition
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.engine_protocol import Advance, OpenCall, StateWrite
from a2amesh.workflow.events import (
    CancelRequested,
    NodeFailed,
    NodePaused,
    NodeSucceeded,
    RequestReview,
    ReviewAnswered,
    TimerFired,
)
from a2amesh.workflow.graph.definition import GraphDefinition
from a2amesh.workflow.graph.state import (
    DispatchGraphNode,
    GraphCommand,
    GraphEvent,
    GraphState,
    Pending,
    RunTools,
    ToolsCompleted,
)
from a2amesh.workflow.graph.step import CALLER_DEADLINE, GRAPH_TIMEOUT, GraphStep

__all__ = ["CALLER_DEADLINE", "GRAPH_TIMEOUT", "GraphEngine"]

PAUSED_CALL = "the agent asked for input; in a graph workflow a person takes over at a HUMAN_HANDOFF node"
"""The error of a call whose agent asked for input (:class:`NodePaused`): graphs pause at their own nodes only."""


class GraphEngine:
    """The engine for one graph (stateless; one instance serves every execution of it).

    Args:
        definition: a checked graph definition (its ``name`` set).
        branch: the branch to run, or ``None`` for the workflow's own graph.

    Raises:
        ConfigError: the chosen graph has no nodes (a workflow of branches alone) or no such branch.
    """

    def __init__(self, definition: GraphDefinition, *, branch: str | None = None) -> None:
        self.root = definition
        self.name = definition.name or "graph"
        self.branch = branch
        try:
            self.graph = definition.graph_for(branch)
        except KeyError as exc:
            raise ConfigError(self.name, "branches", str(exc.args[0])) from None
        if not self.graph.nodes or self.graph.entry is None:
            branches = ", ".join(b.id or "" for b in definition.branches)
            raise ConfigError(
                self.name, "nodes", f"has no graph of its own to run; run one of its branches: {branches}"
            )

    def start(
        self,
        *,
        execution_id: str,
        input: JsonValue,
        now: float,
        previous: GraphState | None = None,
        digest: str | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        call_depth: int = 0,
        call_chain: Sequence[str] = (),
        deadline: float | None = None,
    ) -> tuple[GraphState, list[GraphCommand]]:
        """Begin an execution (a turn): add the input to the conversation and call the entry node.

        Args:
            execution_id: the execution's id.
            input: the workflow input: text, ``{"text": …}``, ``{"messages": [...]}`` or any JSON.
            now: the current time (epoch seconds).
            previous: a conversational workflow's state after the previous turn on this contextId
                (its messages carry over); ignored when the workflow is not conversational.
            digest: the definition's content hash (defaults to ``definition.digest()``).
            task_id: the workflow task this execution answers.
            context_id: the task's contextId.
            call_depth: the request's ``A2A-Call-Depth``.
            call_chain: workflows above this one (outermost first).
            deadline: the caller's deadline (epoch seconds), if any.

        Raises:
            InvalidTransition: ``previous`` is a turn that has not finished (resume or cancel it first).
        """
        state = GraphState(
            execution_id=execution_id,
            workflow=self.name,
            branch=self.branch,
            digest=digest or self.root.digest(),
            input=input,
            task_id=task_id,
            context_id=context_id,
            call_depth=call_depth,
            call_chain=list(call_chain),
            started_at=now,
            active_since=now,
            deadline=deadline,
            last_output=input,
        )
        if previous is not None and self.graph.is_conversational:
            if not previous.finished:
                raise InvalidTransition(
                    f"turn {previous.turn} of this conversation is {previous.status}; resume or cancel it before "
                    "starting the next turn"
                )
            state.messages = [m.model_copy(deep=True) for m in previous.messages]
            state.turn = previous.turn + 1
            state.calls = previous.calls
        run = GraphStep(self, state, now)
        run.emit("execution.started", workflow=self.name, branch=self.branch, turn=state.turn, digest=state.digest)
        problem = run.add_input(input)
        if problem is not None:
            run.fail("INVALID_INPUT", problem)
            return state, run.commands
        run.arm_timers()
        run.run_node(self.graph.node(self.graph.entry or ""))
        return state, run.commands

    def in_flight(self, state: GraphState) -> DispatchGraphNode | RunTools | RequestReview | None:
        """The command of the call the execution waits for, rebuilt with the same ids and input.

        For an executor that takes over an execution (SPEC §3.5, §7): re-send it only when no reply
        exists. ``None`` when nothing is pending.
        """
        pending = state.pending
        if pending is None or state.finished:
            return None
        run = GraphStep(self, state, state.started_at)
        if pending.kind == "agent":
            return run.agent_command(pending)
        if pending.kind == "tools":
            return run.tools_command(pending)
        return run.review_command(pending)

    def step(self, state: GraphState, event: GraphEvent, now: float) -> tuple[GraphState, list[GraphCommand]]:
        """Apply one event to a copy of ``state``.

        Returns:
            The new state and the commands to carry out.

        Raises:
            InvalidTransition: a :class:`ReviewAnswered` for an execution that is not paused for a
                review, or an edit that does not match the node's ``editSchema``.
        """
        if state.finished:
            if isinstance(event, ReviewAnswered):
                raise InvalidTransition(f"cannot resume: the execution is {state.status}")
            return state, []
        run = GraphStep(self, state.model_copy(deep=True), now)
        if isinstance(event, NodeSucceeded):
            run.on_agent_done(event.path, event.attempt, event.output, None, event.usage)
        elif isinstance(event, NodeFailed):
            run.on_agent_done(event.path, event.attempt, None, event.error, event.usage)
        elif isinstance(event, ToolsCompleted):
            run.on_tools_done(event)
        elif isinstance(event, ReviewAnswered):
            run.on_review(event)
        elif isinstance(event, TimerFired):
            run.on_timer(event.timer_id)
        elif isinstance(event, CancelRequested):
            run.cancel(event.reason)
        return run.state, run.commands

    # --- what the executor needs (ExecutableEngine) --------------------------------------------

    format = "graph"
    """The format's name (:data:`a2amesh.workflow.formats.GRAPH`)."""

    io_commands: tuple[type[BaseModel], ...] = (RunTools,)
    """Tool runs (Python functions or mesh agents) are carried out by an executor-side handler."""

    def parse_state(self, raw: str) -> GraphState:
        """A checkpointed state."""
        return GraphState.model_validate_json(raw)

    def for_state(self, state: GraphState) -> GraphEngine:
        """This engine, or the engine of the branch a scheduled branch run runs."""
        return self if state.branch == self.branch else GraphEngine(self.root, branch=state.branch)

    def state_json(self, state: GraphState) -> str:
        """The whole state as JSON."""
        return state.model_dump_json()

    def advance(
        self, state: GraphState, events: Sequence[BaseModel], clock: Callable[[], float]
    ) -> Advance[GraphState]:
        """Apply a batch of events: :meth:`step` for each, a result only while its call is the pending one.

        A callee that asks for input (:class:`NodePaused`) fails its node: a person takes over a graph at
        a HUMAN_HANDOFF node only.
        """
        commands: list[BaseModel] = []
        applied: list[str] = []
        for event in events:
            if isinstance(event, NodePaused):
                event = NodeFailed(path=event.path, attempt=event.attempt, error=PAUSED_CALL, retryable=False)
            if isinstance(event, NodeSucceeded | NodeFailed):
                pending = state.pending
                if pending is None or pending.path != event.path or pending.attempt != event.attempt:
                    continue
                applied.append(f"{event.path}@{event.attempt}")
            elif not isinstance(event, ToolsCompleted | ReviewAnswered | TimerFired | CancelRequested):
                continue  # not a graph event
            state, step_commands = self.step(state, event, clock())
            commands.extend(step_commands)
        return Advance(state, commands, applied, None)

    def resume(self, state: GraphState, answer: ReviewAnswered, now: float) -> tuple[GraphState, list[GraphCommand]]:
        """Apply a human's answer (:meth:`step`)."""
        return self.step(state, answer, now)

    def set_reply_to(self, state: GraphState, path: str, subject: str) -> None:
        """Record the reply subject of the pending call, when it is the call at ``path``."""
        if state.pending is not None and state.pending.path == path:
            state.pending.reply_to = subject

    def state_write(
        self,
        old: GraphState,
        new: GraphState,
        touched: Iterable[str] | None,
        positions: dict[str, int] | None,
        records: Mapping[str, str] | None = None,
    ) -> StateWrite:
        """The whole state (a graph's state is not split)."""
        return StateWrite(new.model_dump_json())

    def node_records(
        self, old: GraphState, new: GraphState, touched: Iterable[str] | None, now: float
    ) -> dict[str, str]:
        """The record of the node instance a step finished and of the one it started (one per instance)."""
        records: dict[str, str] = {}
        before, after = old.pending, new.pending
        if before is not None and (after is None or after.path != before.path):
            failed = new.failure is not None and new.failure.node_id == before.node_id
            status = "failed" if failed else "completed"
            records[before.path] = _record(before, status, new.error if failed else None, now)
        if after is not None and after != before:
            records[after.path] = _record(after, "waiting_input" if after.kind == "review" else "running", None, now)
        return records

    def initial_records(self, state: GraphState) -> dict[str, str]:
        """The record of the first node instance, if one started."""
        pending = state.pending
        if pending is None:
            return {}
        return {pending.path: _record(pending, "waiting_input" if pending.kind == "review" else "running", None, 0.0)}

    def pending_review(self, state: GraphState) -> RequestReview | None:
        """The review of the HUMAN_HANDOFF node the execution waits at."""
        command = self.in_flight(state)
        return command if isinstance(command, RequestReview) else None

    def takeover(self, state: GraphState) -> tuple[list[OpenCall], list[BaseModel]]:
        """The one call a graph waits for (re-sent unless answered), or its tool run (run again)."""
        command = self.in_flight(state)
        pending = state.pending
        if command is None or pending is None or isinstance(command, RequestReview):
            return [], []
        if isinstance(command, RunTools):
            return [], [command]
        return [OpenCall(pending.path, pending.attempt, pending.agent, pending.reply_to, command)], []


def _record(pending: Pending, status: str, error: str | None, now: float) -> str:
    """The ``a2amesh show`` record of a graph node instance."""
    return json.dumps(
        {
            "path": pending.path,
            "node_id": pending.node_id,
            "type": pending.kind,
            "status": status,
            "agent": pending.agent,
            "task_id": pending.task_id,
            "attempt": pending.attempt,
            "started_at": pending.started_at,
            "finished_at": now if status in ("completed", "failed") else None,
            "error": error,
        }
    )
