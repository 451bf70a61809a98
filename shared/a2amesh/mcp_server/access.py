"""Who is using an MCP session, and what they may do: the seam between the server and whoever authenticates.

Over stdio the user is the one who started the process: everything is allowed. Under the gateway, its ASGI
wrapper authenticates the API key and puts the caller in the request's ASGI scope under
:data:`ACCESS_SCOPE_KEY`; the handlers read it from there. Scopes are the gateway's: ``read`` (list and
read), ``run`` (call agents and workflows, cancel runs), ``review`` (answer reviews), ``admin`` (all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

ACCESS_SCOPE_KEY = "a2amesh.mcp.access"
"""The ASGI scope key under which an HTTP mount puts the request's :class:`Access`."""
WORKFLOW_SCOPE_KEY = "a2amesh.mcp.workflow"
"""The ASGI scope key naming the workflow whose own server (``/mcp/{workflow}``) a request is for."""


class Access(Protocol):
    """What the server asks about its caller (the gateway's ``Caller`` has this shape)."""

    @property
    def key_id(self) -> str | None:
        """The caller's identity (sent to callees as ``A2A-User``), or None."""
        ...

    def has_scope(self, scope: str) -> bool:
        """Whether the caller holds ``scope``."""
        ...

    def allows(self, agent: str) -> bool:
        """Whether the caller may call ``agent``."""
        ...


@dataclass(frozen=True)
class LocalUser:
    """The user of a stdio server: may do everything, has no key."""

    key_id: str | None = None

    def has_scope(self, scope: str) -> bool:
        return True

    def allows(self, agent: str) -> bool:
        return True


LOCAL = LocalUser()


@dataclass(frozen=True)
class Nobody:
    """An HTTP request that no authenticating wrapper saw: may do nothing."""

    key_id: str | None = None

    def has_scope(self, scope: str) -> bool:
        return False

    def allows(self, agent: str) -> bool:
        return False


NOBODY = Nobody()


def access_of(request: Any) -> Access:
    """The caller of an MCP request: from the HTTP request's scope (nobody if no wrapper set it), else the local
    user (stdio, where there is no HTTP request)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        found = scope.get(ACCESS_SCOPE_KEY)
        return NOBODY if found is None else found
    return LOCAL


def workflow_of(request: Any) -> str | None:
    """The workflow whose own server an HTTP request is for (None: the whole mesh's server)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        found = scope.get(WORKFLOW_SCOPE_KEY)
        return str(found) if found is not None else None
    return None
