"""Drives one graph-workflow execution (SPEC §6) with the DAG runner's machinery.

:class:`GraphRunner` is an :class:`~a2amesh.executor.runner.ExecutionRunner` over a
:class:`~a2amesh.workflow.graph.engine.GraphEngine`: the same inbox, lease-guarded checkpoint, agent
dispatch, timers, pause/park, progress and final answer. What differs is here: the node records of
a graph (one per node instance), the ``graph_node_request`` message, the TOOL_EXECUTOR's tool runs
and the takeover of the one call a graph waits for.

Tools (``RunTools``) run in parallel, each one:

- on the mesh agent named by the tool's ``agent`` in the definition's ``tools`` table, if set;
- else on a live mesh agent named like the tool;
- else with the Python function named by the tool's ``handler`` (``"module:function"``), called
  with the call's arguments as keyword arguments (async functions awaited, plain ones in a thread);
- else the call fails with a result ``error`` naming the tool (the agent sees it as a tool message).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from a2amesh.errors import A2AMeshError
from a2amesh.executor.runner import ExecutionRunner, RunnerDeps
from a2amesh.protocol import Message, Part, Role, TaskState
from a2amesh.protocol.vocabulary import CALL_CHAIN_KEY, NODE_PATH_KEY
from a2amesh.worker.replies import ReplyInfo
from a2amesh.workflow.dag.engine import Engine
from a2amesh.workflow.dag.state import ExecutionState, NodePaused
from a2amesh.workflow.events import NodeFailed, NodeSucceeded, RequestReview
from a2amesh.workflow.graph.engine import GraphEngine
from a2amesh.workflow.graph.state import (
    DispatchGraphNode,
    GraphState,
    Pending,
    RunTools,
    ToolCall,
    ToolResult,
    ToolsCompleted,
)

__all__ = ["GraphRunner", "load_state", "make_runner"]


def load_state(engine: Engine | GraphEngine, raw: str) -> ExecutionState | GraphState:
    """A checkpointed state for ``engine``'s kind of workflow."""
    if isinstance(engine, GraphEngine):
        return GraphState.model_validate_json(raw)
    return ExecutionState.model_validate_json(raw)


def make_runner(
    deps: RunnerDeps, engine: Engine | GraphEngine, state: ExecutionState | GraphState, *, epoch: int, reply: ReplyInfo
) -> ExecutionRunner:
    """The runner for an engine: :class:`GraphRunner` for graphs, :class:`ExecutionRunner` for DAGs."""
    if isinstance(engine, GraphEngine):
        assert isinstance(state, GraphState)
        return GraphRunner(deps, engine, state, epoch=epoch, reply=reply)
    assert isinstance(state, ExecutionState)
    return ExecutionRunner(deps, engine, state, epoch=epoch, reply=reply)


def _import_tool(handler: str) -> Callable[..., Any]:
    module_name, _, attr = handler.partition(":")
    if not module_name or not attr:
        raise ValueError(f"tool handler {handler!r} is not 'module:function'")
    fn = getattr(importlib.import_module(module_name), attr, None)
    if not callable(fn):
        raise ValueError(f"tool handler {handler!r} is not a function")
    return fn  # type: ignore[no-any-return]


class GraphRunner(ExecutionRunner):
    """Owns one graph execution while its lease holds (see the module docstring)."""

    engine: GraphEngine  # type: ignore[assignment]
    state: GraphState  # type: ignore[assignment]

    def __init__(self, deps: RunnerDeps, engine: GraphEngine, state: GraphState, *, epoch: int, reply: ReplyInfo):
        super().__init__(deps, engine, state, epoch=epoch, reply=reply)  # type: ignore[arg-type]

    # --- engine-specific hooks ---------------------------------------------------------------

    def parse_state(self, raw: str) -> GraphState:
        return GraphState.model_validate_json(raw)

    def node_records(self, old: Any, new: Any) -> dict[str, str]:
        records: dict[str, str] = {}
        before: Pending | None = old.pending
        after: Pending | None = new.pending
        if before is not None and (after is None or after.path != before.path):
            failed = new.failure is not None and new.failure.node_id == before.node_id
            records[before.path] = self._record(
                before, "failed" if failed else "completed", new.error if failed else None
            )
        if after is not None and after != before:
            records[after.path] = self._record(after, "waiting_input" if after.kind == "review" else "running", None)
        return records

    @staticmethod
    def _record(pending: Pending, status: str, error: str | None) -> str:
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
                "finished_at": time.time() if status in ("completed", "failed") else None,
                "error": error,
            }
        )

    async def _apply(self, batch: list[Any]) -> None:
        state = self.state
        commands: list[Any] = []
        applied: list[str] = []
        for event in batch:
            if isinstance(event, NodePaused):
                event = NodeFailed(
                    path=event.path,
                    attempt=event.attempt,
                    error="the agent asked for input; in a graph workflow a person takes over at a HUMAN_HANDOFF node",
                    retryable=False,
                )
            if isinstance(event, NodeSucceeded | NodeFailed):
                pending = state.pending
                if pending is None or pending.path != event.path or pending.attempt != event.attempt:
                    continue
                applied.append(f"{event.path}@{event.attempt}")
            state, step_commands = self.engine.step(state, event, time.time())
            commands.extend(step_commands)
        if state is self.state or (not commands and state == self.state):
            return
        await self.checkpoint(state, commands, applied)

    def prepare(self, commands: list[Any], state: Any = None) -> dict[str, str]:
        target: GraphState = self.state if state is None else state
        call_ids: dict[str, str] = {}
        for command in commands:
            if isinstance(command, DispatchGraphNode):
                call_ids[command.path] = call_id = self._new_call_id()
                if target.pending is not None and target.pending.path == command.path:
                    target.pending.reply_to = self.deps.bus.subjects.reply(self.deps.client.instance, call_id)
        return call_ids

    @staticmethod
    def _new_call_id() -> str:
        from a2amesh.ids import nuid

        return nuid()

    async def _carry(self, commands: list[Any], call_ids: dict[str, str] | None = None) -> None:
        for command in commands:
            if isinstance(command, RunTools):
                self._start_tools(command)
        await super()._carry([c for c in commands if not isinstance(c, RunTools)], call_ids)

    def _message(self, command: Any) -> Message:
        assert isinstance(command, DispatchGraphNode)
        return Message(
            message_id=command.message_id,
            role=Role.USER,
            parts=[Part.of_data(command.control), Part.of_data({} if command.input is None else command.input)],
            context_id=self.state.context_id,
            metadata={CALL_CHAIN_KEY: command.call_chain, NODE_PATH_KEY: command.path},
        )

    # --- tools -------------------------------------------------------------------------------

    def _start_tools(self, command: RunTools) -> None:
        old = self._calls.pop(command.path, None)
        if old is not None:
            old.cancel()
        task = asyncio.create_task(self._run_tools(command), name=f"tools-{command.path}")
        self._calls[command.path] = task
        task.add_done_callback(functools.partial(self._call_done, command.path))

    async def _run_tools(self, command: RunTools) -> None:
        results = await asyncio.gather(*(self._run_tool(command, call) for call in command.calls))
        self.inbox.put_nowait(ToolsCompleted(path=command.path, results=list(results)))  # type: ignore[arg-type]

    async def _run_tool(self, command: RunTools, call: ToolCall) -> ToolResult:
        spec = command.tools.get(call.name) or {}
        agent = spec.get("agent")
        handler = spec.get("handler")
        deadline = command.deadline or (time.time() + self.deps.settings.call_timeout)
        try:
            async with asyncio.timeout(max(deadline - time.time(), 0.01)):
                if isinstance(agent, str) and agent:
                    return await self._tool_on_mesh(command, call, agent, deadline)
                if self.deps.client.registry.get(call.name) is not None:
                    return await self._tool_on_mesh(command, call, call.name, deadline)
                if isinstance(handler, str) and handler:
                    return await self._tool_in_python(call, handler)
        except TimeoutError:
            return ToolResult(id=call.id, name=call.name, error=f"tool {call.name!r} timed out")
        except A2AMeshError as e:
            return ToolResult(id=call.id, name=call.name, error=f"tool {call.name!r} failed: {e}")
        except Exception as e:  # a tool's own exception is its result, not the executor's crash
            return ToolResult(id=call.id, name=call.name, error=f"tool {call.name!r} raised {type(e).__name__}: {e}")
        return ToolResult(
            id=call.id,
            name=call.name,
            error=f"no tool {call.name!r}: no live mesh agent of that name and no handler in the workflow's tools",
        )

    async def _tool_on_mesh(self, command: RunTools, call: ToolCall, agent: str, deadline: float) -> ToolResult:
        message = Message(
            message_id=f"{self.execution_id}:{command.path}:{call.id}",
            role=Role.USER,
            parts=[Part.of_data(dict(call.arguments))],
            context_id=self.state.context_id,
            metadata={CALL_CHAIN_KEY: [*self.state.call_chain, self.state.workflow]},
        )
        pending = await self.deps.client.dispatch(
            agent, message, deadline=deadline, headers=self.reply.headers, call_depth=self.state.call_depth + 1
        )
        task = await pending.result()
        if task.status.state == TaskState.COMPLETED:
            return ToolResult(id=call.id, name=call.name, output=task.output())
        text = task.status.message.text() if task.status.message else task.status.state.value
        return ToolResult(
            id=call.id, name=call.name, error=f"tool agent {agent!r} ended {task.status.state.value}: {text}"
        )

    async def _tool_in_python(self, call: ToolCall, handler: str) -> ToolResult:
        fn = await asyncio.to_thread(_import_tool, handler)
        if inspect.iscoroutinefunction(fn):
            value = await fn(**call.arguments)
        else:
            value = await asyncio.to_thread(fn, **call.arguments)
            if inspect.isawaitable(value):
                value = await value
        return ToolResult(id=call.id, name=call.name, output=value)

    # --- takeover ----------------------------------------------------------------------------

    def pending_review(self) -> RequestReview | None:
        command = self.engine.in_flight(self.state)
        return command if isinstance(command, RequestReview) else None

    async def resume_calls(self) -> None:
        """After a takeover: re-run tools, apply a final already on the reply subject, or re-send the call."""
        command = self.engine.in_flight(self.state)
        pending = self.state.pending
        if command is None or pending is None or isinstance(command, RequestReview):
            return
        if isinstance(command, RunTools):
            self._start_tools(command)
            return
        stored = None
        if pending.reply_to:
            with contextlib.suppress(Exception):
                stored = await self.deps.bus.direct_get_last(self.deps.bus.subjects.replies_stream, pending.reply_to)
        event = await self._stored_event(pending, stored)  # type: ignore[arg-type]
        if event is not None:
            self.inbox.put_nowait(event)
            return
        await self.checkpoint(self.state.model_copy(deep=True), [command], [])
