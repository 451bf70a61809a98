"""``/api/llm-agents``: LLM agents defined through the API, with versions, restore, enable and disable.

The same routes and answers as ``/api/workflows`` (:func:`~a2amesh.gateway.api.workflows.definitions_router`);
the body is an agent definition with an ``llm:`` block (SPEC §8), served by ``a2amesh llm-host`` (docs/api.md).
"""

from __future__ import annotations

from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.gateway.api.workflows import definitions_router
from a2amesh.manage.definitions import DefinitionService

__all__ = ["llm_agents_of", "router"]


def llm_agents_of(mesh: ApiMesh) -> DefinitionService:
    """The gateway process's LLM-agent definitions service."""
    return mesh.manage.llm_agents


router = definitions_router("/api/llm-agents", "llm-agents", "LLM agent", llm_agents_of)
