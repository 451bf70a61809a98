"""Gateway settings: API keys parsed and hashed, secrets never shown, exposure refused without auth."""

from __future__ import annotations

import hashlib

import pytest

from a2amesh.errors import ConfigError
from a2amesh.gateway.auth import Authenticator, AuthFailed, RateLimiter
from a2amesh.gateway.settings import GatewaySettings, is_loopback, parse_api_keys


def test_keys_parse_hash_and_allow_lists() -> None:
    """Plain and sha256: secrets give the same digest; an allow-list limits agents; no secret in any repr."""
    hashed = hashlib.sha256(b"topsecret").hexdigest()
    keys = parse_api_keys(f"a=topsecret@echo|flow, b=sha256:{hashed}")
    assert keys[0].digest.get_secret_value() == keys[1].digest.get_secret_value() == hashed
    assert keys[0].allows("flow")
    assert not keys[0].allows("other")
    assert keys[1].allows("other")
    settings = GatewaySettings(api_keys=keys)
    for shown in (repr(settings), str(settings), repr(keys), settings.model_dump_json()):
        assert "topsecret" not in shown
        assert hashed not in shown


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("nokey", "expected ID=SECRET"),
        ("a=", "secret is empty"),
        ("a=x@bad name", "bad agent list"),
        ("a=x,a=y", "twice"),
    ],
)
def test_bad_keys_are_named_without_secret(text: str, problem: str) -> None:
    """A malformed A2AMESH_API_KEYS entry is a ConfigError naming the entry, never its secret."""
    with pytest.raises(ConfigError, match=problem) as e:
        GatewaySettings.load(environ={"A2AMESH_API_KEYS": text})
    assert "x@" not in str(e.value)


def test_exposure_needs_auth_or_insecure() -> None:
    """A non-loopback bind without keys is refused unless insecure; loopback is fine."""
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    GatewaySettings(host="127.0.0.1").check_exposure()
    with pytest.raises(ConfigError, match="refusing to serve '0.0.0.0' without auth"):
        GatewaySettings(host="0.0.0.0").check_exposure()
    GatewaySettings(host="0.0.0.0", insecure=True).check_exposure()
    GatewaySettings(host="0.0.0.0", api_keys=parse_api_keys("a=b")).check_exposure()
    env = GatewaySettings.load(environ={"A2AMESH_HTTP_HOST": "0.0.0.0", "A2AMESH_HTTP_INSECURE": "1"})
    env.check_exposure()


def test_authenticator_and_rate_limiter() -> None:
    """Bearer and X-API-Key are accepted; 401 and 403 as documented; the bucket refills at its rate."""
    auth = Authenticator(parse_api_keys("a=k1@echo"))
    assert auth.authenticate({"authorization": "Bearer k1"}).key_id == "a"
    assert auth.authenticate({"x-api-key": "k1"}).key_id == "a"
    with pytest.raises(AuthFailed) as e:
        auth.authenticate({})
    assert e.value.status == 401
    with pytest.raises(AuthFailed) as e:
        auth.authorize(auth.authenticate({"x-api-key": "k1"}), "other")
    assert e.value.status == 403
    limiter = RateLimiter(rate=10, burst=2)
    assert limiter.retry_after("a") == 0
    assert limiter.retry_after("a") == 0
    assert 0 < limiter.retry_after("a") <= 0.1
    assert RateLimiter(rate=0, burst=1).retry_after("a") == 0


def test_api_key_scopes() -> None:
    """``#SCOPE|SCOPE`` limits a key's management scopes; ``admin`` grants all; none given means all."""
    a, b, c = parse_api_keys("a=k1#read|run, b=k2@echo#admin, c=k3")
    assert a.scopes == frozenset({"read", "run"})
    assert a.has_scope("read")
    assert not a.has_scope("review")
    assert b.agents == frozenset({"echo"})
    assert b.has_scope("review")
    assert c.scopes is None
    assert c.has_scope("admin")


def test_api_key_bad_scope_is_named() -> None:
    """An unknown scope is refused, naming the entry and the scopes there are (never the secret)."""
    with pytest.raises(ConfigError) as e:
        parse_api_keys("a=topsecret#read|write")
    assert "api_keys[0] (a)" in str(e.value)
    assert "'read|write'" in str(e.value)
    assert "admin" in str(e.value)
    assert "topsecret" not in str(e.value)
