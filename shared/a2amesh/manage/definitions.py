"""Workflow definitions as the management API, the CLI and the MCP server see them (docs/api.md).

:class:`DefinitionService` validates a definition with the loader's own checks, writes it to the
:class:`~a2amesh.store.definitions.DefinitionStore` as a new version and announces the change on NATS
(``{ns}.events.workflow.{id}.created|updated|deleted``, SPEC §9), which every executor replica listens to.
Errors are typed: :class:`InvalidWorkflow` (every problem as ``{path, node, field, message, suggestion}``),
:class:`WorkflowNotFound`, :class:`WorkflowExists` and :class:`StaleWorkflow` (an ``If-Match`` that is
not the current ETag).
"""

from __future__ import annotations

import asyncio
import difflib
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NoReturn, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field

from a2amesh.bus.nats import Bus
from a2amesh.bus.subjects import Subjects
from a2amesh.errors import A2AMeshError, ConfigError
from a2amesh.jsontext import content_digest, dumps_bytes
from a2amesh.logs import get_logger
from a2amesh.store.definitions import (
    META_KEYS,
    WORKFLOWS,
    DefinitionHead,
    DefinitionStore,
    DefinitionVersion,
    NewVersion,
    WriteMode,
    WriteOutcome,
    definition_body,
)
from a2amesh.workflow.dag.validation import Issue
from a2amesh.workflow.loader import check_source, read_document

__all__ = [
    "DEFINITION_EVENTS",
    "WORKFLOW_DEFINITIONS",
    "Applied",
    "DefinitionKind",
    "DefinitionIssue",
    "DefinitionService",
    "InvalidWorkflow",
    "StaleWorkflow",
    "StoredWorkflow",
    "Validated",
    "VersionInfo",
    "WorkflowDetail",
    "WorkflowExists",
    "WorkflowNotFound",
    "WorkflowSummary",
    "WriteResult",
    "parse_body",
    "validate_definition",
]

log = get_logger("manage.definitions")

DEFINITION_EVENTS = ("created", "updated", "deleted")
"""The lifecycle events of a stored definition (SPEC §9)."""

FOLDER_SUFFIXES = (".yaml", ".yml", ".json")
MAX_VALUES = 100_000
"""Most values (mappings, lists, scalars) a definition may hold once YAML aliases are expanded."""
MAX_DEPTH = 64
"""Deepest nesting of a definition."""
_SUGGESTION = re.compile(r"\s*\(did you mean (.+?)\?\)")


class DefinitionIssue(BaseModel):
    """One problem found in a definition."""

    path: str = Field(description="Where: `nodes[id].field`, a document field, or '' for the whole document.")
    node: str | None = Field(None, description="The node at fault, if any.")
    field: str | None = Field(None, description="The field at fault within the node or the workflow, if any.")
    message: str = Field(description="What is wrong, in one line.")
    suggestion: str | None = Field(None, description="A likely fix (the closest known name), if any.")

    @classmethod
    def of(cls, issue: Issue) -> DefinitionIssue:
        """An issue of the loader's checks."""
        match = _SUGGESTION.search(issue.problem)
        message = _SUGGESTION.sub("", issue.problem) if match else issue.problem
        return cls(
            path=issue.location,
            node=issue.node_id or None,
            field=issue.field or None,
            message=message,
            suggestion=match.group(1).strip("'\"") if match else None,
        )


class WriteResult(BaseModel):
    """The answer to a write: the version it made."""

    id: str = Field(description="The workflow's id.")
    version: int = Field(description="The version now current.")
    etag: str = Field(description="That version's ETag (send it as If-Match on the next write).")
    warnings: list[DefinitionIssue] = Field(default_factory=list, description="What validation warned about.")


class WorkflowSummary(BaseModel):
    """One stored workflow in a listing."""

    model_config = ConfigDict(populate_by_name=True)

    id: str = Field(description="The workflow's id (its agent name on the mesh).")
    name: str = Field(description="The name the definition gives.")
    description: str | None = Field(None, description="The definition's description.")
    format: str = Field(description="dag, graph (seed 000) or simple (seed 003).")
    version: int = Field(description="The current version.")
    etag: str = Field(description="The current version's ETag.")
    enabled: bool = Field(description="Whether executors serve it.")
    mcp_export: bool = Field(alias="mcpExport", description="Whether the MCP server exposes it.")
    updated_at: str = Field(description="When it last changed (ISO 8601).")

    @classmethod
    def of(cls, head: DefinitionHead) -> WorkflowSummary:
        return cls(
            id=head.id,
            name=head.name,
            description=head.description,
            format=head.format,
            version=head.version,
            etag=head.etag,
            enabled=head.enabled,
            mcp_export=head.mcp_export,
            updated_at=head.updated_at,
        )


class WorkflowDetail(WorkflowSummary):
    """One version of a stored workflow with its definition."""

    current_version: int = Field(description="The workflow's current version (``version`` may be older).")
    created_at: str = Field(description="When this version was written.")
    author: str | None = Field(None, description="Who wrote this version (API key id).")
    message: str | None = Field(None, description="What the author said about it.")
    definition: dict[str, Any] = Field(description="The definition, exactly as written.")

    @classmethod
    def of_stored(cls, stored: StoredWorkflow) -> WorkflowDetail:
        head, record = stored.head, stored.version
        return cls(
            id=head.id,
            name=record.name,
            description=record.description,
            format=record.format,
            version=record.version,
            etag=record.etag,
            enabled=head.enabled,
            mcp_export=head.mcp_export,
            updated_at=head.updated_at,
            current_version=head.version,
            created_at=record.created_at,
            author=record.author,
            message=record.message,
            definition=stored.document,
        )


class VersionInfo(BaseModel):
    """One version in a workflow's history."""

    version: int
    created_at: str
    author: str | None = None
    message: str | None = None
    etag: str
    digest: str = Field(description="Content digest of the version's document (equal documents, equal digests).")

    @classmethod
    def of(cls, record: DefinitionVersion) -> VersionInfo:
        return cls(
            version=record.version,
            created_at=record.created_at,
            author=record.author,
            message=record.message,
            etag=record.etag,
            digest=record.digest,
        )


class InvalidWorkflow(A2AMeshError, ValueError):
    """A definition that cannot be stored; every problem is in ``errors``."""

    def __init__(self, errors: list[DefinitionIssue]) -> None:
        self.errors = errors
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"{first.path}: {first.message}{more}" if first.path else f"{first.message}{more}")


class WorkflowNotFound(A2AMeshError, LookupError):
    """No stored workflow (or version) of that id."""

    def __init__(self, workflow_id: str, version: int | None = None, *, noun: str = "workflow") -> None:
        self.workflow_id = workflow_id
        self.version = version
        what = f"{noun} {workflow_id!r}" + (f" has no version {version}" if version is not None else " not found")
        super().__init__(what)


class WorkflowExists(A2AMeshError):
    """Creating a workflow whose id is already live."""

    def __init__(self, head: DefinitionHead, *, noun: str = "workflow") -> None:
        self.head = head
        super().__init__(f"{noun} {head.id!r} already exists (version {head.version}); update it with PUT")


class StaleWorkflow(A2AMeshError):
    """An ``If-Match`` ETag that is not the workflow's current one (someone wrote since it was read)."""

    def __init__(self, workflow_id: str, given: str, current: str | None, *, noun: str = "workflow") -> None:
        self.current = current
        now = f"the current ETag is {current}" if current else f"the {noun} does not exist"
        super().__init__(f"{noun} {workflow_id!r}: If-Match {given} is stale; {now}")


@dataclass(frozen=True)
class Validated:
    """A definition that passed validation."""

    id: str
    name: str
    description: str | None
    format: str
    digest: str
    warnings: list[DefinitionIssue]
    enabled: bool | None
    mcp_export: bool | None


@dataclass(frozen=True)
class StoredWorkflow:
    """One version of a stored workflow: its head, the version's record and its document."""

    head: DefinitionHead
    version: DefinitionVersion
    document: Any


@dataclass(frozen=True)
class Applied:
    """What applying one definition did (``a2amesh workflows apply``)."""

    id: str
    outcome: Literal["created", "updated", "unchanged"]
    result: WriteResult


def parse_body(body: bytes, content_type: str) -> Any:
    """A request body as data: YAML for ``application/yaml`` (and ``text/yaml``, ``*+yaml``), else JSON.

    YAML bodies are read with the safe loader only (no ``!include``: a body never reads the server's files).
    A document is at most :data:`MAX_DEPTH` deep and holds at most :data:`MAX_VALUES` values once its YAML
    aliases are expanded (a few lines of nested aliases can otherwise stand for billions of values).

    Raises:
        InvalidWorkflow: the body is not valid JSON / YAML, or too deep or too large.
    """
    media = content_type.split(";")[0].strip().lower()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidWorkflow([DefinitionIssue(path="", message=f"the body is not UTF-8 text: {e}")]) from None
    try:
        data = _parse_yaml(text) if "yaml" in media else _parse_json(text)
    except RecursionError:
        _too_big(f"the document nests deeper than {MAX_DEPTH} levels")
    _check_size(data)
    return data


def _too_big(message: str) -> NoReturn:
    raise InvalidWorkflow([DefinitionIssue(path="", message=message)])


def _parse_yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        message = f"YAML error{where}: {e.problem or e.context}"
        raise InvalidWorkflow([DefinitionIssue(path="", message=message)]) from None
    except yaml.YAMLError as e:
        raise InvalidWorkflow([DefinitionIssue(path="", message=f"YAML error: {e}")]) from None


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        message = f"JSON error at line {e.lineno}, column {e.colno}: {e.msg}"
        raise InvalidWorkflow([DefinitionIssue(path="", message=message)]) from None


def _check_size(data: Any) -> None:
    """Count values depth-first without recursion, stopping at the first limit passed."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            _too_big(f"the document holds more than {MAX_VALUES} values (YAML aliases expanded)")
        if depth > MAX_DEPTH:
            _too_big(f"the document nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _given_id(document: dict[str, Any]) -> str | None:
    for key in ("id", "name"):
        value = document.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def validate_definition(
    document: Any, *, workflow_id: str | None = None, known_agents: Collection[str] | None = None
) -> Validated:
    """Check ``document`` with the loader's own checks, as a write would.

    Args:
        document: the parsed definition (its top-level ``enabled`` / ``mcpExport`` are settings, checked
            apart from the definition).
        workflow_id: the id it must have (a PUT's path), if any; else the definition's ``id``, else ``name``.
        known_agents: live agent and workflow names, for unknown-agent warnings (``None``: no check).

    Raises:
        InvalidWorkflow: with every error found.
    """
    if not isinstance(document, dict):
        kind = "null" if document is None else type(document).__name__
        message = f"expected a mapping (a workflow definition), got {kind}"
        raise InvalidWorkflow([DefinitionIssue(path="", message=message)])
    errors = [
        DefinitionIssue(path=key, field=key, message=f"{key} must be true or false")
        for key in META_KEYS
        if key in document and not isinstance(document[key], bool)
    ]
    given = _given_id(document)
    if workflow_id is not None and given is not None and given != workflow_id:
        key = "id" if isinstance(document.get("id"), str) and document.get("id") else "name"
        message = f"the definition's {key} {given!r} is not the id in the path, {workflow_id!r}"
        errors.append(DefinitionIssue(path=key, field=key, message=message))
    if errors:
        raise InvalidWorkflow(errors)
    try:
        checked = check_source(definition_body(document), name=given or workflow_id, known_agents=known_agents)
    except ConfigError as e:
        raise InvalidWorkflow([DefinitionIssue(path=e.field, field=e.field or None, message=e.problem)]) from None
    if len(checked) > 1:
        names = ", ".join(c.name for c in checked)
        message = f"the document holds {len(checked)} workflows ({names}); store one per request"
        raise InvalidWorkflow([DefinitionIssue(path="apps", field="apps", message=message)])
    item = checked[0]
    if workflow_id is not None and item.name != workflow_id:
        message = f"the definition's workflow is named {item.name!r}, not {workflow_id!r} (the id in the path)"
        raise InvalidWorkflow([DefinitionIssue(path="name", field="name", message=message)])
    if item.report.errors:
        raise InvalidWorkflow([DefinitionIssue.of(i) for i in item.report.errors])
    definition = item.definition
    assert definition is not None
    given_name = document.get("name")
    name = given_name if isinstance(given_name, str) and given_name else item.name
    description = definition.description if isinstance(definition.description, str) else None
    return Validated(
        id=item.name,
        name=name,
        description=description,
        format=definition.format,
        digest=content_digest(document),
        warnings=[DefinitionIssue.of(i) for i in item.report.warnings],
        enabled=document.get("enabled"),
        mcp_export=document.get("mcpExport"),
    )


class Validator(Protocol):
    """Checks a document of one kind (:func:`validate_definition` for workflows)."""

    def __call__(
        self, document: Any, *, workflow_id: str | None = None, known_agents: Collection[str] | None = None
    ) -> Validated: ...


@dataclass(frozen=True)
class DefinitionKind:
    """What differs between the kinds of stored definitions: the store's kind, the noun, the checks, the events.

    Attributes:
        store_kind: the :class:`~a2amesh.store.definitions.DefinitionStore` kind.
        noun: what errors call one (``workflow``, ``LLM agent``).
        validate: the checks of a document.
        event_subject: ``(subjects, id, event)`` → the subject of its lifecycle event.
    """

    store_kind: str
    noun: str
    validate: Validator
    event_subject: Callable[[Subjects, str, str], str]


WORKFLOW_DEFINITIONS = DefinitionKind(
    WORKFLOWS, "workflow", validate_definition, lambda subjects, id_, event: subjects.workflow_event(id_, event)
)


class DefinitionService:
    """Create, update, read, version, restore and delete stored definitions (workflows by default).

    Args:
        store: the definitions store (of the kind's ``store_kind``).
        bus: where lifecycle events go (``None``: no events; servers then find changes on their reconcile).
        known_agents: names of the live agents and workflows, for unknown-agent warnings (``None``: no check).
        kind: what is stored (:data:`WORKFLOW_DEFINITIONS`, or LLM agents from :mod:`a2amesh.manage.llm_agents`).
    """

    def __init__(
        self,
        store: DefinitionStore,
        *,
        bus: Bus | None = None,
        known_agents: Callable[[], Collection[str]] | None = None,
        kind: DefinitionKind = WORKFLOW_DEFINITIONS,
    ) -> None:
        self.store = store
        self.bus = bus
        self.known_agents = known_agents
        self.kind = kind

    # --- validation ----------------------------------------------------------------------------

    def validate(self, document: Any, *, workflow_id: str | None = None) -> Validated:
        """The kind's checks, with the live agents as known agents."""
        known = self.known_agents() if self.known_agents is not None else None
        return self.kind.validate(document, workflow_id=workflow_id, known_agents=known)

    # --- writes --------------------------------------------------------------------------------

    async def _write(
        self,
        document: Any,
        checked: Validated,
        *,
        mode: WriteMode,
        author: str | None,
        message: str | None,
        if_match: str | None,
    ) -> tuple[WriteOutcome, WriteResult]:
        meta = NewVersion(
            name=checked.name,
            description=checked.description,
            format=checked.format,
            digest=checked.digest,
            author=author,
            message=message,
        )
        outcome = await self.store.write(
            checked.id,
            document,
            meta,
            mode=mode,
            if_match=if_match,
            enabled=checked.enabled,
            mcp_export=checked.mcp_export,
        )
        head = self._check(checked.id, outcome, if_match)
        result = WriteResult(id=head.id, version=head.version, etag=head.etag, warnings=checked.warnings)
        return outcome, result

    def _check(self, workflow_id: str, outcome: WriteOutcome, if_match: str | None) -> DefinitionHead:
        head, noun = outcome.head, self.kind.noun
        if outcome.outcome == "stale":
            current = head.etag if head and not head.deleted else None
            raise StaleWorkflow(workflow_id, if_match or "", current, noun=noun)
        if outcome.outcome == "exists" and head is not None:
            raise WorkflowExists(head, noun=noun)
        if outcome.outcome == "missing" or head is None:
            raise self._missing(workflow_id)
        return head

    def _missing(self, workflow_id: str, version: int | None = None) -> WorkflowNotFound:
        return WorkflowNotFound(workflow_id, version, noun=self.kind.noun)

    async def create(self, document: Any, *, author: str | None = None, message: str | None = None) -> WriteResult:
        """Store a new workflow (version 1, or the next version of a deleted one).

        Raises:
            InvalidWorkflow, WorkflowExists.
        """
        checked = self.validate(document)
        _, result = await self._write(document, checked, mode="create", author=author, message=message, if_match=None)
        await self._announce(result.id, "created", result.version, result.etag, author)
        return result

    async def put(
        self,
        workflow_id: str,
        document: Any,
        *,
        author: str | None = None,
        message: str | None = None,
        if_match: str | None = None,
    ) -> tuple[WriteResult, bool]:
        """Create or update ``workflow_id``; the result and whether it was created.

        Raises:
            InvalidWorkflow, StaleWorkflow.
        """
        checked = self.validate(document, workflow_id=workflow_id)
        before = await self.store.head(workflow_id)
        _, result = await self._write(document, checked, mode="put", author=author, message=message, if_match=if_match)
        event = "updated" if before is not None else "created"
        await self._announce(result.id, event, result.version, result.etag, author)
        return result, before is None

    async def apply(
        self, document: Any, *, workflow_id: str | None = None, author: str | None = None, message: str | None = None
    ) -> Applied:
        """Upsert by id, writing nothing when the current version has the same content (``workflows apply``)."""
        checked = self.validate(document, workflow_id=workflow_id)
        before = await self.store.head(checked.id)
        outcome, result = await self._write(
            document, checked, mode="apply", author=author, message=message, if_match=None
        )
        if outcome.outcome == "unchanged":
            return Applied(checked.id, "unchanged", result)
        event: Literal["created", "updated"] = "updated" if before is not None else "created"
        await self._announce(result.id, event, result.version, result.etag, author)
        return Applied(checked.id, event, result)

    async def restore(
        self, workflow_id: str, version: int, *, author: str | None = None, if_match: str | None = None
    ) -> WriteResult:
        """Make a new version equal to ``version`` (the workflow must be live).

        Raises:
            WorkflowNotFound, StaleWorkflow.
        """
        if await self.store.head(workflow_id) is None:
            raise self._missing(workflow_id)
        document = await self.store.document(workflow_id, version)
        if document is None:
            raise self._missing(workflow_id, version)
        checked = self.validate(document, workflow_id=workflow_id)
        _, result = await self._write(
            document,
            checked,
            mode="update",
            author=author,
            message=f"restore of version {version}",
            if_match=if_match,
        )
        await self._announce(result.id, "updated", result.version, result.etag, author)
        return result

    async def delete(self, workflow_id: str, *, if_match: str | None = None, author: str | None = None) -> None:
        """Take a workflow off the mesh (its history stays until purged).

        Raises:
            WorkflowNotFound, StaleWorkflow.
        """
        head = self._check(workflow_id, await self.store.delete(workflow_id, if_match=if_match), if_match)
        await self._announce(workflow_id, "deleted", head.version, head.etag, author)

    async def purge(self, workflow_id: str) -> None:
        """Forget a workflow and its whole history (announced as deleted if it was live).

        Raises:
            WorkflowNotFound: nothing is stored under that id.
        """
        head = await self.store.head(workflow_id)
        if not await self.store.purge(workflow_id):
            raise self._missing(workflow_id)
        if head is not None:
            await self._announce(workflow_id, "deleted", head.version, head.etag, None)

    async def set_enabled(
        self, workflow_id: str, enabled: bool, *, if_match: str | None = None, author: str | None = None
    ) -> DefinitionHead:
        """Enable (serve) or disable (stop serving) a workflow; no new version.

        Raises:
            WorkflowNotFound, StaleWorkflow.
        """
        outcome = await self.store.set_flags(workflow_id, enabled=enabled, if_match=if_match)
        head = self._check(workflow_id, outcome, if_match)
        await self._announce(workflow_id, "updated", head.version, head.etag, author)
        return head

    async def _announce(self, workflow_id: str, event: str, version: int, etag: str, author: str | None) -> None:
        if self.bus is None:
            return
        payload = {
            "workflow": workflow_id,
            "event": event,
            "status": event,
            "version": version,
            "etag": etag,
            "author": author,
            "timestamp": _now(),
        }
        try:
            subject = self.kind.event_subject(self.bus.subjects, workflow_id, event)
            await self.bus.publish(subject, dumps_bytes(payload))
        except Exception as e:  # executors reconcile on their own; the write stands
            log.warning("definition.event_failed", workflow=workflow_id, event=event, error=str(e) or type(e).__name__)

    # --- reads ---------------------------------------------------------------------------------

    async def all(self) -> list[DefinitionHead]:
        """Every live workflow's head, by id."""
        return await self.store.heads()

    async def get(self, workflow_id: str, version: int | None = None) -> StoredWorkflow:
        """The current version of a live workflow, or ``version``.

        Raises:
            WorkflowNotFound: no such live workflow, or no such version.
        """
        head = await self.store.head(workflow_id)
        if head is None:
            raise self._missing(workflow_id)
        number = head.version if version is None else version
        record = await self.store.version(workflow_id, number)
        document = await self.store.document(workflow_id, number)
        if record is None or document is None:
            raise self._missing(workflow_id, number)
        return StoredWorkflow(head, record, document)

    async def versions(self, workflow_id: str) -> list[DefinitionVersion]:
        """Every version's record, oldest first.

        Raises:
            WorkflowNotFound: no such live workflow.
        """
        if await self.store.head(workflow_id) is None:
            raise self._missing(workflow_id)
        return await self.store.versions(workflow_id)

    async def diff(self, workflow_id: str, old: int, new: int | None = None) -> str:
        """A unified diff of two versions' documents (as YAML); ``new`` defaults to the current version."""
        a = await self.get(workflow_id, old)
        b = await self.get(workflow_id, new)
        left = yaml.safe_dump(a.document, sort_keys=False, allow_unicode=True).splitlines(keepends=True)
        right = yaml.safe_dump(b.document, sort_keys=False, allow_unicode=True).splitlines(keepends=True)
        return "".join(
            difflib.unified_diff(
                left, right, f"{workflow_id}@v{a.version.version}", f"{workflow_id}@v{b.version.version}"
            )
        )

    # --- folders -------------------------------------------------------------------------------

    async def apply_path(self, path: Path, *, author: str | None = None) -> list[Applied | tuple[str, str]]:
        """Apply a file, or every definition file of a folder (not recursive), into the store by id.

        Returns:
            Per workflow, what happened; ``(file, error)`` for a file or workflow that could not be applied
            (the others still are).
        """
        if await asyncio.to_thread(path.is_dir):
            files = sorted(
                p for p in await asyncio.to_thread(lambda: list(path.iterdir())) if p.suffix in FOLDER_SUFFIXES
            )
        else:
            files = [path]
        done: list[Applied | tuple[str, str]] = []
        for file in files:
            try:
                document, _ = await asyncio.to_thread(read_document, file)
                names: list[str | None] = (
                    [c.name for c in check_source(definition_body(document), default_name=file.stem)]
                    if self.kind.store_kind == WORKFLOWS
                    else [None]  # one definition per file, named by itself
                )
            except ConfigError as e:
                done.append((str(file), str(e)))
                continue
            if names[0] and isinstance(document, dict) and "apps" not in document and _given_id(document) is None:
                document = {"name": names[0], **document}  # a bare block named by its file: store its name
            for name in names:
                try:
                    done.append(
                        await self.apply(document, workflow_id=name, author=author, message=f"applied {file.name}")
                    )
                except InvalidWorkflow as e:
                    done.append((f"{file} ({name})", str(e)))
        return done
