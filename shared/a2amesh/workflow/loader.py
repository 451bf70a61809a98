"""Read workflow definitions from YAML/JSON files or plain data.

Three shapes are recognized:

- a **SAM app config**: a mapping with ``apps``; every app whose ``app_module`` ends in
  ``workflow.app`` holds a workflow in ``app_config.workflow``, named by ``app_config.name``.
  SAM's own settings are honoured as defaults: ``max_workflow_execution_time_seconds`` (workflow
  ``timeout``), ``default_node_timeout_seconds`` (``timeout`` of agent/workflow nodes),
  ``default_max_map_items`` and ``default_max_loop_iterations``;
- an **app config** alone: a mapping with ``name`` and ``workflow``;
- a **bare workflow block**: a mapping with ``nodes``, named by its ``name``, else the ``name``
  argument, else the file's stem;
- a **graph workflow** (SPEC §6, :mod:`a2amesh.workflow.graph.definition`): a mapping with ``edges``,
  ``entrypointNodeId`` or ``branches``, named like a bare block (its ``id`` before the stem); it
  loads as a :class:`LoadedGraph`.

YAML files may use anchors and SAM's ``!include path`` (a line of its own, replaced by the file's
text, resolved relative to the including file; or ``key: !include path`` for one value). A missing
include loads as empty and an alias to an anchor it would have defined loads as an empty mapping;
both are reported as warnings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from a2amesh.errors import ConfigError
from a2amesh.ids import check_name
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.nodes import NODE_TYPES, node_type_name
from a2amesh.workflow.dag.validation import Issue, ValidationReport, validate_data
from a2amesh.workflow.formats import Definition, Loaded, LoadedGraph, LoadedWorkflow, is_graph_document, loaded
from a2amesh.workflow.graph.validation import check_graph

__all__ = [
    "DEFINITION_SUFFIXES",
    "CheckedWorkflow",
    "Loaded",
    "LoadedGraph",
    "LoadedWorkflow",
    "check_file",
    "check_source",
    "declared_agents",
    "definition_files",
    "load_data",
    "load_file",
    "load_workflow",
    "read_document",
]

MCP_EXPORT = "mcpExport"
"""A document's top-level setting: whether MCP servers expose its workflows as tools (default true)."""
_INCLUDE_LINE = re.compile(r"^([ \t]*)!include[ \t]+(.+?)[ \t]*$", re.MULTILINE)
_MAX_INCLUDE_DEPTH = 10
_SAM_DEFAULTS = (
    ("max_workflow_execution_time_seconds", None, "timeout"),
    ("default_node_timeout_seconds", ("agent", "workflow"), "timeout"),
    ("default_max_map_items", ("map",), "max_items"),
    ("default_max_loop_iterations", ("loop",), "max_iterations"),
)


@dataclass(frozen=True)
class CheckedWorkflow:
    """The outcome of checking one workflow, errors included (what ``a2amesh validate`` prints).

    Attributes:
        name: the workflow's name.
        definition: the definition (a graph workflow's for a graph document), or ``None`` when it
            is too broken to build.
        report: every error and warning.
        source: the file it came from, or ``None`` for data.
        mcp_export: the document's top-level ``mcpExport`` (default true).
    """

    name: str
    definition: Definition | None
    report: ValidationReport
    source: Path | None
    mcp_export: bool = True


# --- reading files ---------------------------------------------------------------------------


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that tolerates undefined aliases and redefined anchors, and reads ``!include``."""

    base_dir: Path = Path()
    problems: list[Issue]
    depth: int = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in self.anchors:
                self.get_event()  # type: ignore[no-untyped-call]
                problem = f"alias *{event.anchor} has no anchor (from a missing include?); loaded as an empty mapping"
                if all(issue.problem != problem for issue in self.problems):
                    self.problems.append(Issue("warning", "", "", problem))
                return yaml.MappingNode("tag:yaml.org,2002:map", [])
        else:
            anchor = getattr(event, "anchor", None)
            if anchor is not None:
                # YAML 1.2: a redefined anchor replaces the earlier one (included files may repeat anchors).
                self.anchors.pop(anchor, None)
        return super().compose_node(parent, index)


def _construct_include(loader: _YamlLoader, node: yaml.Node) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(None, None, "!include takes a file path", node.start_mark)
    target = loader.construct_scalar(node).strip().strip("'\"")
    path = _include_path(loader.base_dir, target)
    text = _read_include(path, target, loader.problems)
    if text is None or loader.depth >= _MAX_INCLUDE_DEPTH:
        return None
    return _parse_yaml(text, str(path), path.parent, loader.problems, loader.depth + 1)


_YamlLoader.add_constructor("!include", _construct_include)


def _include_path(base_dir: Path, target: str) -> Path:
    path = Path(target).expanduser()
    return path if path.is_absolute() else base_dir / path


def _read_include(path: Path, target: str, problems: list[Issue]) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.append(Issue("warning", "", "!include", f"{target}: not found at {path}; loaded as empty"))
    except OSError as exc:
        problems.append(
            Issue("warning", "", "!include", f"{target}: cannot read {path} ({exc.strerror}); loaded as empty")
        )
    return None


def _expand_includes(text: str, base_dir: Path, problems: list[Issue], seen: tuple[Path, ...]) -> str:
    """Replace each ``!include path`` line by that file's text, indented like the line."""

    def replace(match: re.Match[str]) -> str:
        indent, target = match.group(1), match.group(2).strip().strip("'\"")
        path = _include_path(base_dir, target)
        resolved = path.resolve()
        if resolved in seen or len(seen) > _MAX_INCLUDE_DEPTH:
            problems.append(Issue("warning", "", "!include", f"{target}: includes itself (or nests too deep); skipped"))
            return ""
        included = _read_include(path, target, problems)
        if included is None:
            return ""
        included = _expand_includes(included, path.parent, problems, (*seen, resolved))
        return "\n".join(indent + line if line.strip() else line for line in included.splitlines())

    return _INCLUDE_LINE.sub(replace, text)


def _parse_yaml(text: str, source: str, base_dir: Path, problems: list[Issue], depth: int = 0) -> Any:
    loader = _YamlLoader(text)
    loader.base_dir = base_dir
    loader.problems = problems
    loader.depth = depth
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(source, "", f"YAML error{where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"YAML error: {exc}") from None
    finally:
        loader.dispose()


def read_document(path: str | Path) -> tuple[Any, list[Issue]]:
    """Read a YAML or JSON file, expanding ``!include`` and tolerating missing includes.

    Args:
        path: the file; ``.json`` files are read as JSON, anything else as YAML.

    Returns:
        The parsed data, and warnings about includes and aliases.

    Raises:
        ConfigError: the file cannot be read or is not valid YAML/JSON.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(file), "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(file), "", f"cannot read: {exc}") from None
    problems: list[Issue] = []
    if file.suffix.lower() == ".json":
        try:
            return json.loads(text), problems
        except json.JSONDecodeError as exc:
            raise ConfigError(
                str(file), "", f"JSON error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
    expanded = _expand_includes(text, file.parent, problems, (file.resolve(),))
    return _parse_yaml(expanded, str(file), file.parent, problems), problems


# --- finding workflows in a document ---------------------------------------------------------


def _is_workflow_app(app: Any) -> bool:
    return isinstance(app, Mapping) and str(app.get("app_module", "")).split(".")[-2:] == ["workflow", "app"]


def declared_agents(data: Any) -> set[str]:
    """Names of the agents and workflows declared by a SAM app config (``apps[].app_config``)."""
    names: set[str] = set()
    apps = data.get("apps") if isinstance(data, Mapping) else None
    for app in apps if isinstance(apps, list) else []:
        config = app.get("app_config") if isinstance(app, Mapping) else None
        if isinstance(config, Mapping):
            for key in ("agent_name", "name"):
                if isinstance(config.get(key), str):
                    names.add(config[key])
                    break
    return names


def _workflow_blocks(data: Any, source: str, name: str | None, default_name: str | None) -> list[tuple[str, Any]]:
    """``(name, workflow block)`` for every workflow in a document."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, "", f"expected a mapping (a workflow or a SAM app config), got {type(data).__name__}")
    if "apps" in data:
        return _sam_blocks(data, source, name)
    if "edges" in data:
        raise ConfigError(source, "", "this is a graph workflow (nodes and edges), not a DAG workflow definition")
    if "workflow" in data and "nodes" not in data:
        block = _apply_sam_defaults(data["workflow"], data)
        return [(_name_of(source, name or data.get("name") or data.get("agent_name"), "name"), block)]
    if "nodes" in data:
        given = data.get("name") if isinstance(data.get("name"), str) else None
        return [(_name_of(source, name or given or default_name, "name"), data)]
    raise ConfigError(source, "", "no workflow found: expected 'nodes' (a workflow), 'workflow' or 'apps' (SAM)")


def _sam_blocks(data: Mapping[str, Any], source: str, name: str | None) -> list[tuple[str, Any]]:
    apps = data["apps"]
    if not isinstance(apps, list):
        raise ConfigError(source, "apps", "expected a list of apps")
    found: list[tuple[str, Any]] = []
    for index, app in enumerate(apps):
        if not _is_workflow_app(app):
            continue
        config = app.get("app_config")
        where = f"apps[{index}].app_config"
        if not isinstance(config, Mapping) or not isinstance(config.get("workflow"), Mapping):
            raise ConfigError(source, f"{where}.workflow", "a workflow app needs app_config.workflow (a mapping)")
        given = config.get("name") or config.get("agent_name") or app.get("name")
        found.append((_name_of(source, given, f"{where}.name"), _apply_sam_defaults(config["workflow"], config)))
    if not found:
        raise ConfigError(source, "apps", "no workflow app (app_module ending in workflow.app) in this file")
    if name is not None:
        found = [pair for pair in found if pair[0] == name]
        if not found:
            raise ConfigError(source, "apps", f"no workflow named {name!r} in this file")
    return found


def _name_of(source: str, value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(source, field, "the workflow has no name (give 'name', or a name to the loader)")
    try:
        return check_name(value, "workflow name")
    except ValueError as exc:
        raise ConfigError(source, field, str(exc)) from None


def _apply_sam_defaults(block: Any, config: Mapping[str, Any]) -> Any:
    """Fill SAM's app-level defaults into fields the workflow block leaves unset."""
    if not isinstance(block, Mapping):
        return block
    result = dict(block)
    nodes = result.get("nodes")
    for setting, node_types, field in _SAM_DEFAULTS:
        value = config.get(setting)
        if value is None:
            continue
        if node_types is None:
            if not _has_field(result, WorkflowDefinition.spellings(), field):
                result[field] = value
        elif isinstance(nodes, list):
            nodes = [_node_default(node, node_types, field, value) for node in nodes]
    if isinstance(nodes, list):
        result["nodes"] = nodes
    return result


def _node_default(node: Any, node_types: tuple[str, ...], field: str, value: Any) -> Any:
    kind = node_type_name(node["type"]) if isinstance(node, Mapping) and isinstance(node.get("type"), str) else None
    if kind not in node_types:
        return node
    if _has_field(node, NODE_TYPES[kind].spellings(), field):
        return node
    return {**node, field: value}


def _has_field(data: Mapping[str, Any], spellings: Mapping[str, str], field: str) -> bool:
    return any(spellings.get(str(key)) == field for key in data)


# --- public entry points ---------------------------------------------------------------------


def check_source(
    data: Any,
    *,
    source: str = "<data>",
    name: str | None = None,
    default_name: str | None = None,
    known_agents: Collection[str] | None = None,
    file_warnings: tuple[Issue, ...] = (),
    path: Path | None = None,
) -> list[CheckedWorkflow]:
    """Find and validate every workflow in parsed data, keeping errors in the reports.

    Args:
        data: a SAM app config, an app config, or a bare workflow block.
        source: named in errors.
        name: for a bare block, its name; for a SAM config, the one workflow to pick.
        default_name: the name of a bare block that has none (a file's stem).
        known_agents: agent and workflow names known to exist (``None``: no agent check).
        file_warnings: warnings from reading the file, added to every report.
        path: the file, recorded in the results.

    Raises:
        ConfigError: no workflow can be found in the data, or its ``mcpExport`` is not a boolean.
    """
    export = True
    if isinstance(data, Mapping) and MCP_EXPORT in data:
        export = data[MCP_EXPORT]
        if not isinstance(export, bool):
            raise ConfigError(source, MCP_EXPORT, f"{MCP_EXPORT} must be true or false")
        data = {k: v for k, v in data.items() if k != MCP_EXPORT}
    if is_graph_document(data):
        given = next((data[k] for k in ("name", "id") if isinstance(data.get(k), str) and data[k]), None)
        graph_name = _name_of(source, name or given or default_name, "name")
        graph, report = check_graph({**data, "name": graph_name}, known_agents=known_agents)
        return [CheckedWorkflow(graph_name, graph, ValidationReport(report.issues + file_warnings), path, export)]
    checked: list[CheckedWorkflow] = []
    for workflow_name, block in _workflow_blocks(data, source, name, default_name):
        if isinstance(block, Mapping):
            block = {**block, "name": workflow_name}
        definition, report = validate_data(block, known_agents=known_agents)
        report = ValidationReport(report.issues + file_warnings)
        checked.append(CheckedWorkflow(workflow_name, definition, report, path, export))
    return checked


DEFINITION_SUFFIXES = (".yaml", ".yml", ".json")
"""The files of a folder of definitions (what the executor and ``workflows apply`` read)."""


def definition_files(path: str | Path) -> list[Path]:
    """``path`` itself, or the definition files directly in a folder, by name (a folder without any: none).

    Raises:
        ConfigError: ``path`` does not exist.
    """
    where = Path(path)
    if where.is_dir():
        return sorted(p for p in where.iterdir() if p.is_file() and p.suffix.lower() in DEFINITION_SUFFIXES)
    if not where.exists():
        raise ConfigError(str(where), "", "no such file or folder")
    return [where]


def check_file(
    path: str | Path, *, name: str | None = None, known_agents: Collection[str] | None = None
) -> list[CheckedWorkflow]:
    """Read a file and validate every workflow in it, keeping errors in the reports (``a2amesh validate``).

    Raises:
        ConfigError: the file cannot be read or parsed, or holds no workflow.
    """
    file = Path(path)
    data, problems = read_document(file)
    return check_source(
        data,
        source=str(file),
        name=name,
        default_name=file.stem,
        known_agents=known_agents,
        file_warnings=tuple(problems),
        path=file,
    )


def _loaded(checked: list[CheckedWorkflow], source: str) -> list[Loaded[Any]]:
    found: list[Loaded[Any]] = []
    for item in checked:
        item.report.raise_for_errors(source if len(checked) == 1 else f"{source} ({item.name})")
        assert item.definition is not None
        found.append(loaded(item.name, item.definition, item.report.warnings, item.source, mcp_export=item.mcp_export))
    return found


def load_file(
    path: str | Path, *, name: str | None = None, known_agents: Collection[str] | None = None
) -> list[Loaded[Any]]:
    """Load every workflow of a YAML/JSON file (several for a SAM file with several workflow apps).

    Args:
        path: the file.
        name: for a bare block, its name (default: its ``name`` field, else the file's stem);
            for a SAM file, the one workflow to load.
        known_agents: agent and workflow names known to exist; others are warned about.

    Raises:
        ConfigError: the file cannot be read or parsed, or holds no workflow.
        InvalidDefinition: a workflow has errors (a :class:`DefinitionError`; all are in ``issues``).
    """
    return _loaded(check_file(path, name=name, known_agents=known_agents), str(path))


def load_data(
    data: Any, *, name: str | None = None, source: str = "<data>", known_agents: Collection[str] | None = None
) -> list[Loaded[Any]]:
    """Load every workflow in already-parsed data (no ``!include``).

    Raises:
        ConfigError: no workflow can be found in the data.
        InvalidDefinition: a workflow has errors.
    """
    return _loaded(check_source(data, source=source, name=name, known_agents=known_agents), source)


def load_workflow(
    source: str | Path | Mapping[str, Any],
    *,
    name: str | None = None,
    known_agents: Collection[str] | None = None,
) -> Loaded[Any]:
    """Load exactly one workflow (DAG or graph) from a file or data.

    Raises:
        ConfigError: there is no workflow, or several and ``name`` does not pick one.
        InvalidDefinition: the workflow has errors.
    """
    if isinstance(source, Mapping):
        found, where = load_data(source, name=name, known_agents=known_agents), "<data>"
    else:
        found, where = load_file(source, name=name, known_agents=known_agents), str(source)
    if len(found) != 1:
        names = ", ".join(item.name for item in found)
        raise ConfigError(where, "", f"{len(found)} workflows found ({names}); name the one to load")
    return found[0]
