"""Per-workflow MCP servers (seed 004 §6): each exported workflow also served alone, with what it calls.

The server of workflow ``W`` lists ``W`` itself and the agents and sub-workflows its nodes name (read from the
definition on ``W``'s card, so folder and stored workflows alike), as far as they are live and exposed as
tools. Its definition — the tools, and when they were generated — is regenerated whenever the card of ``W``
or of one of its callees changes (a definition update publishes a new card), and on demand.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import mcp_types as types

from a2amesh.mcp_server.catalog import Catalog
from a2amesh.protocol import AgentCard, codes

__all__ = ["CALLEE_KEYS", "WorkflowServer", "WorkflowServers", "callees_of"]

CALLEE_KEYS = frozenset({"agent_name", "workflow_name", "agent", "workflowId", "workflow_id", "agentName"})
"""Keys of a workflow definition (either format, as its card carries it) whose string values name a callee."""


def callees_of(card: AgentCard) -> set[str]:
    """The agents and workflows a workflow's definition names (its nodes, fork branches, graph tools, agents)."""
    params = card.extension(codes.EXT_WORKFLOW) or {}
    found: set[str] = set()
    stack: list[Any] = [params]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key in CALLEE_KEYS and isinstance(item, str) and item:
                    found.add(item)
                elif key == "agents" and isinstance(item, dict):
                    found.update(v for v in item.values() if isinstance(v, str) and v)
                else:
                    stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    found.discard(card.name)
    return found


@dataclass(frozen=True)
class WorkflowServer:
    """The generated definition of one workflow's server.

    Attributes:
        id: the workflow (the server is at ``/mcp/{id}``).
        tools: what it lists: the workflow first, then its callees by name.
        generated_at: when these tools were generated.
        fingerprint: a hash of the tools (equal tools, equal fingerprints).
    """

    id: str
    tools: tuple[types.Tool, ...]
    generated_at: datetime
    fingerprint: str

    @property
    def names(self) -> frozenset[str]:
        """The names of its tools."""
        return frozenset(t.name for t in self.tools)

    def tool_data(self) -> list[dict[str, Any]]:
        """Its tools as MCP tool definitions (JSON)."""
        return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in self.tools]


def _fingerprint(tools: Iterable[types.Tool]) -> str:
    body = json.dumps(
        [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools], sort_keys=True, default=str
    )
    return hashlib.sha256(body.encode()).hexdigest()


class WorkflowServers:
    """The per-workflow servers of a mesh, regenerated from the live catalog.

    Args:
        catalog: the mesh tools as they are now (the server's filters and naming applied).
        cards: the live cards by name.
    """

    def __init__(self, catalog: Callable[[], Catalog], cards: Callable[[], dict[str, AgentCard]]) -> None:
        self._catalog = catalog
        self._cards = cards
        self._servers: dict[str, WorkflowServer] = {}

    def _generate(self, workflow: str, catalog: Catalog, cards: dict[str, AgentCard]) -> tuple[types.Tool, ...] | None:
        card = cards.get(workflow)
        if card is None or card.agent_type != "workflow":
            return None
        own = [t.tool for t in catalog.tools.values() if t.agent == workflow]
        if not own:
            return None  # mcpExport: false, or filtered out
        callees = callees_of(card)
        others = sorted((t.tool for t in catalog.tools.values() if t.agent in callees), key=lambda t: t.name)
        return (*own, *others)

    def refresh(self) -> list[str]:
        """Regenerate every server whose tools changed (and forget those of workflows gone); the ids changed."""
        catalog, cards = self._catalog(), self._cards()
        changed: list[str] = []
        now = datetime.now(UTC)
        fresh: dict[str, WorkflowServer] = {}
        for name, card in sorted(cards.items()):
            if card.agent_type != "workflow":
                continue
            tools = self._generate(name, catalog, cards)
            if tools is None:
                continue
            fingerprint = _fingerprint(tools)
            old = self._servers.get(name)
            if old is not None and old.fingerprint == fingerprint:
                fresh[name] = old
                continue
            fresh[name] = WorkflowServer(name, tools, now, fingerprint)
            changed.append(name)
        changed += sorted(set(self._servers) - set(fresh))
        self._servers = fresh
        return changed

    def all(self) -> list[WorkflowServer]:
        """Every per-workflow server, by id, as last generated."""
        return list(self._servers.values())

    def get(self, workflow: str) -> WorkflowServer | None:
        """The server of ``workflow`` as last generated (generated now if it never was); None: no such exported
        workflow is live.

        Only :meth:`refresh` (the server's registry watch) regenerates a known server, so that the watch sees
        every change and tells the sessions.
        """
        server = self._servers.get(workflow)
        return server if server is not None else self.regenerate(workflow)

    def regenerate(self, workflow: str) -> WorkflowServer | None:
        """Generate the server of ``workflow`` again now, whether or not anything changed."""
        tools = self._generate(workflow, self._catalog(), self._cards())
        if tools is None:
            self._servers.pop(workflow, None)
            return None
        server = self._servers[workflow] = WorkflowServer(workflow, tools, datetime.now(UTC), _fingerprint(tools))
        return server
