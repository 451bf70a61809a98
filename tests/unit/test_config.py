"""Settings: env + file + overrides, precise errors, secrets kept out of reprs."""

from pathlib import Path

import pytest

from a2amesh.config import Settings
from a2amesh.errors import ConfigError


def test_env_overrides_file_and_profile_applies(tmp_path: Path) -> None:
    """Environment beats the config file; the test profile shortens timers unless set explicitly."""
    f = tmp_path / "a2amesh.yaml"
    f.write_text("namespace: fromfile\nack_wait: 9\n")
    s = Settings.load(environ={"A2AMESH_NAMESPACE": "fromenv", "A2AMESH_PROFILE": "test"}, file=f)
    assert s.namespace == "fromenv"
    assert s.ack_wait == 9
    assert s.card_ttl == 3.0


def test_bad_value_names_variable_and_value() -> None:
    """A bad env value is one error naming the variable, the field and the value."""
    with pytest.raises(ConfigError) as e:
        Settings.load(environ={"A2AMESH_CARD_TTL": "soon"})
    assert "A2AMESH_CARD_TTL" in str(e.value)
    assert "card_ttl" in str(e.value)
    assert "'soon'" in str(e.value)


def test_bad_namespace_rejected() -> None:
    """A namespace that cannot be a subject token is refused."""
    with pytest.raises(ConfigError, match="namespace"):
        Settings.load(environ={"A2AMESH_NAMESPACE": "a.b"})


def test_unknown_file_setting_rejected(tmp_path: Path) -> None:
    """A typo in the config file is an error naming the key."""
    f = tmp_path / "c.yaml"
    f.write_text("acK_wait: 3\n")
    with pytest.raises(ConfigError, match="acK_wait"):
        Settings.load(environ={}, file=f)


def test_secrets_never_in_repr() -> None:
    """Passwords and URLs with credentials do not appear in reprs or error messages."""
    s = Settings.load(
        environ={"NATS_PASSWORD": "hunter2", "REDIS_URL": "redis://:topsecret@host:6379/0", "NATS_TOKEN": "tok"}
    )
    text = repr(s) + str(s)
    assert "hunter2" not in text
    assert "topsecret" not in text
    assert "tok'" not in text
    with pytest.raises(ConfigError) as e:
        Settings.load(environ={"NATS_PASSWORD": "hunter2", "A2AMESH_MAX_DELIVER": "x"})
    assert "hunter2" not in str(e.value)
