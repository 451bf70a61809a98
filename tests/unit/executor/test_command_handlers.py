"""The runner carries out the commands an engine leaves to the executor only through a registered handler."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from a2amesh.errors import ConfigError
from a2amesh.executor.handlers import HANDLERS
from a2amesh.executor.runner import ExecutionRunner
from a2amesh.worker.replies import ReplyInfo
from a2amesh.workflow.graph.engine import GraphEngine
from a2amesh.workflow.graph.state import RunTools
from a2amesh.workflow.graph.validation import parse_graph


class Beep(BaseModel):
    """A command no handler knows."""

    path: str = "x"


class _Engine:
    name = "beeper"
    io_commands: tuple[type[BaseModel], ...] = (Beep,)


def _beeper() -> Any:
    """An engine with only what the runner's constructor reads (typed ``Any`` to pass as an ``ExecutableEngine``)."""
    return _Engine()


def _deps(handlers: Any) -> Any:
    return SimpleNamespace(handlers=handlers, instance="me")


def _graph_engine() -> GraphEngine:
    definition, _ = parse_graph(
        {
            "name": "g",
            "entrypointNodeId": "A",
            "nodes": [{"id": "A", "nodeType": "AGENT", "nodeName": "A", "agentId": "a"}],
            "edges": [],
        }
    )
    return GraphEngine(definition)


def test_a_command_type_without_handler_refuses_to_start() -> None:
    """An engine naming an I/O command nobody carries out must fail at once, not hang an execution later."""
    with pytest.raises(ConfigError, match="no handler for Beep") as caught:
        ExecutionRunner(_deps(HANDLERS), _beeper(), SimpleNamespace(), epoch=1, reply=ReplyInfo())
    assert "beeper" in str(caught.value)


def test_a_graph_runner_needs_the_tool_handler() -> None:
    """Without the RunTools handler a graph execution refuses to start (naming the command type)."""
    with pytest.raises(ConfigError, match="no handler for RunTools"):
        ExecutionRunner[Any](_deps({}), _graph_engine(), SimpleNamespace(), epoch=1, reply=ReplyInfo())


def test_every_engine_io_command_has_a_handler() -> None:
    """The default registry covers every command type the engines leave to the executor."""
    assert set(_graph_engine().io_commands) <= set(HANDLERS)
    handler = HANDLERS[RunTools]
    no_runner: Any = None  # a command of another type never reaches the runner
    assert handler.start(Beep(), runner=no_runner) is None
