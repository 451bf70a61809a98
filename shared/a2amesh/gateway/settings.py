"""Settings of the HTTP gateway: where it listens, its API keys, limits and CORS.

Built once at the edge (``a2amesh gateway``, ``a2amesh up``, ``services/gateway``) by
:meth:`GatewaySettings.load`; the library never reads the environment.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from a2amesh.config import load_settings, split_list, with_secret_files
from a2amesh.errors import ConfigError
from a2amesh.ids import NAME_RE
from a2amesh.mcp_server.settings import McpSettings

ENV_FIELDS: dict[str, str] = {
    "A2AMESH_HTTP_HOST": "host",
    "A2AMESH_HTTP_PORT": "port",
    "A2AMESH_PUBLIC_URL": "public_url",
    "A2AMESH_API_KEYS": "api_keys",
    "A2AMESH_HTTP_INSECURE": "insecure",
    "A2AMESH_CORS_ORIGINS": "cors_origins",
    "A2AMESH_HTTP_MAX_BODY": "max_body_bytes",
    "A2AMESH_RATE_LIMIT": "rate_limit",
    "A2AMESH_EVENTS_KEEPALIVE": "events_keepalive",
    "A2AMESH_PUSH_ALLOW_PRIVATE": "push_allow_private",
    "A2AMESH_TRACE_URL": "trace_url",
}

_HASHED = re.compile(r"sha256:([0-9a-f]{64})")

SCOPES: tuple[str, ...] = ("read", "run", "review", "admin")
"""What a key may do on the management API: ``read`` records, ``run`` (start, cancel, retry) executions,
``review`` (resume paused reviews), ``admin`` (write definitions). ``admin`` implies the others."""


class ApiKey(BaseModel):
    """One API key: its public id, the SHA-256 of its secret, and the agents it may call."""

    model_config = ConfigDict(frozen=True)

    key_id: str = Field(description="The caller's identity: logged, and sent to callees as A2A-User.")
    digest: SecretStr = Field(description="Hex SHA-256 of the secret (never the secret itself).")
    agents: frozenset[str] | None = Field(default=None, description="Agents and workflows allowed; None = all.")
    scopes: frozenset[str] | None = Field(default=None, description="Management API scopes; None = all.")

    def allows(self, agent: str) -> bool:
        """Whether this key may call ``agent``."""
        return self.agents is None or agent in self.agents

    def has_scope(self, scope: str) -> bool:
        """Whether this key may use routes that need ``scope`` (``admin`` grants every scope)."""
        return self.scopes is None or scope in self.scopes or "admin" in self.scopes


def digest(secret: str) -> str:
    """The hex SHA-256 a key is stored and compared as."""
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_api_keys(text: str) -> list[ApiKey]:
    """Parse ``A2AMESH_API_KEYS``: comma-separated ``ID=SECRET[@AGENT|AGENT][#SCOPE|SCOPE]``.

    ``SECRET`` is the key itself or ``sha256:<64 hex>`` of it (hashed at rest). ``ID`` and agent names match
    ``[A-Za-z0-9_-]+``; scopes are among :data:`SCOPES` (none given: every scope). A secret may hold neither
    ``@`` nor ``#``.

    Raises:
        ConfigError: naming the entry by its position and id (never its secret).
    """
    keys: list[ApiKey] = []
    for i, raw in enumerate(p.strip() for p in text.split(",")):
        if not raw:
            continue
        where = f"api_keys[{i}]"
        key_id, sep, rest = raw.partition("=")
        if not sep or not NAME_RE.match(key_id):
            raise ConfigError("A2AMESH_API_KEYS", where, "expected ID=SECRET[@AGENT|AGENT] with ID in [A-Za-z0-9_-]+")
        rest, hashmark, scope_text = rest.rpartition("#") if "#" in rest else (rest, "", "")
        scopes: frozenset[str] | None = None
        if hashmark:
            named = [x for x in scope_text.split("|") if x]
            unknown = [x for x in named if x not in SCOPES]
            if not named or unknown:
                raise ConfigError(
                    "A2AMESH_API_KEYS",
                    f"{where} ({key_id})",
                    f"bad scope list {scope_text!r}: scopes are {', '.join(SCOPES)}",
                )
            scopes = frozenset(named)
        secret, at, allowed = rest.rpartition("@") if "@" in rest else (rest, "", "")
        if not secret:
            raise ConfigError("A2AMESH_API_KEYS", f"{where} ({key_id})", "the secret is empty")
        agents: frozenset[str] | None = None
        if at:
            names = [a for a in allowed.split("|") if a]
            bad = [a for a in names if not NAME_RE.match(a)]
            if not names or bad:
                raise ConfigError("A2AMESH_API_KEYS", f"{where} ({key_id})", f"bad agent list {allowed!r}")
            agents = frozenset(names)
        hashed = _HASHED.fullmatch(secret)
        keys.append(
            ApiKey(
                key_id=key_id,
                digest=SecretStr(hashed.group(1) if hashed else digest(secret)),
                agents=agents,
                scopes=scopes,
            )
        )
    ids = [k.key_id for k in keys]
    dup = next((k for k in ids if ids.count(k) > 1), None)
    if dup:
        raise ConfigError("A2AMESH_API_KEYS", dup, "the same key id is given twice")
    return keys


class GatewaySettings(BaseModel):
    """Every setting of the HTTP gateway."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8080, ge=0, le=65535, description="Port to listen on (0: any free port).")
    public_url: str | None = Field(
        default=None, description="Base URL clients reach the gateway at (behind a proxy); default http://host:port."
    )
    api_keys: list[ApiKey] = Field(default_factory=list, description="API keys; none = no auth (loopback only).")
    insecure: bool = Field(default=False, description="Allow serving without auth on a non-loopback address.")
    cors_origins: list[str] = Field(default_factory=list, description="Origins allowed by CORS; none = CORS off.")
    max_body_bytes: int = Field(
        default=768 * 1024, gt=0, description="Largest request body (kept below NATS max_payload); above it: 413."
    )
    rate_limit: float = Field(default=0.0, ge=0, description="Requests per second per API key (0: no limit).")
    rate_burst: int = Field(default=50, ge=1, description="Requests a key may make at once beyond its rate.")
    card_cache_seconds: int = Field(default=10, ge=0, description="Cache-Control max-age of served cards.")
    trace_url: str | None = Field(
        default=None,
        description="URL template of a trace in a tracing UI (Jaeger, Tempo), {trace_id} replaced; the dashboard "
        "links an execution's trace with it.",
    )
    events_keepalive: float = Field(
        default=15.0, gt=0, description="Seconds between keep-alive comments on an idle /api/events stream."
    )
    mcp: McpSettings = Field(default_factory=McpSettings, description="The MCP server at /mcp (A2AMESH_MCP_*).")
    push_allow_private: bool | None = Field(
        default=None,
        description="Whether push notification webhooks may be loopback, private or link-local addresses; "
        "default: only when the gateway listens on loopback.",
    )

    @property
    def auth_enabled(self) -> bool:
        """Whether calls need an API key."""
        return bool(self.api_keys)

    @property
    def push_private_targets(self) -> bool:
        """Whether webhooks may be non-public addresses (``push_allow_private``, else a loopback gateway's
        callers, who reach those addresses themselves)."""
        return self.push_allow_private if self.push_allow_private is not None else is_loopback(self.host)

    def check_exposure(self) -> None:
        """Refuse a non-loopback address without auth unless ``insecure``.

        Raises:
            ConfigError: naming the host and the fix.
        """
        if self.auth_enabled or self.insecure or is_loopback(self.host):
            return
        raise ConfigError(
            "gateway",
            "host",
            f"refusing to serve {self.host!r} without auth: set A2AMESH_API_KEYS, bind 127.0.0.1, or pass --insecure",
        )

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> GatewaySettings:
        """Defaults < environment < explicit overrides (None values are ignored).

        Raises:
            ConfigError: naming the variable and the problem (never an API key).
        """
        env = with_secret_files(os.environ if environ is None else environ, ("A2AMESH_API_KEYS",))

        def prepare(values: dict[str, Any]) -> None:
            values.setdefault("mcp", McpSettings.load(env))
            if isinstance(values.get("api_keys"), str):
                values["api_keys"] = parse_api_keys(values["api_keys"])
            if isinstance(values.get("cors_origins"), str):
                values["cors_origins"] = split_list(values["cors_origins"])

        return load_settings(cls, ENV_FIELDS, environ=env, overrides=overrides, source="gateway", prepare=prepare)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on the local machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
