"""A2A agent cards."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from a2amesh.protocol.base import A2AModel
from a2amesh.protocol.codes import (
    A2A_VERSION,
    EXT_AGENT_TYPE,
    EXT_REMOTE,
    EXT_SCHEMAS,
    EXT_WORKFLOW,
    PROTOCOL_BINDING,
)


class AgentInterface(A2AModel):
    """A transport at which the agent is reachable."""

    url: str
    protocol_binding: str
    tenant: str | None = None
    protocol_version: str = Field(default=A2A_VERSION, description="The A2A version served at this interface.")

    @classmethod
    def on_mesh(cls, namespace: str, name: str) -> AgentInterface:
        """The mesh's own interface of an agent or workflow: ``nats://{namespace}/{name}`` over our binding."""
        return cls(url=f"nats://{namespace}/{name}", protocol_binding=PROTOCOL_BINDING, protocol_version=A2A_VERSION)


class AgentExtension(A2AModel):
    """A protocol extension the agent supports, with its parameters."""

    uri: str
    description: str | None = None
    required: bool | None = None
    params: dict[str, Any] | None = None


class AgentCapabilities(A2AModel):
    """Optional capabilities."""

    streaming: bool | None = None
    push_notifications: bool | None = None
    extensions: list[AgentExtension] | None = None
    extended_agent_card: bool | None = None


class AgentSkill(A2AModel):
    """Something the agent can do."""

    id: str
    name: str
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    examples: list[str] | None = None
    input_modes: list[str] | None = None
    output_modes: list[str] | None = None
    security_requirements: list[dict[str, Any]] | None = Field(
        default=None, description="Security requirements for this skill (A2A ``SecurityRequirement`` objects)."
    )


class AgentProvider(A2AModel):
    """Who runs the agent."""

    url: str
    organization: str


class AgentCardSignature(A2AModel):
    """A JWS signature over the card (RFC 7515, detached payload)."""

    protected: str
    signature: str
    header: dict[str, Any] | None = None


class AgentCard(A2AModel):
    """The self-description an agent publishes."""

    name: str
    description: str = ""
    supported_interfaces: list[AgentInterface] = Field(default_factory=list)
    provider: AgentProvider | None = None
    version: str = "0.0.0"
    documentation_url: str | None = None
    capabilities: AgentCapabilities = Field(default_factory=AgentCapabilities)
    default_input_modes: list[str] = Field(default_factory=lambda: ["text/plain", "application/json"])
    default_output_modes: list[str] = Field(default_factory=lambda: ["text/plain", "application/json"])
    skills: list[AgentSkill] = Field(default_factory=list)
    icon_url: str | None = None
    security_schemes: dict[str, dict[str, Any]] | None = Field(
        default=None, description="Named security schemes (A2A ``SecurityScheme`` objects), passed through as JSON."
    )
    security_requirements: list[dict[str, Any]] | None = Field(
        default=None, description="Security requirements for the whole agent (A2A ``SecurityRequirement`` objects)."
    )
    signatures: list[AgentCardSignature] | None = None

    def extension(self, uri: str) -> dict[str, Any] | None:
        """The params of the extension with this URI, or None when the card does not declare it."""
        for ext in self.capabilities.extensions or []:
            if ext.uri == uri:
                return ext.params or {}
        return None

    @property
    def agent_type(self) -> str:
        """``"agent"`` or ``"workflow"`` (from the agent-type extension; ``"agent"`` when absent)."""
        params = self.extension(EXT_AGENT_TYPE) or {}
        return str(params.get("type", "agent"))

    @property
    def remote_url(self) -> str | None:
        """The URL of a remote agent served through a proxy (the remote extension), else None."""
        url = (self.extension(EXT_REMOTE) or {}).get("url")
        return url if isinstance(url, str) else None

    @property
    def input_schema(self) -> dict[str, Any] | None:
        """The input JSON Schema from the schemas extension."""
        schema = (self.extension(EXT_SCHEMAS) or {}).get("input_schema")
        return schema if isinstance(schema, dict) else None

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The output JSON Schema from the schemas extension."""
        schema = (self.extension(EXT_SCHEMAS) or {}).get("output_schema")
        return schema if isinstance(schema, dict) else None

    @property
    def workflow_definition(self) -> dict[str, Any] | None:
        """The workflow definition a workflow's card carries, for visualisation."""
        return self.extension(EXT_WORKFLOW)
