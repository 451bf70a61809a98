"""The import shape of ``shared/a2amesh``: layers, and no cycle between packages.

Every module is parsed with ``ast`` (nothing is imported); every import counts, inside functions and under
``TYPE_CHECKING`` too. A module belongs to the *unit* named by its first component below ``a2amesh``
(``a2amesh.workflow.dag.engine`` → ``workflow``, ``a2amesh.ids`` → ``ids``); the package root
``a2amesh/__init__.py`` is the unit ``a2amesh``. The layer map is data: a new package or module is added to
:data:`LAYERS`. There are no exceptions: a violation is fixed, not listed.
docs/architecture.md draws the same map.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.source import PACKAGE

LAYERS: list[tuple[str, frozenset[str]]] = [
    (
        "foundation",  # pure: models, errors, ids, settings, logging, asyncio helpers, JSON-RPC codec
        frozenset(
            {
                "protocol",
                "errors",
                "ids",
                "jsontext",
                "trusted",
                "enums",
                "config",
                "logs",
                "faults",
                "eventloop",
                "mailbox",
                "lifecycle",
                "rpc",
                "diagnostics",
                "durations",
                "schedules",
                "tracing",
                "otlp_spans",
                "metrics",
            }
        ),
    ),
    ("infrastructure", frozenset({"bus", "store", "servers"})),  # the only importers of nats and redis
    ("workflow", frozenset({"workflow"})),  # definitions and the pure engines (dag/, graph/ included)
    ("mesh client", frozenset({"client", "inbox", "registry"})),  # calling agents, their replies, the card registry
    (
        "workers",
        frozenset({"worker", "agent", "executor", "service", "builtins", "remote"}),
    ),  # processes that serve requests
    ("management", frozenset({"manage"})),  # definitions, executions, reviews: what the API, CLI and MCP share
    ("deployment", frozenset({"access", "provision"})),  # least-privilege server configurations and their secrets
    ("mcp server", frozenset({"mcp_server"})),  # the mesh as MCP tools (stdio, and mounted by the gateway)
    ("http", frozenset({"gateway"})),  # the mesh on the web: A2A over HTTP through the a2a-sdk, calls by Client
    ("local mesh", frozenset({"mesh", "demo"})),  # a whole mesh on one machine (`a2amesh up` / `demo`)
    ("entry points", frozenset({"cli", "__main__", "a2amesh"})),  # the CLI and the public facade
]
"""Units, lowest layer first. A unit may import units of its own layer and of lower layers only."""


SIBLINGS_APART: dict[str, frozenset[str]] = {
    "executor": frozenset({"agent"}),
    "worker": frozenset({"agent", "executor"}),
}
"""Units of one layer that must not import each other: what agents and workflows share as workers lives in
``worker/``, so the executor borrows nothing from the agent."""

SEAMS: dict[str, str] = {"nats": "bus", "redis": "store"}
"""Third-party client → the one unit allowed to import it (STYLE §6: the transport and store seams)."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _imported_names(path: Path, module: str) -> set[str]:
    """Every module name ``module`` imports (``from pkg import mod`` names the submodule when it is ours)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if _is_module(sub) else base)
    return found


def _imports(path: Path, module: str) -> set[str]:
    """The a2amesh modules ``module`` imports."""
    return {name for name in _imported_names(path, module) if name == "a2amesh" or name.startswith("a2amesh.")}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "a2amesh"


def _layer_of() -> dict[str, int]:
    return {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def _edges() -> list[tuple[str, str]]:
    """(importer, imported) module pairs across units."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for target in _imports(path, module):
            if _unit(target) != _unit(module):
                edges.append((module, target))
    return edges


def test_every_unit_has_a_layer() -> None:
    """A new package or top-level module must be placed in the layer map before it can be checked."""
    units = {_unit(_module_name(p)) for p in PACKAGE.rglob("*.py")}
    missing = sorted(units - _layer_of().keys())
    assert not missing, f"add these to LAYERS in tests/unit/test_layers.py (and docs/architecture.md): {missing}"


def test_no_import_from_a_higher_layer() -> None:
    """A lower layer importing a higher one (the store importing the executor…) inverts the design."""
    layer = _layer_of()
    upward = [
        f"{src} ({LAYERS[layer[_unit(src)]][0]}) imports {dst} ({LAYERS[layer[_unit(dst)]][0]})"
        for src, dst in _edges()
        if _unit(src) in layer and _unit(dst) in layer and layer[_unit(dst)] > layer[_unit(src)]
    ]
    assert not upward, "imports into a higher layer:\n" + "\n".join(upward)


def test_siblings_kept_apart_import_nothing_of_each_other() -> None:
    """The executor importing ``agent/`` helpers (results, deltas, control parts) made one worker depend on
    another; what both need is in ``worker/``."""
    crossings = [
        f"{src} imports {dst}" for src, dst in _edges() if _unit(dst) in SIBLINGS_APART.get(_unit(src), frozenset())
    ]
    assert not crossings, "imports between sibling units kept apart:\n" + "\n".join(crossings)


def test_no_import_cycle_between_units() -> None:
    """Two packages importing each other (cli ↔ executor.cli before) cannot be read or tested apart."""
    graph: dict[str, set[str]] = defaultdict(set)
    witness: dict[tuple[str, str], tuple[str, str]] = {}
    for src, dst in _edges():
        graph[_unit(src)].add(_unit(dst))
        witness.setdefault((_unit(src), _unit(dst)), (src, dst))
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    lines = []
    for cycle in cycles:
        for a in sorted(cycle):
            lines += [f"{s} imports {d}" for b in sorted(graph[a] & cycle) for s, d in [witness[(a, b)]]]
    assert not cycles, f"import cycles between units {[sorted(c) for c in cycles]}:\n" + "\n".join(lines)


def test_only_the_seams_import_nats_and_redis() -> None:
    """nats or redis imported outside bus/ or store/ would let transport or store details leak upwards."""
    leaks = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for name in _imported_names(path, module):
            owner = SEAMS.get(name.split(".")[0])
            if owner is not None and _unit(module) != owner:
                leaks.append(f"{module} imports {name} (only {owner}/ may)")
    assert not leaks, "\n".join(leaks)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            found.append(component)

    for v in list(graph):
        if v not in index:
            visit(v)
    return found
