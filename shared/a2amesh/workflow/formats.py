"""The workflow formats, in one place: what a definition of any format offers, which format a document
or a stored snapshot is, and the engine of each.

Two formats load: the **DAG** (:mod:`a2amesh.workflow.dag`) and the **graph** (:mod:`a2amesh.workflow.graph`,
SPEC §6; its simple variant included). Everything that must tell them apart asks this module: the loader
(which parser a document goes to), the executor's catalog (which engine a loaded workflow or a snapshot read
back from Redis gets), and the intake (which starter an engine's executions take, by :attr:`Format.name`).
Every other caller holds a :class:`Definition`, a :class:`Loaded` and an
:class:`~a2amesh.workflow.engine_protocol.ExecutableEngine`, and does not test the format.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from a2amesh.jsontext import JsonValue
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.engine import Engine
from a2amesh.workflow.graph.definition import GraphDefinition
from a2amesh.workflow.graph.engine import GraphEngine

if TYPE_CHECKING:
    from a2amesh.schedules import ScheduleSpec
    from a2amesh.workflow.dag.nodes import Skill
    from a2amesh.workflow.dag.validation import Issue
    from a2amesh.workflow.engine_protocol import ExecutableEngine

__all__ = [
    "DAG",
    "FORMATS",
    "GRAPH",
    "Definition",
    "Format",
    "Loaded",
    "by_format",
    "LoadedGraph",
    "LoadedWorkflow",
    "format_of",
    "format_of_data",
    "is_graph_document",
    "loaded",
]


class Definition(Protocol):
    """What every format's definition offers (both are frozen pydantic models)."""

    @property
    def name(self) -> str | None:
        """The workflow's name (set once loaded)."""
        ...

    @property
    def description(self) -> str:
        """What the workflow does (its agent card's description)."""
        ...

    @property
    def version(self) -> str | None:
        """The definition's own version (free text)."""
        ...

    @property
    def input_schema(self) -> dict[str, JsonValue] | None:
        """JSON Schema the input must match."""
        ...

    @property
    def output_schema(self) -> dict[str, JsonValue] | None:
        """JSON Schema the output must match."""
        ...

    @property
    def skills(self) -> Sequence[Skill]:
        """Skills for the workflow's agent card (none: a default one)."""
        ...

    @property
    def format(self) -> str:
        """``"dag"``, or the graph's ``"graph"`` / ``"simple"``."""
        ...

    def schedules(self) -> list[tuple[str | None, ScheduleSpec, JsonValue]]:
        """``(branch or None, schedule, input)`` of every part that runs on a schedule of its own."""
        ...

    def to_data(self) -> dict[str, JsonValue]:
        """The definition as canonical plain data (what a snapshot in Redis holds; loads back unchanged)."""
        ...

    def digest(self) -> str:
        """The content hash of :meth:`to_data`."""
        ...


DefinitionT = TypeVar("DefinitionT", WorkflowDefinition, GraphDefinition)


@dataclass(frozen=True)
class Loaded(Generic[DefinitionT]):
    """A definition that loaded without errors (either format).

    Attributes:
        name: the workflow's name (also its agent name on the mesh).
        definition: the validated definition (its ``name`` is set to ``name``).
        warnings: what validation and the file reader warned about.
        source: the file it came from, or ``None`` for data.
        version: its version in the definitions store, when it was read from there.
        mcp_export: whether MCP servers expose it as a tool (the document's ``mcpExport``, seed 004 §6).
    """

    name: str
    definition: DefinitionT
    warnings: tuple[Issue, ...]
    source: Path | None
    version: int | None = None
    mcp_export: bool = True

    @functools.cached_property
    def digest(self) -> str:
        """The definition's content hash (see its ``digest()``), computed once."""
        return self.definition.digest()

    @property
    def format(self) -> Format:
        """The workflow's format."""
        return format_of(self.definition)


@dataclass(frozen=True)
class LoadedWorkflow(Loaded[WorkflowDefinition]):
    """A DAG workflow that loaded without errors."""


@dataclass(frozen=True)
class LoadedGraph(Loaded[GraphDefinition]):
    """A graph workflow (SPEC §6) that loaded without errors; the counterpart of :class:`LoadedWorkflow`."""


@dataclass(frozen=True)
class Format:
    """One workflow format.

    Attributes:
        name: ``"dag"`` or ``"graph"`` (what an engine's ``format`` says; the key of the executor's starters).
        definition: its definition class.
        loaded: its :class:`Loaded` class.
        engine: builds the engine of one of its definitions.
        parse: a definition from canonical data (a snapshot's ``to_data()``), given a source for errors.
    """

    name: str
    definition: type[Any]
    loaded: type[Loaded[Any]]
    engine: Callable[[Any], ExecutableEngine[Any]]
    parse: Callable[[Mapping[str, Any], str], Definition]


DAG = Format(
    "dag",
    WorkflowDefinition,
    LoadedWorkflow,
    Engine,
    lambda data, source: WorkflowDefinition.parse(data, source=source),
)
GRAPH = Format(
    "graph",
    GraphDefinition,
    LoadedGraph,
    GraphEngine,
    lambda data, source: GraphDefinition.model_validate(data),
)
FORMATS: tuple[Format, ...] = (DAG, GRAPH)
"""Every format."""

_GRAPH_KEYS = frozenset({"edges", "entrypointNodeId", "entrypoint_node_id", "branches"})
_GRAPH_FORMATS = frozenset({"graph", "simple"})


def is_graph_document(data: Any) -> bool:
    """Whether parsed data is a graph workflow: a mapping without ``apps`` (a SAM file) that has ``edges``,
    ``entrypointNodeId`` or ``branches``, or says ``format: graph|simple`` (as every graph snapshot does)."""
    if not isinstance(data, Mapping) or "apps" in data:
        return False
    return any(key in data for key in _GRAPH_KEYS) or data.get("format") in _GRAPH_FORMATS


def format_of_data(data: Any) -> Format:
    """The format of a document or of a definition snapshot (the one detector)."""
    return GRAPH if is_graph_document(data) else DAG


def format_of(definition: Definition) -> Format:
    """The format of a definition."""
    return GRAPH if isinstance(definition, GraphDefinition) else DAG


R = TypeVar("R")


def by_format(
    definition: Definition, *, dag: Callable[[WorkflowDefinition], R], graph: Callable[[GraphDefinition], R]
) -> R:
    """``dag(definition)`` or ``graph(definition)``, by the definition's format: how code that differs per format
    (a Mermaid chart, the dashboard's shapes) picks its variant without testing types itself."""
    if isinstance(definition, GraphDefinition):
        return graph(definition)
    assert isinstance(definition, WorkflowDefinition)
    return dag(definition)


def loaded(
    name: str, definition: Definition, warnings: tuple[Issue, ...], source: Path | None, *, mcp_export: bool = True
) -> Loaded[Any]:
    """A loaded workflow of the definition's format."""
    return format_of(definition).loaded(name, definition, warnings, source, mcp_export=mcp_export)
