"""Stored definitions in Redis — workflows and LLM agents — a head per id and every version as a full snapshot.

- ``{ns}:{defs}:{kind}:heads`` (hash): id → :class:`DefinitionHead` JSON (name, format, current version,
  its ETag, ``enabled``, ``mcpExport``, times; ``deleted`` once deleted, until purged);
- ``{ns}:{defs}:{kind}:versions:{id}`` (hash): ``d:{n}`` the document of version ``n`` exactly as it was
  written (JSON), ``m:{n}`` its :class:`DefinitionVersion` record (author key id, message, time, digest).

``kind`` is :data:`WORKFLOWS` or :data:`LLM_AGENTS`.

Every write is one script (``definition_write.lua``) that checks the caller's ``If-Match`` ETag and the
id's state, numbers the new version and writes head and version together. Version numbers keep counting
after a delete (a workflow created again continues its history), so an ETag is never reused for an id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from a2amesh.jsontext import dumps_text, loads
from a2amesh.logs import get_logger
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis, load_script

__all__ = [
    "LLM_AGENTS",
    "META_KEYS",
    "WORKFLOWS",
    "DefinitionHead",
    "DefinitionStore",
    "DefinitionVersion",
    "NewVersion",
    "WriteMode",
    "WriteOutcome",
    "definition_body",
]

log = get_logger("store.definitions")

WORKFLOWS = "workflows"
LLM_AGENTS = "llm-agents"

META_KEYS = ("enabled", "mcpExport")
"""Top-level keys of a document that are store settings (seed 004's columns), not part of the definition."""

WriteMode = Literal["create", "update", "put", "apply"]
Outcome = Literal["written", "unchanged", "exists", "missing", "stale"]


def definition_body(document: Any) -> Any:
    """The definition the loader reads: ``document`` without its :data:`META_KEYS` (kept as stored)."""
    if isinstance(document, dict) and any(k in document for k in META_KEYS):
        return {k: v for k, v in document.items() if k not in META_KEYS}
    return document


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class DefinitionHead(BaseModel):
    """The current state of one stored workflow."""

    model_config = ConfigDict(populate_by_name=True)

    id: str = Field(description="The workflow's id (its agent name on the mesh).")
    name: str = Field(description="The workflow's name as the definition gives it.")
    description: str | None = Field(None, description="The definition's description.")
    format: str = Field(description="Definition format: dag, graph or simple.")
    digest: str = Field(description="Content digest of the current version's document.")
    version: int = Field(description="The current version (1, 2, …).")
    etag: str = Field(description="The current version's ETag (for If-Match).")
    enabled: bool = Field(True, description="Whether executors serve it.")
    mcp_export: bool = Field(True, alias="mcpExport", description="Whether the MCP server exposes it.")
    created_at: str = Field(description="When it was created (ISO 8601).")
    updated_at: str = Field(description="When it last changed (ISO 8601).")
    deleted: bool = Field(False, description="Deleted: not served, history kept until purged.")


class DefinitionVersion(BaseModel):
    """The record of one version of a workflow (its document is stored beside it)."""

    version: int
    etag: str
    digest: str
    created_at: str
    author: str | None = Field(None, description="The API key id (or the CLI user) that wrote it.")
    message: str | None = Field(None, description="What changed, as the author said.")
    name: str
    description: str | None = None
    format: str


@dataclass(frozen=True)
class NewVersion:
    """What a write stores besides the document."""

    name: str
    description: str | None
    format: str
    digest: str
    author: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class WriteOutcome:
    """The answer of a write: ``outcome`` and the head after it (before it for a refused write; ``None``
    when there is none)."""

    outcome: Outcome
    head: DefinitionHead | None


def _flag(value: bool | None) -> str:
    return "" if value is None else ("1" if value else "0")


class DefinitionStore:
    """The stored definitions of one kind in one namespace.

    Args:
        redis: a Redis client (``decode_responses=True``).
        keys: the namespace's key builder.
        kind: :data:`WORKFLOWS` or :data:`LLM_AGENTS`.
    """

    def __init__(self, redis: Redis, keys: Keys, *, kind: str = WORKFLOWS) -> None:
        self.redis = redis
        self.keys = keys
        self.kind = kind
        self._write = redis.register_script(load_script("definition_write"))

    @staticmethod
    def _head(workflow_id: str, raw: Any) -> DefinitionHead | None:
        if not raw:
            return None
        try:
            return DefinitionHead.model_validate_json(raw)
        except ValidationError as e:
            log.warning("definition.invalid_head", workflow=workflow_id, error=str(e).splitlines()[0])
            return None

    async def heads(self, *, include_deleted: bool = False) -> list[DefinitionHead]:
        """Every stored workflow's head, by id."""
        data = await self.redis.hgetall(self.keys.definition_heads(self.kind))
        heads = [self._head(str(k), v) for k, v in sorted(data.items())]
        return [h for h in heads if h is not None and (include_deleted or not h.deleted)]

    async def head(self, workflow_id: str, *, include_deleted: bool = False) -> DefinitionHead | None:
        """One workflow's head, or ``None`` (deleted ones only with ``include_deleted``)."""
        head = self._head(workflow_id, await self.redis.hget(self.keys.definition_heads(self.kind), workflow_id))
        return head if head is not None and (include_deleted or not head.deleted) else None

    async def document(self, workflow_id: str, version: int) -> Any | None:
        """The document of one version, as written, or ``None``."""
        raw = await self.redis.hget(self.keys.definition_versions(self.kind, workflow_id), f"d:{version}")
        return None if raw is None else loads(raw)

    async def version(self, workflow_id: str, version: int) -> DefinitionVersion | None:
        """The record of one version, or ``None``."""
        raw = await self.redis.hget(self.keys.definition_versions(self.kind, workflow_id), f"m:{version}")
        return None if raw is None else DefinitionVersion.model_validate_json(raw)

    async def versions(self, workflow_id: str) -> list[DefinitionVersion]:
        """Every version's record, oldest first."""
        fields = await self.redis.hkeys(self.keys.definition_versions(self.kind, workflow_id))
        numbers = sorted(int(f[2:]) for f in map(str, fields) if f.startswith("m:") and f[2:].isdigit())
        if not numbers:
            return []
        raws = await self.redis.hmget(
            self.keys.definition_versions(self.kind, workflow_id), [f"m:{n}" for n in numbers]
        )
        return [DefinitionVersion.model_validate_json(r) for r in raws if r is not None]

    async def _call(
        self,
        workflow_id: str,
        mode: str,
        *,
        if_match: str | None = None,
        meta: NewVersion | None = None,
        document: str = "",
        enabled: bool | None = None,
        mcp_export: bool | None = None,
    ) -> WriteOutcome:
        meta_json = "" if meta is None else dumps_text(meta.__dict__)
        args = [workflow_id, mode, if_match or "", _now(), meta_json, _flag(enabled), _flag(mcp_export), document]
        keys = [self.keys.definition_heads(self.kind), self.keys.definition_versions(self.kind, workflow_id)]
        outcome, raw = await self._write(keys=keys, args=args)
        return WriteOutcome(str(outcome), self._head(workflow_id, raw))  # type: ignore[arg-type]

    async def write(
        self,
        workflow_id: str,
        document: Any,
        meta: NewVersion,
        *,
        mode: WriteMode = "put",
        if_match: str | None = None,
        enabled: bool | None = None,
        mcp_export: bool | None = None,
    ) -> WriteOutcome:
        """Store ``document`` as the next version of ``workflow_id``.

        Args:
            mode: ``create`` (``exists`` when live), ``update`` (``missing`` when not live), ``put`` (either),
                ``apply`` (as ``put``, but ``unchanged`` and nothing written when the digest is the current one).
            if_match: the ETag the caller last read (``stale`` when it is not the current one).
            enabled: set ``enabled`` (default: kept; true for a new workflow).
            mcp_export: set ``mcpExport`` (default: kept; true for a new workflow).
        """
        return await self._call(
            workflow_id,
            mode,
            if_match=if_match,
            meta=meta,
            document=dumps_text(document),
            enabled=enabled,
            mcp_export=mcp_export,
        )

    async def delete(self, workflow_id: str, *, if_match: str | None = None) -> WriteOutcome:
        """Take a workflow out of the live set (its versions stay until :meth:`purge`)."""
        return await self._call(workflow_id, "delete", if_match=if_match)

    async def set_flags(
        self,
        workflow_id: str,
        *,
        enabled: bool | None = None,
        mcp_export: bool | None = None,
        if_match: str | None = None,
    ) -> WriteOutcome:
        """Change ``enabled`` / ``mcpExport`` of a live workflow (no new version)."""
        return await self._call(workflow_id, "flags", if_match=if_match, enabled=enabled, mcp_export=mcp_export)

    async def purge(self, workflow_id: str) -> bool:
        """Forget a workflow and its whole history; whether there was one."""
        return (await self._call(workflow_id, "purge")).outcome == "written"
