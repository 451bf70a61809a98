"""The A2A card a workflow publishes: an agent card with the workflow extensions (SPEC §3.7)."""

from __future__ import annotations

from a2amesh.protocol import AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill, codes
from a2amesh.workflow.formats import Definition

__all__ = ["workflow_card"]


def workflow_card(
    name: str,
    definition: Definition,
    namespace: str,
    *,
    digest: str,
    mcp_export: bool = True,
) -> AgentCard:
    """The card of one loaded workflow.

    Extensions: agent type ``workflow``, the input/output schemas, the definition as JSON (with its
    digest) for visualisation, and whether MCP servers expose it (``mcpExport``). Skills come from the
    definition; one default skill otherwise.
    """
    description = (definition.description or f"Workflow {name}").strip()
    skills = [
        AgentSkill(
            id=s.id,
            name=s.name,
            description=s.description,
            tags=s.tags,
            examples=s.examples,
            input_modes=s.input_modes,
            output_modes=s.output_modes,
        )
        for s in definition.skills
    ] or [AgentSkill(id=name, name=name, description=description.splitlines()[0], tags=["workflow"])]
    extensions = [
        AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": "workflow"}),
        AgentExtension(
            uri=codes.EXT_SCHEMAS,
            params={"input_schema": definition.input_schema, "output_schema": definition.output_schema},
        ),
        AgentExtension(uri=codes.EXT_WORKFLOW, params={**definition.to_data(), "digest": digest}),
        AgentExtension(uri=codes.EXT_MCP, params={"export": mcp_export}),
    ]
    return AgentCard(
        name=name,
        description=description,
        version=definition.version or "1.0.0",
        supported_interfaces=[AgentInterface.on_mesh(namespace, name)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extensions=extensions),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=skills,
    )
