"""A remote agent's card: fetched over HTTP, checked, and turned into the card the mesh publishes.

Every way a card can be unusable ends as one :class:`~a2amesh.errors.RemoteError` naming the URL and the problem:
unreachable, an HTTP error, not JSON, not an agent card, no interface the proxy speaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.client.card_resolver import parse_agent_card
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import ParseError

from a2amesh.errors import RemoteError
from a2amesh.protocol import AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill, codes
from a2amesh.remote.convert import to_json
from a2amesh.remote.spec import TRANSPORTS, RemoteSpec

__all__ = ["RemoteCard", "card_url", "fetch_card", "mesh_card", "mesh_name"]

WELL_KNOWN = "/.well-known/agent-card.json"
LEGACY_WELL_KNOWN = "/.well-known/agent.json"


@dataclass(frozen=True)
class RemoteCard:
    """A remote's card as fetched (the SDK's, to build its client) and what the proxy chose of it."""

    card: pb.AgentCard
    url: str
    binding: str
    version: str

    def same_as(self, other: RemoteCard) -> bool:
        """Whether nothing the mesh publishes or forwards with changed."""
        return self.card.SerializeToString(deterministic=True) == other.card.SerializeToString(deterministic=True)


def card_url(url: str) -> list[str]:
    """Where to look for the card: the URL itself when it names a ``.json`` document, else the well-known paths."""
    if url.split("?", 1)[0].endswith(".json"):
        return [url]
    base = url.rstrip("/")
    return [base + WELL_KNOWN, base + LEGACY_WELL_KNOWN]


async def fetch_card(http: httpx.AsyncClient, spec: RemoteSpec) -> RemoteCard:
    """Fetch and check the remote's card.

    Raises:
        RemoteError: naming ``spec.url`` and what is wrong.
    """
    candidates = card_url(spec.url)
    response: httpx.Response | None = None
    for where in candidates:
        try:
            response = await http.get(where, headers={"Accept": "application/json"})
        except httpx.TimeoutException as e:
            raise RemoteError(spec.url, f"unreachable: no answer from {where} ({type(e).__name__})") from e
        except httpx.HTTPError as e:
            raise RemoteError(spec.url, f"unreachable: {_reason(e)}") from e
        if response.status_code != 404:
            break
    assert response is not None
    if response.status_code != 200:
        raise RemoteError(spec.url, f"the card request to {response.request.url} answered HTTP {response.status_code}")
    try:
        data = response.json()
    except ValueError as e:
        kind = response.headers.get("content-type", "no content type")
        raise RemoteError(spec.url, f"not an A2A agent: the card at {response.request.url} is not JSON ({kind})") from e
    return check_card(data, spec)


def check_card(data: Any, spec: RemoteSpec) -> RemoteCard:
    """Check a decoded card and choose the interface to forward to.

    Raises:
        RemoteError: it is not an agent card, or offers no JSON-RPC or HTTP+JSON interface the proxy speaks.
    """
    if not isinstance(data, dict) or "name" not in data or not ({"supportedInterfaces", "url"} & data.keys()):
        raise RemoteError(spec.url, "not an A2A agent card: it has no name and no interfaces (url)")
    try:
        card = parse_agent_card(dict(data))
    except (ParseError, ValueError, TypeError) as e:
        raise RemoteError(spec.url, f"not a valid A2A agent card: {e}") from e
    if not card.name:
        raise RemoteError(spec.url, "not a valid A2A agent card: its name is empty")
    wanted = [spec.transport] if spec.transport else list(TRANSPORTS)
    offered = [i for i in card.supported_interfaces if i.protocol_binding in wanted and i.url]
    if not offered:
        have = sorted({i.protocol_binding or "(none)" for i in card.supported_interfaces}) or ["none"]
        raise RemoteError(spec.url, f"the card offers no {' or '.join(wanted)} interface (it offers {', '.join(have)})")
    for i in offered:
        if not i.url.startswith(("http://", "https://")):
            raise RemoteError(spec.url, f"the card's {i.protocol_binding} interface URL {i.url!r} is not HTTP")
    first = offered[0]
    return RemoteCard(card=card, url=first.url, binding=first.protocol_binding, version=first.protocol_version or "0.3")


def _reason(error: httpx.HTTPError) -> str:
    cause = error.__cause__ or error.__context__
    text = str(error) or str(cause or "") or type(error).__name__
    return text.splitlines()[0]


def mesh_name(spec: RemoteSpec, remote: RemoteCard) -> str:
    """The remote's name in the mesh: the declared one, else the card's with every other character made ``-``."""
    if spec.name:
        return spec.name
    return re.sub(r"[^A-Za-z0-9_-]+", "-", remote.card.name).strip("-") or "remote"


def mesh_card(
    spec: RemoteSpec, remote: RemoteCard, namespace: str, name: str, *, problem: str | None = None
) -> AgentCard:
    """The card the proxy publishes: reachable on the mesh under ``name``, the remote's skills, schemas and
    description carried over, marked remote with its URL and health (the remote extension: ``reachable``, and
    the ``problem`` of the last failed card fetch)."""
    data = to_json(remote.card)
    skills = [AgentSkill.model_validate(s) for s in data.get("skills", [])]
    theirs = _extension(data, codes.EXT_SCHEMAS)
    input_schema = spec.input_schema if spec.input_schema is not None else theirs.get("input_schema")
    output_schema = spec.output_schema if spec.output_schema is not None else theirs.get("output_schema")
    extensions = [
        AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": "agent"}),
        AgentExtension(uri=codes.EXT_SCHEMAS, params={"input_schema": input_schema, "output_schema": output_schema}),
        AgentExtension(
            uri=codes.EXT_REMOTE,
            params={
                "url": spec.url,
                "endpoint": remote.url,
                "binding": remote.binding,
                "version": remote.version,
                "reachable": problem is None,
                **({"problem": problem} if problem is not None else {}),
            },
        ),
    ]
    if not spec.mcp_export:
        extensions.append(AgentExtension(uri=codes.EXT_MCP, params={"export": False}))
    return AgentCard(
        name=name,
        description=spec.description if spec.description is not None else str(data.get("description", "")),
        version=str(data.get("version") or "0.0.0"),
        supported_interfaces=[AgentInterface.on_mesh(namespace, name)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extensions=extensions),
        skills=skills,
        default_input_modes=list(data.get("defaultInputModes") or ["text/plain", "application/json"]),
        default_output_modes=list(data.get("defaultOutputModes") or ["text/plain", "application/json"]),
    )


def _extension(data: dict[str, Any], uri: str) -> dict[str, Any]:
    for ext in (data.get("capabilities") or {}).get("extensions") or []:
        if isinstance(ext, dict) and ext.get("uri") == uri and isinstance(ext.get("params"), dict):
            return dict(ext["params"])
    return {}
