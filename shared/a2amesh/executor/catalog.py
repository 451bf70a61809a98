"""The executor's workflow definitions: a folder of YAML/JSON files, versioned by content hash, hot-reloaded,
and the workflows of the definitions store (:mod:`a2amesh.executor.stored`), which win over a file's of
the same name.

A scan reads every ``*.yaml``, ``*.yml`` and ``*.json`` file whose size or mtime changed since the last
scan. A file that no longer loads keeps its last good definitions (the error is reported), so a typo
saved mid-edit never takes a running workflow off the mesh. Each definition is identified by its
content digest; running executions stay on the digest they started with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2amesh.errors import ConfigError
from a2amesh.logs import get_logger
from a2amesh.workflow.engine_protocol import ExecutableEngine
from a2amesh.workflow.formats import Loaded, format_of_data
from a2amesh.workflow.loader import load_file

__all__ = ["Catalog", "CatalogChange"]

log = get_logger("executor.catalog")

SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class CatalogChange:
    """What one scan changed: workflow names added, changed (new digest or ``mcpExport``) and removed; files
    that failed."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


@dataclass
class _File:
    stamp: tuple[int, int]
    names: list[str]


class Catalog:
    """The workflows of a folder, by name, and every engine ever loaded, by digest.

    Args:
        folder: the folder of definition files (not recursive).
        serve_folder: whether the folder's workflows are served; when not (``a2amesh executor`` applies the
            folder into the store and serves the store), scans still track the files, to report changes.
    """

    def __init__(self, folder: Path, *, serve_folder: bool = True) -> None:
        self.folder = folder
        self.serve_folder = serve_folder
        self.workflows: dict[str, Loaded[Any]] = {}
        """What is served: the folder's workflows and the stored ones (a new dict after every change)."""
        self.folder_workflows: dict[str, Loaded[Any]] = {}
        self.stored_workflows: dict[str, Loaded[Any]] = {}
        self._files: dict[Path, _File] = {}
        self._engines: dict[str, ExecutableEngine[Any]] = {}

    def engine(self, digest: str) -> ExecutableEngine[Any] | None:
        """The engine of a definition version seen by this process, if any."""
        return self._engines.get(digest)

    def engine_for(self, workflow: Loaded[Any]) -> ExecutableEngine[Any]:
        """The engine of a loaded workflow (cached by digest): a DAG engine, or a graph engine (SPEC §6)."""
        digest = workflow.digest
        engine = self._engines.get(digest)
        if engine is None:
            engine = self._engines[digest] = workflow.format.engine(workflow.definition)
        return engine

    def from_snapshot(self, digest: str, data: dict[str, Any]) -> ExecutableEngine[Any]:
        """The engine of a definition snapshot read back from Redis (a version this process never loaded),
        cached by digest."""
        engine = self._engines.get(digest)
        if engine is None:
            kind = format_of_data(data)
            engine = kind.engine(kind.parse(data, f"definition {digest[:12]}"))
            self._engines[digest] = engine
        return engine

    def scan(self) -> CatalogChange:
        """Reload changed files; report what changed.

        Raises:
            ConfigError: the folder does not exist.
        """
        if not self.folder.is_dir():
            raise ConfigError(str(self.folder), "", "the workflows folder does not exist")
        change = CatalogChange()
        workflows = dict(self.folder_workflows)  # built aside and swapped in: readers on the loop see old or new
        present = {p for p in self.folder.iterdir() if p.suffix in SUFFIXES and p.is_file()}
        for path in sorted(set(self._files) - present):
            for name in self._files.pop(path).names:
                if workflows.pop(name, None) is not None:
                    change.removed.append(name)
        for path in sorted(present):
            self._scan_file(path, workflows, change)
        self.folder_workflows = workflows
        return self._merge(change.errors)

    def set_stored(self, stored: dict[str, Loaded[Any]]) -> CatalogChange:
        """Replace the stored workflows (enabled ones, by id); report what changed in what is served."""
        for workflow in stored.values():
            self.engine_for(workflow)
        self.stored_workflows = stored
        return self._merge({})

    def _merge(self, errors: dict[str, str]) -> CatalogChange:
        before = self.workflows
        merged = {**(self.folder_workflows if self.serve_folder else {}), **self.stored_workflows}
        change = CatalogChange(errors=errors)
        change.removed = sorted(set(before) - set(merged))
        for name, workflow in sorted(merged.items()):
            old = before.get(name)
            if old is None:
                change.added.append(name)
            elif old.digest != workflow.digest or old.mcp_export != workflow.mcp_export:
                change.changed.append(name)
        self.workflows = merged
        return change

    def _scan_file(self, path: Path, workflows: dict[str, Loaded[Any]], change: CatalogChange) -> None:
        try:
            st = path.stat()
        except OSError:
            return
        stamp = (st.st_mtime_ns, st.st_size)
        known = self._files.get(path)
        if known is not None and known.stamp == stamp:
            return
        try:
            loaded = list(load_file(path))
        except (ConfigError, OSError, ValueError) as e:
            change.errors[str(path)] = str(e)
            log.error("workflow.load_failed", file=str(path), error=str(e))
            if known is not None:
                known.stamp = stamp  # keep the last good version until the file is fixed
            else:
                self._files[path] = _File(stamp, [])
            return
        names = [w.name for w in loaded]
        for name in known.names if known else []:
            if name not in names and workflows.pop(name, None) is not None:
                change.removed.append(name)
        for workflow in loaded:
            owner = self._owner(workflow.name, workflows)
            if owner is not None and owner != path:
                change.errors[str(path)] = f"workflow {workflow.name!r} is already defined in {owner}"
                log.error("workflow.duplicate_name", file=str(path), name=workflow.name, other=str(owner))
                names.remove(workflow.name)
                continue
            before = workflows.get(workflow.name)
            workflows[workflow.name] = workflow
            self.engine_for(workflow)
            if before is None:
                change.added.append(workflow.name)
            elif before.digest != workflow.digest or before.mcp_export != workflow.mcp_export:
                change.changed.append(workflow.name)
            for warning in workflow.warnings:
                log.warning("workflow.warning", workflow=workflow.name, warning=str(warning))
        self._files[path] = _File(stamp, names)

    def _owner(self, name: str, workflows: dict[str, Loaded[Any]]) -> Path | None:
        for path, known in self._files.items():
            if name in known.names and name in workflows:
                return path
        return None
