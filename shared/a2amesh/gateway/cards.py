"""Cards as the gateway serves them, and the ``/agents`` directory built from the live registry.

A card from the registry lists its NATS interface; the gateway replaces it with its JSON-RPC and HTTP+JSON URLs
(an HTTP client can use no other, and some refuse a card listing a ``nats://`` URL: Google ADK), declares the
security schemes the gateway enforces, and never claims what it does not serve (push notifications without the
Redis store, an extended card).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.protocol import AgentCapabilities, AgentCard, AgentInterface, codes

JSONRPC = "JSONRPC"
HTTP_JSON = "HTTP+JSON"
V0_3 = "0.3"


def agent_base(base_url: str, agent: str) -> str:
    """The HTTP+JSON interface URL of ``agent`` (its JSON-RPC URL is this plus ``/``)."""
    return f"{base_url.rstrip('/')}/agents/{agent}"


def card_url(base_url: str, agent: str) -> str:
    """Where the gateway serves ``agent``'s card."""
    return f"{agent_base(base_url, agent)}/.well-known/agent-card.json"


def rewrite_card(
    card: AgentCard,
    base_url: str,
    security: tuple[dict[str, dict[str, Any]], list[dict[str, Any]]] | None,
    *,
    push: bool = False,
    v0_3: bool = True,
) -> AgentCard:
    """The registry's card with the gateway's interfaces and security added; ``push``: whether the gateway
    serves push notifications (it does with its Redis store).

    ``v0_3``: list the A2A 0.3 interfaces too, from which the SDK's card route adds the 0.3 fields (``url``,
    ``preferredTransport``, ``protocolVersion``, ``additionalInterfaces``) that 0.3 clients read. A card request
    without ``A2A-Version`` gets them (A2A 1.0: an absent version means 0.3, and 0.3 clients send none); one
    that asks for ``1.x`` gets the 1.0 card alone (docs/gateway.md "Conformance").
    """
    base = agent_base(base_url, card.name)
    http = [
        AgentInterface(url=f"{base}/", protocol_binding=JSONRPC, protocol_version=codes.A2A_VERSION),
        AgentInterface(url=base, protocol_binding=HTTP_JSON, protocol_version=codes.A2A_VERSION),
    ]
    if v0_3:  # the same endpoints serve A2A 0.3 (the SDK's compat layer)
        http += [
            AgentInterface(url=f"{base}/", protocol_binding=JSONRPC, protocol_version=V0_3),
            AgentInterface(url=base, protocol_binding=HTTP_JSON, protocol_version=V0_3),
        ]
    caps = card.capabilities.model_copy(update={"streaming": True, "push_notifications": push})
    if caps.extended_agent_card:
        caps = caps.model_copy(update={"extended_agent_card": False})
    update: dict[str, Any] = {"supported_interfaces": http, "capabilities": caps}
    if security is not None:
        update["security_schemes"], update["security_requirements"] = security
    return card.model_copy(update=update)


def agent_type(card: AgentCard) -> str:
    """``agent`` or ``workflow``, from the card's agent-type extension."""
    for ext in (card.capabilities or AgentCapabilities()).extensions or []:
        if ext.uri == codes.EXT_AGENT_TYPE and ext.params:
            return str(ext.params.get("type", "agent"))
    return "agent"


class SkillEntry(BaseModel):
    """A skill as the directory lists it."""

    id: str
    name: str
    description: str = ""


class DirectoryEntry(BaseModel):
    """One live agent or workflow in ``GET /agents``."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str
    type: str = Field(description="agent or workflow")
    skills: list[SkillEntry]
    card_url: str = Field(serialization_alias="cardUrl")
    url: str = Field(description="The JSON-RPC interface URL.")


class Directory(BaseModel):
    """The body of ``GET /agents``."""

    agents: list[DirectoryEntry]


def directory(cards: list[AgentCard], base_url: str) -> Directory:
    """The directory of these cards, sorted by name."""
    return Directory(
        agents=[
            DirectoryEntry(
                name=c.name,
                description=c.description,
                type=agent_type(c),
                skills=[SkillEntry(id=s.id, name=s.name, description=s.description) for s in c.skills],
                card_url=card_url(base_url, c.name),
                url=f"{agent_base(base_url, c.name)}/",
            )
            for c in sorted(cards, key=lambda c: c.name)
        ]
    )
