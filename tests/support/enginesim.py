"""A pure driver for the workflow engine: fake agents, a fake clock, no servers.

``Sim(definition).run(input)`` starts an execution and feeds it results and timers until it
finishes (or until ``max_steps``), recording every command. Agents are plain functions
``fn(input) -> output``; raising :class:`Fail` reports a callee failure, :class:`Error` a failed
call, and returning :data:`HANG` never answers.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.engine import Engine
from a2amesh.workflow.dag.state import Command, DispatchNode, Event, ExecutionState
from a2amesh.workflow.events import (
    CancelCall,
    CancelRequested,
    ClearTimer,
    EmitEvent,
    Finish,
    NodeFailed,
    NodeSucceeded,
    SetTimer,
    TimerFired,
)
from a2amesh.workflow.loader import LoadedWorkflow, load_data

HANG = object()


@dataclass(frozen=True)
class FileResult:
    """What a fake agent returns to answer with a file: ``value`` is the file part's JSON form."""

    value: dict[str, Any]


class Fail(Exception):
    """The callee reports failure (TASK_STATE_FAILED)."""


class Error(Exception):
    """The call itself fails (transport, JSON-RPC error)."""


def definition(text: str | dict[str, Any], name: str = "wf") -> WorkflowDefinition:
    """Load and validate a definition from YAML text or data."""
    data = yaml.safe_load(text) if isinstance(text, str) else text
    loaded = load_data(data, name=name)[0]
    assert isinstance(loaded, LoadedWorkflow), f"{name} is not a DAG workflow"
    return loaded.definition


Agent = Callable[[Any], Any]


@dataclass
class Sim:
    """Drives one execution of a definition with fake agents and a fake clock."""

    definition: WorkflowDefinition
    agents: dict[str, Agent] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    now: float = 1000.0
    state: ExecutionState | None = None
    commands: list[Command] = field(default_factory=list)
    dispatched: list[DispatchNode] = field(default_factory=list)
    cancelled: list[CancelCall] = field(default_factory=list)
    _queue: list[tuple[float, int, Any]] = field(default_factory=list)
    _n: int = 0
    in_flight: dict[str, int] = field(default_factory=dict)
    max_in_flight: dict[str, int] = field(default_factory=dict)

    @property
    def engine(self) -> Engine:
        return Engine(self.definition)

    def _push(self, at: float, item: Any) -> None:
        self._n += 1
        heapq.heappush(self._queue, (at, self._n, item))

    def start(self, input: Any = None, **kwargs: Any) -> ExecutionState:
        self.state, commands = self.engine.start(execution_id="exec-1", input=input or {}, now=self.now, **kwargs)
        self._carry(commands)
        return self.state

    def feed(self, event: Event) -> ExecutionState:
        assert self.state is not None
        self.state, commands = self.engine.step(self.state, event, self.now)
        self._carry(commands)
        return self.state

    def _carry(self, commands: list[Command]) -> None:
        self.commands.extend(commands)
        for command in commands:
            if isinstance(command, DispatchNode):
                self.dispatched.append(command)
                self._answer(command)
            elif isinstance(command, SetTimer):
                self._push(command.due, TimerFired(timer_id=command.timer_id))
            elif isinstance(command, CancelCall):
                self.cancelled.append(command)
                self._leave(command.agent)

    def _enter(self, agent: str) -> None:
        self.in_flight[agent] = self.in_flight.get(agent, 0) + 1
        self.max_in_flight[agent] = max(self.max_in_flight.get(agent, 0), self.in_flight[agent])

    def _leave(self, agent: str) -> None:
        self.in_flight[agent] = max(self.in_flight.get(agent, 0) - 1, 0)

    def _answer(self, command: DispatchNode) -> None:
        fn = self.agents.get(command.agent)
        self._enter(command.agent)
        at = self.now + self.latency.get(command.agent, 0.01)
        if fn is None:
            self._push(
                at,
                (
                    "done",
                    command.agent,
                    NodeFailed(
                        path=command.path,
                        attempt=command.attempt,
                        error=f"AGENT_NOT_FOUND: {command.agent}",
                        error_kind="error",
                    ),
                ),
            )
            return
        try:
            output = fn(command.input)
        except Fail as exc:
            event: Event = NodeFailed(path=command.path, attempt=command.attempt, error=str(exc), error_kind="failure")
        except Error as exc:
            event = NodeFailed(path=command.path, attempt=command.attempt, error=str(exc), error_kind="error")
        else:
            if output is HANG:
                return
            file = isinstance(output, FileResult)
            value = output.value if isinstance(output, FileResult) else output
            event = NodeSucceeded(
                path=command.path, attempt=command.attempt, output=value, task_id=command.task_id, file=file
            )
        self._push(at, ("done", command.agent, event))

    def run(self, input: Any = None, *, max_steps: int = 10_000, **kwargs: Any) -> ExecutionState:
        """Start and drive until finished (or nothing is left to happen)."""
        self.start(input, **kwargs)
        return self.drive(max_steps=max_steps)

    def drive(self, *, max_steps: int = 10_000, until: float | None = None) -> ExecutionState:
        assert self.state is not None
        steps = 0
        while self._queue and not self.state.finished and steps < max_steps:
            at, _, item = self._queue[0]
            if until is not None and at > until:
                break
            heapq.heappop(self._queue)
            self.now = max(self.now, at)
            if isinstance(item, tuple):
                self._leave(item[1])
                self.feed(item[2])
            else:
                self.feed(item)
            steps += 1
        return self.state

    def cancel(self, reason: str = "canceled by request") -> ExecutionState:
        return self.feed(CancelRequested(reason=reason))

    # --- views ---
    def events(self, kind: str | None = None) -> list[EmitEvent]:
        return [c for c in self.commands if isinstance(c, EmitEvent) and (kind is None or c.event == kind)]

    def finishes(self) -> list[Finish]:
        return [c for c in self.commands if isinstance(c, Finish)]

    def status(self, path: str) -> str:
        assert self.state is not None
        return self.state.nodes[path].status.value

    def calls(self, agent: str | None = None) -> list[DispatchNode]:
        return [d for d in self.dispatched if agent is None or d.agent == agent]

    def cleared(self) -> list[str]:
        return [c.timer_id for c in self.commands if isinstance(c, ClearTimer)]
