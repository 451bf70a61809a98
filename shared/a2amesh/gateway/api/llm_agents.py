"""``/api/llm-agents``: LLM agents defined through the API, with versions, restore, enable and disable.

The same routes and answers as ``/api/workflows`` (:func:`~a2amesh.gateway.api.workflows.definitions_router`);
the body is an agent definition with an ``llm:`` block (SPEC §8), served by ``a2amesh llm-host`` (docs/api.md).
"""

from __future__ import annotations

from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.gateway.api.workflows import definitions_router
from a2amesh.manage.definitions import DefinitionService
from a2amesh.manage.llm_agents import LLM_AGENT_DEFINITIONS
from a2amesh.store.definitions import LLM_AGENTS, DefinitionStore
from a2amesh.store.keys import Keys

__all__ = ["llm_agents_of", "router"]


def llm_agents_of(mesh: ApiMesh) -> DefinitionService:
    """The gateway process's LLM-agent definitions service (made on first use)."""
    service = mesh.extras.get("llm_agents")
    if service is None:
        store = DefinitionStore(mesh.redis, Keys(mesh.settings.namespace), kind=LLM_AGENTS)
        registry = mesh.client.registry
        service = mesh.extras["llm_agents"] = DefinitionService(
            store,
            bus=mesh.client.bus,
            known_agents=lambda: [card.name for card in registry.cards()],
            kind=LLM_AGENT_DEFINITIONS,
        )
    assert isinstance(service, DefinitionService)
    return service


router = definitions_router("/api/llm-agents", "llm-agents", "LLM agent", llm_agents_of)
