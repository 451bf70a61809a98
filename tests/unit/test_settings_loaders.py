"""One settings loader for every process kind: the same variable text means the same value everywhere, a bad
value is one error naming the variable, secrets never show, and docs/operations.md lists every variable."""

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from a2amesh import config
from a2amesh.config import Settings
from a2amesh.errors import ConfigError
from a2amesh.gateway import settings as gateway_settings
from a2amesh.gateway.settings import GatewaySettings
from a2amesh.mcp_server import settings as mcp_settings
from a2amesh.mcp_server.settings import McpSettings

Loader = Callable[[Mapping[str, str]], BaseModel]

# (process kind, loader, a boolean variable of that kind, the field it sets)
BOOLEAN_CASES: list[tuple[str, Loader, str, Callable[[Any], bool]]] = [
    ("mesh", lambda env: Settings.load(environ=env), "A2AMESH_REDIS_CLUSTER", lambda s: s.redis_cluster),
    ("gateway", lambda env: GatewaySettings.load(environ=env), "A2AMESH_HTTP_INSECURE", lambda s: s.insecure),
    ("mcp", lambda env: McpSettings.load(environ=env), "A2AMESH_MCP_ELICITATION", lambda s: s.elicitation),
]

TRUE_WORDS = ["1", "true", "TRUE", "yes", "on", "On", "y"]
FALSE_WORDS = ["0", "false", "no", "off", "OFF", "n"]


@pytest.mark.parametrize(("kind", "load", "variable", "read"), BOOLEAN_CASES, ids=[c[0] for c in BOOLEAN_CASES])
def test_every_kind_reads_a_boolean_the_same_way(
    kind: str, load: Loader, variable: str, read: Callable[[Any], bool]
) -> None:
    """`on` is on and `off` is off for every process kind (the gateway read `on` as off before)."""
    for word in TRUE_WORDS:
        assert read(load({variable: word})) is True, f"{kind}: {variable}={word} read as off"
    for word in FALSE_WORDS:
        assert read(load({variable: word})) is False, f"{kind}: {variable}={word} read as on"


@pytest.mark.parametrize(("kind", "load", "variable", "read"), BOOLEAN_CASES, ids=[c[0] for c in BOOLEAN_CASES])
@pytest.mark.parametrize("word", ["disabled", "enabled", "2", "maybe"])
def test_every_kind_refuses_a_word_that_is_not_a_boolean(
    kind: str, load: Loader, variable: str, read: Callable[[Any], bool], word: str
) -> None:
    """A word that is neither on nor off is an error naming the variable and the value, never silently on or off
    (MCP read `disabled` as on before)."""
    with pytest.raises(ConfigError) as e:
        load({variable: word})
    assert variable in str(e.value)
    assert repr(word) in str(e.value)


SECRET_CASES: list[tuple[str, Loader, dict[str, str], str]] = [
    ("mesh", lambda env: Settings.load(environ=env), {"NATS_PASSWORD": "hunter2-x"}, "A2AMESH_MAX_DELIVER"),
    ("mesh-llm", lambda env: Settings.load(environ=env), {"OPENAI_API_KEY": "hunter2-x"}, "A2AMESH_CARD_TTL"),
    (
        "gateway",
        lambda env: GatewaySettings.load(environ=env),
        {"A2AMESH_API_KEYS": "ops=hunter2-x"},
        "A2AMESH_HTTP_PORT",
    ),
]


@pytest.mark.parametrize(("kind", "load", "secret_env", "bad_variable"), SECRET_CASES, ids=[c[0] for c in SECRET_CASES])
def test_secrets_never_reach_reprs_or_errors(
    kind: str, load: Loader, secret_env: dict[str, str], bad_variable: str
) -> None:
    """A secret is neither in a settings repr nor in the error about another variable."""
    settings = load(secret_env)
    assert "hunter2-x" not in repr(settings) + str(settings)
    with pytest.raises(ConfigError) as e:
        load({**secret_env, bad_variable: "not-a-number"})
    assert "hunter2-x" not in str(e.value)
    assert bad_variable in str(e.value)


def test_a_bad_api_key_is_named_but_not_shown() -> None:
    """An API key spec that does not parse is reported by its position and id, its secret never shown."""
    with pytest.raises(ConfigError) as e:
        GatewaySettings.load(environ={"A2AMESH_API_KEYS": "ops=hunter2-x#bogus"})
    assert "ops" in str(e.value)
    assert "hunter2-x" not in str(e.value)


def test_secret_fields_are_found_by_type_and_name() -> None:
    """The mask is decided by the field's type (a SecretStr, or a model holding one) or a credential's name."""
    assert config.is_secret_field(Settings, "nats_password")
    assert config.is_secret_field(Settings, "redis_url")
    assert config.is_secret_field(GatewaySettings, "api_keys")
    assert not config.is_secret_field(GatewaySettings, "port")
    assert not config.is_secret_field(McpSettings, "include")


def every_variable() -> set[str]:
    """Every environment variable any process kind reads."""
    return (
        set(config.ENV_FIELDS)
        | set(gateway_settings.ENV_FIELDS)
        | set(mcp_settings.ENV_FIELDS)
        | set(config.PROCESS_VARIABLES)
    )


def test_operations_doc_lists_exactly_the_variables_processes_read() -> None:
    """docs/operations.md's settings tables name every variable a process reads, and none it does not."""
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    settings_part = doc.split("## Settings", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`((?:A2AMESH|NATS|REDIS|OPENAI)_[A-Z0-9_]+)`", settings_part))
    read = every_variable()
    assert not read - documented, f"read by a process but not in docs/operations.md: {sorted(read - documented)}"
    assert not documented - read, f"in docs/operations.md but read by no process: {sorted(documented - read)}"
