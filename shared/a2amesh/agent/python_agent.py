"""Python agents: an async (or plain) function ``handler(input, ctx)`` whose return value is the output."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from a2amesh.agent.context import TaskContext, TaskOutcome
from a2amesh.agent.definition import AgentDefinition
from a2amesh.errors import ConfigError, InputRequired, StoreUnavailable
from a2amesh.protocol import AgentCard, TaskState

Handler = Callable[[Any, TaskContext], Any]


class AgentRuntime(Protocol):
    """What the agent host runs: a definition and one coroutine per task."""

    definition: AgentDefinition

    def card(self, namespace: str) -> AgentCard:
        """The card to publish."""
        ...

    async def run(self, ctx: TaskContext) -> TaskOutcome:
        """Do one task's work."""
        ...


def import_object(ref: str, *, base_dir: Path | None, source: str, field: str) -> Any:
    """Import ``module:attr``, looking beside the definition file first.

    Raises:
        ConfigError: the module or attribute cannot be imported (naming which and why).
    """
    module_name, _, attr = ref.partition(":")
    if base_dir is not None and str(base_dir) not in sys.path:
        sys.path.insert(0, str(base_dir))
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise ConfigError(source, field, f"cannot import module {module_name!r}: {type(e).__name__}: {e}") from e
    try:
        return getattr(module, attr)
    except AttributeError as e:
        raise ConfigError(source, field, f"module {module_name!r} has no attribute {attr!r}") from e


class PythonAgent:
    """Runs a Python handler for each task."""

    def __init__(self, definition: AgentDefinition, handler: Handler) -> None:
        self.definition = definition
        self.handler = handler

    @classmethod
    def from_definition(cls, definition: AgentDefinition, *, base_dir: Path | None, source: str) -> PythonAgent:
        """Import the definition's ``handler``."""
        assert definition.handler is not None
        fn = import_object(definition.handler, base_dir=base_dir, source=source, field="handler")
        if not callable(fn):
            raise ConfigError(source, "handler", f"{definition.handler!r} is not a function")
        return cls(definition, fn)

    def card(self, namespace: str) -> AgentCard:
        """The agent's card."""
        return self.definition.card(namespace)

    async def call(self, ctx: TaskContext) -> Any:
        """Call the handler once and return its output; whatever it raises propagates."""
        if inspect.iscoroutinefunction(self.handler):
            return await self.handler(ctx.input, ctx)
        output = await asyncio.to_thread(self.handler, ctx.input, ctx)
        if inspect.isawaitable(output):
            output = await output
        return output

    async def run(self, ctx: TaskContext) -> TaskOutcome:
        """Call the handler; an exception fails the task with its message."""
        try:
            output = await self.call(ctx)
        except InputRequired as e:
            return TaskOutcome(TaskState.INPUT_REQUIRED, output=e.data, message=e.prompt)
        except (asyncio.CancelledError, StoreUnavailable):
            raise  # Redis away: the task is handed back, not failed
        except Exception as e:
            return TaskOutcome(TaskState.FAILED, message=f"{type(e).__name__}: {e}")
        return TaskOutcome(TaskState.COMPLETED, output=output)
