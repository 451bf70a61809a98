"""Memory entries of the memory nodes (seed 004's ``agent_memory``): list, write and delete them, for the API
and the CLI.

Reads and deletes go to the store; a write goes through the ``builtin-memory`` agent like a ``memory_write``
node, so the entry is embedded with the mesh's embedding model and the write is a durable, observable task.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.builtins.memory_events import publish_memory_event
from a2amesh.client import Client, make_message
from a2amesh.manage.failures import InvalidRequest, NotFound, RunsError
from a2amesh.protocol import TaskState
from a2amesh.protocol.states import Instant
from a2amesh.store.memory import MemoryEntry, MemoryStore
from a2amesh.workflow.dag.nodes import BUILTIN_AGENTS

__all__ = ["MemoryItem", "MemoryPage", "MemoryService", "NewMemory"]

MEMORY_AGENT = BUILTIN_AGENTS["memory_write"]
NAME = r"^[A-Za-z0-9_-]+$"


class MemoryItem(BaseModel):
    """One memory entry as the API shows it (its embedding left out)."""

    id: str
    agent: str = Field(description="Whose memory: the memory nodes' agent (by default the workflow's name).")
    user: str | None = Field(None, description="The user it belongs to; none: shared by the agent's users.")
    key: str | None = Field(None, description="Its key in the scope (a write with the same key replaces it).")
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: Instant
    updated_at: Instant

    @classmethod
    def of(cls, entry: MemoryEntry) -> MemoryItem:
        return cls.model_validate(entry.to_json())


class MemoryPage(BaseModel):
    """A list of entries, most recently updated first."""

    items: list[MemoryItem]
    next_cursor: str | None = Field(None, description="Always null: a page holds up to ``limit`` entries.")


class NewMemory(BaseModel):
    """An entry to remember."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=200, pattern=NAME, description="Whose memory.")
    user: str | None = Field(None, min_length=1, max_length=200, description="The user it belongs to.")
    key: str | None = Field(None, min_length=1, max_length=500, description="Replaces the entry with this key.")
    content: str = Field(min_length=1, max_length=100_000)
    metadata: dict[str, Any] | None = None
    model: str | None = Field(None, max_length=200, description="Embedding model (default: the mesh's).")


class MemoryService:
    """Memory entries over the store and the ``builtin-memory`` agent.

    Args:
        store: the memory store.
        client: the mesh client writes go through.
    """

    def __init__(self, store: MemoryStore, client: Client) -> None:
        self.store = store
        self.client = client

    async def list(self, agent: str, *, user: str | None, key: str | None, limit: int) -> MemoryPage:
        """An agent's entries, most recently updated first; ``user`` / ``key`` narrow them down."""
        entries = await self.store.list(agent, user=user, key=key, limit=limit)
        return MemoryPage(items=[MemoryItem.of(e) for e in entries])

    async def get(self, agent: str, entry_id: str) -> MemoryItem:
        """One entry.

        Raises:
            NotFound: no such entry of ``agent``.
        """
        entry = await self.store.get(agent, entry_id)
        if entry is None:
            raise NotFound("memory entry", f"{agent}/{entry_id}")
        return MemoryItem.of(entry)

    async def write(self, new: NewMemory, *, headers: dict[str, str] | None = None) -> tuple[MemoryItem, bool]:
        """Embed and store an entry (replacing the one with the same key); the entry, and whether it replaced one.

        Raises:
            InvalidRequest: the memory agent refused it (e.g. an embedding of another size than the scope's).
            RunsError: the memory agent failed (503 when it is not running).
        """
        request = {"op": "write", **new.model_dump(exclude_none=True)}
        task = await self.client.send(MEMORY_AGENT, make_message(data=request), headers=headers)
        if task.status.state != TaskState.COMPLETED:
            reason = task.status.message.text() if task.status.message else task.status.state.value
            raise InvalidRequest(f"the memory agent refused the entry: {reason}")
        out = task.output()
        if not isinstance(out, dict) or not isinstance(out.get("id"), str):
            raise RunsError(f"the memory agent answered {out!r}, not an entry")
        return await self.get(new.agent, out["id"]), bool(out.get("replaced"))

    async def delete(self, agent: str, entry_id: str) -> None:
        """Forget an entry (and announce ``memory.deleted``).

        Raises:
            NotFound: no such entry of ``agent``.
        """
        entry = await self.store.get(agent, entry_id)
        if entry is None or not await self.store.delete(agent, entry_id):
            raise NotFound("memory entry", f"{agent}/{entry_id}")
        await publish_memory_event(self.client.bus, "deleted", entry)
