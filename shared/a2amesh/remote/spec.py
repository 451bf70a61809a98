"""Remote agent declarations: ``remote:`` YAML files beside the agent cards (docs/interop.md).

A file whose top-level mapping holds ``remote`` declares an agent served elsewhere over A2A; a proxy
(``a2amesh remote serve FILE``) makes it a member of the mesh. Secrets are named (an env var or a file), read
when the proxy starts, and held as ``SecretStr``: never in a log line, an error or a card.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from a2amesh.diagnostics import did_you_mean, field_path
from a2amesh.errors import ConfigError
from a2amesh.ids import NAME_RE

__all__ = [
    "ApiKeyAuth",
    "BearerAuth",
    "OAuth2Auth",
    "RemoteSpec",
    "SecretRef",
    "is_remote_data",
    "is_remote_file",
    "load_remote_file",
    "parse_remote",
]

TRANSPORTS = ("JSONRPC", "HTTP+JSON")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretRef(_Strict):
    """Where a secret is read from: exactly one of an environment variable and a file (its text, stripped)."""

    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("a secret is read from exactly one of env (a variable's name) and file (a path)")
        return self

    def read(self, source: str, field: str) -> SecretStr:
        """The secret's value.

        Raises:
            ConfigError: the variable is unset or empty, or the file cannot be read (the value is never shown).
        """
        if self.env is not None:
            value = os.environ.get(self.env, "")
            if not value:
                raise ConfigError(source, field, f"the environment variable {self.env} is not set")
            return SecretStr(value)
        assert self.file is not None
        try:
            value = Path(self.file).read_text().strip()
        except OSError as e:
            raise ConfigError(source, field, f"cannot read the secret file {self.file}: {e.strerror}") from e
        if not value:
            raise ConfigError(source, field, f"the secret file {self.file} is empty")
        return SecretStr(value)


class BearerAuth(_Strict):
    """``Authorization: Bearer <token>`` on every request."""

    type: Literal["bearer"]
    token: SecretRef


class ApiKeyAuth(_Strict):
    """An API key in a header of every request."""

    type: Literal["api_key"]
    header: str = "X-API-Key"
    key: SecretRef


class OAuth2Auth(_Strict):
    """OAuth2 client credentials: a token from ``token_url``, renewed before it expires and after a 401."""

    type: Literal["oauth2"]
    token_url: str
    client_id: str
    client_secret: SecretRef
    scopes: list[str] = Field(default_factory=list)


Auth = Annotated[BearerAuth | ApiKeyAuth | OAuth2Auth, Field(discriminator="type")]


class RemoteSpec(_Strict):
    """One remote A2A agent, as written under ``remote:``."""

    url: str = Field(description="The agent's card URL, or its base URL (the card at /.well-known/agent-card.json).")
    name: str | None = Field(default=None, description="The mesh name; the card's name (made a valid name) if omitted.")
    transport: Literal["JSONRPC", "HTTP+JSON"] | None = Field(
        default=None, description="The binding to use; the card's preferred one of JSONRPC and HTTP+JSON if omitted."
    )
    auth: Auth | None = None
    description: str | None = Field(default=None, description="Replaces the card's description in the mesh.")
    input_schema: dict[str, Any] | None = Field(default=None, description="Input JSON Schema (else the card's).")
    output_schema: dict[str, Any] | None = None
    timeout: float = Field(default=60.0, gt=0, description="Seconds the remote may stay silent during a call.")
    connect_timeout: float = Field(default=5.0, gt=0)
    task_timeout: float | None = Field(default=None, gt=0, description="Seconds a forwarded task may run.")
    retries: int = Field(default=3, ge=0, description="Retries on connection errors, 5xx and 429 (never other 4xx).")
    backoff: float = Field(default=0.5, gt=0, description="First retry delay in seconds, doubled each retry.")
    max_concurrency: int = Field(default=16, ge=1, description="Tasks forwarded at once by one proxy replica.")
    mesh_concurrency: int | None = Field(
        default=None, ge=1, description="Tasks forwarded at once by all replicas together (a Redis semaphore)."
    )
    refresh: float = Field(default=300.0, gt=0, description="Seconds between card refreshes.")
    verify_tls: bool = True
    ca_file: str | None = Field(default=None, description="A CA bundle to verify the remote's certificate with.")
    replicas: int = Field(default=1, ge=1)
    mcp_export: bool = True

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str | None) -> str | None:
        if v is not None and not NAME_RE.match(v):
            raise ValueError(f"{v!r} must match [A-Za-z0-9_-]+")
        return v

    @field_validator("url")
    @classmethod
    def _valid_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http:// or https:// URL")
        return v


class _File(_Strict):
    remote: RemoteSpec


def is_remote_data(data: Any) -> bool:
    """Whether a decoded agent file declares a remote agent (a mapping with ``remote``)."""
    return isinstance(data, dict) and "remote" in data


def is_remote_file(path: str | Path) -> bool:
    """Whether an agent folder's YAML file declares a remote agent (unreadable files say no: the loader that
    reads them next reports why)."""
    try:
        return is_remote_data(yaml.safe_load(Path(path).read_text()))
    except (OSError, yaml.YAMLError):
        return False


def parse_remote(data: Any, source: str) -> RemoteSpec:
    """Validate a decoded remote declaration (``{remote: {...}}``).

    Raises:
        ConfigError: naming the source, the field and the problem.
    """
    if not isinstance(data, dict):
        raise ConfigError(source, "", "a remote agent file must be a YAML mapping with remote:")
    try:
        return _File.model_validate(data).remote
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        field = field_path(loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            parent: type[BaseModel] = RemoteSpec if len(loc) == 2 else _File
            known = list(parent.model_fields)
            raise ConfigError(source, field, f"unknown field{did_you_mean(str(loc[-1]), known)}") from e
        raise ConfigError(source, field, str(err["msg"]).removeprefix("Value error, ")) from e


def load_remote_file(path: str | Path) -> RemoteSpec:
    """Read and validate a remote agent file.

    Raises:
        ConfigError: unreadable file, bad YAML, or an invalid field.
    """
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ConfigError(str(p), "", f"cannot read remote agent file: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(str(p), "", f"not valid YAML: {getattr(e, 'problem', e)}") from e
    return parse_remote(data, str(p))
