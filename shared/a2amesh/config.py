"""Settings: built once at the edge of a process from the environment and an optional YAML file.

Library classes never read ``os.environ``; entry points call :meth:`Settings.load` and pass the
result (or parts of it) down.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from a2amesh.errors import ConfigError
from a2amesh.ids import NAME_RE

# env var -> settings field
ENV_FIELDS: dict[str, str] = {
    "A2AMESH_NAMESPACE": "namespace",
    "NATS_URL": "nats_url",
    "NATS_USER": "nats_user",
    "NATS_PASSWORD": "nats_password",
    "NATS_TOKEN": "nats_token",
    "NATS_CREDS": "nats_creds",
    "NATS_NKEY_SEED": "nats_nkey_seed",
    "NATS_TLS_CA": "nats_tls_ca",
    "NATS_TLS_CERT": "nats_tls_cert",
    "NATS_TLS_KEY": "nats_tls_key",
    "A2AMESH_SCOPE": "scope",
    "A2AMESH_CONNECT_TIMEOUT": "connect_timeout",
    "A2AMESH_REPLICAS": "replicas",
    "REDIS_URL": "redis_url",
    "REDIS_USER": "redis_user",
    "REDIS_PASSWORD": "redis_password",
    "A2AMESH_REDIS_CLUSTER": "redis_cluster",
    "A2AMESH_REDIS_WAIT_REPLICAS": "redis_wait_replicas",
    "A2AMESH_REDIS_WAIT_TIMEOUT_MS": "redis_wait_timeout_ms",
    "A2AMESH_PROFILE": "profile",
    "A2AMESH_STATE_DIR": "state_dir",
    "A2AMESH_LOG_FORMAT": "log_format",
    "A2AMESH_LOG_LEVEL": "log_level",
    "A2AMESH_CARD_TTL": "card_ttl",
    "A2AMESH_ACK_WAIT": "ack_wait",
    "A2AMESH_MAX_DELIVER": "max_deliver",
    "A2AMESH_LEASE_TTL": "lease_ttl",
    "A2AMESH_MAX_CONCURRENCY": "max_concurrency",
    "A2AMESH_MAX_EXECUTIONS": "max_executions_per_replica",
    "A2AMESH_MAX_CALL_DEPTH": "max_call_depth",
    "A2AMESH_INLINE_THRESHOLD": "inline_threshold",
    "A2AMESH_ARTIFACT_RETENTION": "artifact_retention",
    "A2AMESH_ARTIFACT_MAX_BYTES": "artifact_max_bytes",
    "A2AMESH_SHUTDOWN_GRACE": "shutdown_grace",
    "A2AMESH_TIMEZONE": "timezone",
    "OPENAI_BASE_URL": "llm_base_url",
    "OPENAI_API_KEY": "llm_api_key",
    "A2AMESH_LLM_MODEL": "llm_model",
    "A2AMESH_METRICS_PORT": "metrics_port",
    "A2AMESH_METRICS_HOST": "metrics_host",
}

PROCESS_VARIABLES: tuple[str, ...] = ("A2AMESH_CONFIG", "A2AMESH_UVLOOP", "A2AMESH_GC", "A2AMESH_FAULT")
"""Variables read outside the settings models: the config file's path, the event loop, the collector, fault hooks
(tests only). With every process kind's ``ENV_FIELDS`` they are every variable a process reads; the tests hold
docs/operations.md to that list."""

SECRET_VARS = ("NATS_PASSWORD", "NATS_TOKEN", "REDIS_PASSWORD", "REDIS_URL", "OPENAI_API_KEY")
"""Variables that may instead name a file holding the value: ``<VAR>_FILE`` (Docker and Kubernetes secrets)."""


def with_secret_files(env: Mapping[str, str], names: tuple[str, ...] = SECRET_VARS) -> dict[str, str]:
    """``env`` with each ``<NAME>_FILE`` (of ``names``) read into ``<NAME>`` when ``<NAME>`` itself is unset.

    The file's content, without its trailing newline, is the value; the value is never part of an error.

    Raises:
        ConfigError: naming the variable and the file that cannot be read.
    """
    values = dict(env)
    for name in names:
        path = env.get(f"{name}_FILE")
        if not path or env.get(name):
            continue
        try:
            values[name] = Path(path).read_text().rstrip("\r\n")
        except OSError as e:
            raise ConfigError(f"{name}_FILE", "", f"cannot read {path}: {e.strerror}") from e
        except UnicodeDecodeError as e:
            raise ConfigError(f"{name}_FILE", "", f"{path} is not UTF-8 text") from e
    return values


# Shorter timers so tests finish quickly (SPEC §11); settings only, no separate code paths.
TEST_PROFILE: dict[str, Any] = {
    "card_ttl": 3.0,
    "ack_wait": 2.0,
    "lease_ttl": 2.0,
    "max_deliver": 5,
    "deliver_backoff": False,
    "shutdown_grace": 5.0,
    "call_timeout": 30.0,
}


class Settings(BaseModel):
    """Every setting of an a2amesh process. Durations are seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="a2amesh", description="Prefix of every subject, stream, bucket and key.")
    nats_url: str | None = Field(default=None, description="NATS server URL(s), comma separated; None = embedded.")
    connect_timeout: float = Field(
        default=30.0, gt=0, description="Seconds to wait at start for a NATS server to answer (then UNAVAILABLE)."
    )
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    nats_token: SecretStr | None = None
    nats_creds: str | None = Field(default=None, description="Path of a NATS .creds file.")
    nats_nkey_seed: str | None = Field(default=None, description="Path of an nkey seed file.")
    nats_tls_ca: str | None = None
    nats_tls_cert: str | None = None
    nats_tls_key: str | None = None
    scope: str | None = Field(
        default=None,
        description="This process's token in its reply subjects and inboxes (reply.{scope}.…, _INBOX.{scope}.…) "
        "that NATS permissions restrict a user to; None: the NATS user name when it is a valid token.",
    )
    replicas: int | None = Field(
        default=None,
        ge=1,
        le=5,
        description="Replicas of every stream and KV bucket (3 on a 3-node cluster); None: 1 for new ones, "
        "existing ones keep theirs.",
    )
    redis_url: SecretStr | None = Field(default=None, description="redis:// or rediss:// URL; None = embedded.")
    redis_user: str | None = Field(default=None, description="Valkey ACL user (a2amesh deploy init makes one each).")
    redis_password: SecretStr | None = None
    redis_cluster: bool = Field(
        default=False, description="REDIS_URL names a node of a Redis/Valkey Cluster: use the cluster client."
    )
    redis_wait_replicas: int = Field(
        default=0,
        ge=0,
        description="Replicas that must hold a task or execution write (WAIT) before the work it records is "
        "acknowledged; 0: none (an asynchronously replicated write can be lost with its primary, docs/scaling.md).",
    )
    redis_wait_timeout_ms: int = Field(
        default=5000,
        ge=1,
        le=9000,
        description="How long a write waits for those replicas (a failover's new primary has none until one "
        "rejoins) before the work is handed back; below the 10 s socket timeout.",
    )
    profile: Literal["default", "test"] = "default"
    state_dir: str | None = Field(default=None, description="Folder of the embedded servers' data (a2amesh up).")
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "INFO"

    card_ttl: float = Field(default=30.0, gt=0, description="Card and presence TTL; re-put every TTL/3.")
    ack_wait: float = Field(
        default=4.0,
        gt=0,
        description="JetStream ack wait of work consumers: a dead replica's work is redelivered within it; a live "
        "one keeps its work with in-progress acks every ack_wait/3 and its claims live ack_wait*2/3.",
    )
    max_deliver: int = Field(default=5, ge=2, description="Deliveries of one request before MAX_DELIVERIES.")
    deliver_backoff: bool = Field(default=True, description="Exponential redelivery backoff from ack_wait.")
    tasks_max_age: float = Field(default=24 * 3600.0, gt=0, description="Max age of queued requests.")
    reply_progress_ttl: float = Field(default=600.0, gt=0, description="Nats-TTL of progress replies.")
    reply_final_ttl: float = Field(default=24 * 3600.0, gt=0, description="Nats-TTL of final replies.")
    task_retention: float = Field(default=7 * 24 * 3600.0, gt=0, description="TTL of finished task records.")
    lease_ttl: float = Field(default=10.0, gt=0, description="Execution lease TTL.")
    max_concurrency: int = Field(default=16, ge=1, description="Tasks at once per replica.")
    max_executions_per_replica: int = Field(
        default=1000, ge=1, description="Running workflow executions above which an executor stops pulling new ones."
    )
    max_call_depth: int = Field(default=10, ge=1)
    max_request_bytes: int = Field(default=1024 * 1024, gt=0, description="Largest request an agent accepts.")
    inline_threshold: int = Field(default=256 * 1024, gt=0, description="Outputs above this go to the artifact store.")
    artifact_retention: float = Field(
        default=7 * 24 * 3600.0, gt=0, description="TTL of artifacts (follows execution retention; refreshed on save)."
    )
    artifact_max_bytes: int = Field(default=64 * 1024 * 1024, gt=0, description="Largest artifact version stored.")
    call_timeout: float = Field(default=300.0, gt=0, description="Default deadline of a client call.")
    shutdown_grace: float = Field(default=30.0, ge=0, description="Time running work gets to finish on SIGTERM.")
    timezone: str = "UTC"
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model: str | None = None
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve Prometheus metrics on this port (agents, executors, built-ins).",
    )
    metrics_host: str = Field(default="127.0.0.1", description="Address the metrics port listens on.")

    @field_validator("namespace")
    @classmethod
    def _valid_namespace(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must match [A-Za-z0-9_-]+")
        return v

    @field_validator("scope")
    @classmethod
    def _valid_scope(cls, v: str | None) -> str | None:
        if v is not None and not NAME_RE.match(v):
            raise ValueError("must match [A-Za-z0-9_-]+ (it is one subject token)")
        return v

    @property
    def reply_scope(self) -> str | None:
        """The scope of this process's reply subjects and inboxes: ``scope``, else a token-safe NATS user name."""
        if self.scope:
            return self.scope
        if self.nats_user and NAME_RE.match(self.nats_user):
            return self.nats_user
        return None

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        file: str | Path | None = None,
        **overrides: Any,
    ) -> Settings:
        """Build settings: defaults < profile < config file < environment < explicit overrides.

        Args:
            environ: the environment to read (``os.environ`` when None).
            file: a YAML file of settings (``A2AMESH_CONFIG`` when None).
            overrides: explicit values, e.g. from CLI options.

        Raises:
            ConfigError: naming the key and the problem.
        """
        env = with_secret_files(os.environ if environ is None else environ)
        path = file or env.get("A2AMESH_CONFIG")
        base = _read_file(Path(path)) if path else {}

        def apply_profile(values: dict[str, Any]) -> None:
            if values.get("profile", "default") == "test":
                for field, value in TEST_PROFILE.items():
                    values.setdefault(field, value)

        return load_settings(
            cls,
            ENV_FIELDS,
            environ=env,
            overrides=overrides,
            source=str(path or "config"),
            base=base,
            prepare=apply_profile,
        )


SettingsT = TypeVar("SettingsT", bound=BaseModel)

_SECRET_WORDS = ("password", "token", "key", "secret", "seed", "creds")


def is_secret_field(model: type[BaseModel], field: str) -> bool:
    """Whether a setting's value must never be shown: a ``SecretStr`` (or a model holding one), or a name that
    says it is a credential."""
    info = model.model_fields.get(field)
    if info is not None and _holds_secret(info.annotation):
        return True
    return any(word in field.lower() for word in _SECRET_WORDS)


def _holds_secret(annotation: Any) -> bool:
    if annotation is SecretStr:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return any(_holds_secret(f.annotation) for f in annotation.model_fields.values())
    return any(_holds_secret(arg) for arg in get_args(annotation))


def load_settings(
    model: type[SettingsT],
    env_fields: Mapping[str, str],
    *,
    environ: Mapping[str, str],
    overrides: Mapping[str, Any],
    source: str,
    base: Mapping[str, Any] | None = None,
    prepare: Callable[[dict[str, Any]], None] | None = None,
) -> SettingsT:
    """The one way every process kind builds its settings: ``base`` (defaults of a file) < the environment
    (``env_fields``: variable → field; empty variables are unset) < explicit ``overrides`` (None is unset).

    Values are validated by the model, so every boolean is parsed one way (pydantic's: ``1/0``, ``true/false``,
    ``yes/no``, ``on/off``; anything else is an error, never silently off). ``prepare`` turns raw strings that
    are not scalars (lists, key specs) into values first.

    Raises:
        ConfigError: naming the variable (or ``source``), the field and the problem; a secret's value is
            shown as ``***``.
    """
    values: dict[str, Any] = dict(base or {})
    for var, field in env_fields.items():
        if environ.get(var):
            values[field] = environ[var]
    values.update({k: v for k, v in overrides.items() if v is not None})
    if prepare is not None:
        prepare(values)
    try:
        return model.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        top = str(err["loc"][0]) if err["loc"] else ""
        field = ".".join(str(p) for p in err["loc"])
        origin = next((var for var, f in env_fields.items() if f == top and environ.get(var)), source)
        shown = "***" if is_secret_field(model, top) else repr(values.get(top, ""))
        raise ConfigError(origin, field, f"value {shown} is not valid: {err['msg']}") from e


def split_list(text: str) -> list[str]:
    """A comma-separated setting as its non-empty, stripped items."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(str(path), "", f"cannot read config file: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(str(path), "", f"not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "a config file must be a mapping of setting names to values")
    unknown = sorted(set(data) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(str(path), unknown[0], "unknown setting")
    return data
