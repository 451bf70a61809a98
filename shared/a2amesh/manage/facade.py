"""One process's management services, made once from its mesh client and Redis connection.

The HTTP API, the dashboard and the MCP server each serve these over their own surface; building them here
means every surface reads and writes through the same stores, configured the same way.
"""

from __future__ import annotations

from functools import cached_property

from a2amesh.client import Client
from a2amesh.manage.definitions import WORKFLOW_DEFINITIONS, DefinitionKind, DefinitionService
from a2amesh.manage.executions import Executions
from a2amesh.manage.llm_agents import LLM_AGENT_DEFINITIONS
from a2amesh.manage.memory import MemoryService
from a2amesh.manage.remotes import Remotes
from a2amesh.manage.runs import Runs
from a2amesh.manage.schedules import Schedules
from a2amesh.remote.declare import RemoteStore
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.definitions import DefinitionStore
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.memory import MemoryStore
from a2amesh.store.redis import Redis
from a2amesh.store.schedules import ScheduleStore

__all__ = ["Management"]


class Management:
    """The definitions, executions, runs, memory, remotes and schedules of a mesh, each made on first use.

    Args:
        client: a started mesh client (its bus, registry and settings).
        redis: a Redis connection to the mesh's store.
    """

    def __init__(self, client: Client, redis: Redis) -> None:
        self.client = client
        self.redis = redis
        self.keys = Keys(client.settings.namespace)

    def _definitions(self, kind: DefinitionKind) -> DefinitionService:
        registry = self.client.registry
        return DefinitionService(
            DefinitionStore(self.redis, self.keys, kind=kind.store_kind),
            bus=self.client.bus,
            known_agents=lambda: [card.name for card in registry.cards()],
            kind=kind,
        )

    @cached_property
    def workflows(self) -> DefinitionService:
        """Workflow definitions: versions, validation, publishing."""
        return self._definitions(WORKFLOW_DEFINITIONS)

    @cached_property
    def llm_agents(self) -> DefinitionService:
        """LLM-agent definitions."""
        return self._definitions(LLM_AGENT_DEFINITIONS)

    @cached_property
    def execution_store(self) -> ExecutionStore:
        """The namespace's execution records (one per process: it keeps a connection of its own)."""
        return ExecutionStore.for_settings(self.redis, self.client.settings)

    @cached_property
    def artifacts(self) -> ArtifactStore:
        """The namespace's artifacts."""
        return ArtifactStore.for_settings(self.redis, self.client.settings)

    @cached_property
    def executions(self) -> Executions:
        """Reads executions: pages, one execution, its nodes, counts."""
        return Executions(self.execution_store)

    @cached_property
    def runs(self) -> Runs:
        """Starts and steers executions (run, retry, cancel, review)."""
        return Runs(self.client, self.executions)

    @cached_property
    def memory(self) -> MemoryService:
        """Agents' long-term memory entries."""
        return MemoryService(MemoryStore(self.redis, self.keys), self.client)

    @cached_property
    def remotes(self) -> Remotes:
        """Remote agents declared through the management API (each change announced to their proxies)."""
        return Remotes(RemoteStore(self.redis, self.client.settings.namespace), self.client.bus)

    @cached_property
    def schedules(self) -> Schedules:
        """Workflow schedules: list, pause, resume, delete."""
        return Schedules(ScheduleStore(self.redis, self.keys), self.client.registry)

    async def aclose(self) -> None:
        """Close what the services opened (not the client or the Redis connection they were given)."""
        if "execution_store" in self.__dict__:
            await self.execution_store.aclose()
