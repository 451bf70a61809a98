"""Commands a format carries out with I/O the runner does not know: one handler per command type.

An engine names these command types in :attr:`~a2amesh.workflow.engine_protocol.ExecutableEngine.io_commands`
(a graph's ``RunTools``); the runner hands each such command to its handler, follows the handler's
work like a call (cancelled with the execution, replaced by a new one for the same node instance) and
feeds the event it returns back to the engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from a2amesh.executor.tools import run_tools
from a2amesh.workflow.graph.state import RunTools

if TYPE_CHECKING:
    from a2amesh.executor.runner import ExecutionRunner

__all__ = ["HANDLERS", "CommandHandler"]

C = TypeVar("C", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class CommandHandler(Generic[C]):
    """Carries out commands of one type.

    Attributes:
        kind: the command type handled.
        key: the node instance a command works for (a newer command for it replaces the older).
        run: does the work; returns the event to feed back to the engine.
    """

    kind: type[C]
    key: Callable[[C], str]
    run: Callable[[C, ExecutionRunner[Any]], Awaitable[BaseModel]]

    def start(self, command: BaseModel, runner: ExecutionRunner[Any]) -> tuple[str, Awaitable[BaseModel]] | None:
        """The key and the work of ``command`` (None when it is not this handler's type)."""
        if not isinstance(command, self.kind):
            return None
        return self.key(command), self.run(command, runner)


HANDLERS: Mapping[type[BaseModel], CommandHandler[Any]] = {
    RunTools: CommandHandler(RunTools, lambda command: command.path, run_tools),
}
"""The handlers every runner has, by command type."""
