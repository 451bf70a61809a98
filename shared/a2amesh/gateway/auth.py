"""API-key authentication of gateway calls, the per-key agent allow-list, and the per-key rate limit.

A key arrives as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. It is hashed and compared with every
configured digest in constant time; the secret is never stored, logged or put in a repr. The key's id is the
caller's identity: it is logged and sent to the callee as ``A2A-User``.
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass, field
from typing import Any

from a2amesh.gateway.settings import ApiKey, digest

API_KEY_HEADER = "X-API-Key"
BEARER_SCHEME = "bearer"
API_KEY_SCHEME = "apiKey"


@dataclass(frozen=True)
class Caller:
    """Who is calling: the API key's id, or ``None`` when the gateway runs without auth."""

    key_id: str | None
    key: ApiKey | None = field(default=None, repr=False)

    def allows(self, agent: str) -> bool:
        """Whether this caller may call ``agent``."""
        return self.key is None or self.key.allows(agent)

    def has_scope(self, scope: str) -> bool:
        """Whether this caller may use management routes that need ``scope``."""
        return self.key is None or self.key.has_scope(scope)


ANONYMOUS = Caller(key_id=None)


class AuthFailed(Exception):
    """A call is refused: ``status`` 401 (no or unknown key) or 403 (key not allowed for the agent)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class Authenticator:
    """Checks API keys; with no keys configured every caller is :data:`ANONYMOUS`."""

    def __init__(self, keys: list[ApiKey]) -> None:
        self._keys = list(keys)

    def authenticate(self, headers: Any) -> Caller:
        """The caller presenting these request headers (a Starlette ``Headers`` or a mapping).

        Raises:
            AuthFailed: 401 when a key is needed and missing or unknown.
        """
        if not self._keys:
            return ANONYMOUS
        secret = _presented_key(headers)
        if not secret:
            raise AuthFailed(401, f"an API key is required: send 'Authorization: Bearer <key>' or '{API_KEY_HEADER}'")
        seen = digest(secret).encode()
        found: ApiKey | None = None
        for key in self._keys:  # compare with every key, so timing does not tell which prefix matched
            if hmac.compare_digest(seen, key.digest.get_secret_value().encode()):
                found = key
        if found is None:
            raise AuthFailed(401, "the API key is not valid")
        return Caller(key_id=found.key_id, key=found)

    @staticmethod
    def authorize(caller: Caller, agent: str) -> None:
        """Raises:
        AuthFailed: 403 when the caller's key may not call ``agent``.
        """
        if not caller.allows(agent):
            raise AuthFailed(403, f"API key {caller.key_id!r} is not allowed to call {agent!r}")

    @staticmethod
    def require_scope(caller: Caller, scope: str) -> None:
        """Raises:
        AuthFailed: 403 when the caller's key lacks ``scope``.
        """
        if not caller.has_scope(scope):
            raise AuthFailed(403, f"API key {caller.key_id!r} lacks the {scope!r} scope")

    def security(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]] | None:
        """What every card declares (``securitySchemes``, ``securityRequirements``), or None without auth."""
        if not self._keys:
            return None
        schemes = {
            BEARER_SCHEME: {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "an a2amesh API key"}},
            API_KEY_SCHEME: {"apiKeySecurityScheme": {"location": "header", "name": API_KEY_HEADER}},
        }
        requirements: list[dict[str, Any]] = [
            {"schemes": {BEARER_SCHEME: {"list": []}}},
            {"schemes": {API_KEY_SCHEME: {"list": []}}},
        ]
        return schemes, requirements


def _presented_key(headers: Any) -> str:
    auth = headers.get("authorization") or ""
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return str(value.strip())
    return str(headers.get(API_KEY_HEADER.lower()) or "").strip()


class RateLimiter:
    """A token bucket per caller: ``rate`` requests per second, ``burst`` at once (``rate`` 0: no limit)."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}

    def retry_after(self, who: str) -> float:
        """Take one token for ``who``; 0 when allowed, else the seconds until the next token."""
        if self._rate <= 0:
            return 0.0
        now = time.monotonic()
        tokens, at = self._buckets.get(who, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        if tokens >= 1.0:
            self._buckets[who] = (tokens - 1.0, now)
            return 0.0
        self._buckets[who] = (tokens, now)
        return (1.0 - tokens) / self._rate
