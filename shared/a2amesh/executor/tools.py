"""Runs the tools a graph's TOOL_EXECUTOR asks for (``RunTools``), in parallel, each one:

- on the mesh agent named by the tool's ``agent`` in the definition's ``tools`` table, if set;
- else on a live mesh agent named like the tool;
- else with the Python function named by the tool's ``handler`` (``"module:function"``), called
  with the call's arguments as keyword arguments (async functions awaited, plain ones in a thread);
- else the call fails with a result ``error`` naming the tool (the agent sees it as a tool message).

A tool's failure is its result (``ToolResult.error``), never the execution's crash.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from a2amesh.errors import A2AMeshError
from a2amesh.protocol import Message, Part, Role, TaskState
from a2amesh.protocol.vocabulary import CALL_CHAIN_KEY
from a2amesh.workflow.graph.state import RunTools, ToolCall, ToolResult, ToolsCompleted

if TYPE_CHECKING:
    from a2amesh.executor.runner import ExecutionRunner

__all__ = ["run_tools"]


async def run_tools(command: RunTools, runner: ExecutionRunner[Any]) -> ToolsCompleted:
    """Run every tool call of ``command`` for ``runner``'s execution; the results in call order."""
    results = await asyncio.gather(*(_run_tool(runner, command, call) for call in command.calls))
    return ToolsCompleted(path=command.path, results=list(results))


def _import_tool(handler: str) -> Callable[..., Any]:
    module_name, _, attr = handler.partition(":")
    if not module_name or not attr:
        raise ValueError(f"tool handler {handler!r} is not 'module:function'")
    fn: object = getattr(importlib.import_module(module_name), attr, None)
    if not callable(fn):
        raise ValueError(f"tool handler {handler!r} is not a function")
    return fn


async def _run_tool(runner: ExecutionRunner[Any], command: RunTools, call: ToolCall) -> ToolResult:
    spec = command.tools.get(call.name) or {}
    agent = spec.get("agent")
    handler = spec.get("handler")
    deadline = command.deadline or (time.time() + runner.deps.settings.call_timeout)
    try:
        async with asyncio.timeout(max(deadline - time.time(), 0.01)):
            if isinstance(agent, str) and agent:
                return await _tool_on_mesh(runner, command, call, agent, deadline)
            if runner.deps.client.registry.get(call.name) is not None:
                return await _tool_on_mesh(runner, command, call, call.name, deadline)
            if isinstance(handler, str) and handler:
                return await _tool_in_python(call, handler)
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


async def _tool_on_mesh(
    runner: ExecutionRunner[Any], command: RunTools, call: ToolCall, agent: str, deadline: float
) -> ToolResult:
    state = runner.state
    message = Message(
        message_id=f"{runner.execution_id}:{command.path}:{call.id}",
        role=Role.USER,
        parts=[Part.of_data(dict(call.arguments))],
        context_id=state.context_id,
        metadata={CALL_CHAIN_KEY: [*state.call_chain, state.workflow]},
    )
    pending = await runner.deps.client.dispatch(
        agent, message, deadline=deadline, headers=runner.reply.headers, call_depth=state.call_depth + 1
    )
    task = await pending.result()
    if task.status.state == TaskState.COMPLETED:
        return ToolResult(id=call.id, name=call.name, output=task.output())
    text = task.status.message.text() if task.status.message else task.status.state.value
    return ToolResult(id=call.id, name=call.name, error=f"tool agent {agent!r} ended {task.status.state.value}: {text}")


async def _tool_in_python(call: ToolCall, handler: str) -> ToolResult:
    fn = await asyncio.to_thread(_import_tool, handler)
    if inspect.iscoroutinefunction(fn):
        value = await fn(**call.arguments)
    else:
        value = await asyncio.to_thread(fn, **call.arguments)
        if inspect.isawaitable(value):
            value = await value
    return ToolResult(id=call.id, name=call.name, output=value)
