"""Who is looking at the dashboard: the API key kept in a cookie, and the CSRF token of their forms.

With no API keys configured (the gateway then listens on loopback only) everyone is the anonymous caller and
no login is asked. With keys, ``/login`` checks a key with the gateway's :class:`Authenticator` and keeps it
in an ``HttpOnly``, ``SameSite=Strict`` cookie; every page reads it from there (or from the usual
``Authorization`` / ``X-API-Key`` headers). Every action carries a CSRF token: an HMAC of a fixed label keyed
by the caller's key (so any replica of the gateway checks it), or by a per-process secret when there are no
keys; actions whose ``Origin`` is another site are refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from a2amesh.gateway.auth import API_KEY_HEADER, Authenticator, AuthFailed, Caller

__all__ = ["COOKIE", "CSRF_FIELD", "caller_of", "csrf_ok", "csrf_token", "forget_key", "keep_key"]

COOKIE = "a2amesh_key"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_LABEL = b"a2amesh dashboard csrf v1"
_PROCESS_SECRET = secrets.token_bytes(32)


def _key_of(request: Request) -> str:
    return request.cookies.get(COOKIE, "")


def caller_of(request: Request, auth: Authenticator) -> Caller | None:
    """The caller of ``request`` (cookie first, then the API-key headers), or None when not logged in."""
    headers: dict[str, str] = {}
    if request.headers.get("authorization"):
        headers["authorization"] = request.headers["authorization"]
    if request.headers.get(API_KEY_HEADER.lower()):
        headers[API_KEY_HEADER.lower()] = request.headers[API_KEY_HEADER.lower()]
    key = _key_of(request)
    if key:
        headers = {API_KEY_HEADER.lower(): key}
    try:
        return auth.authenticate(headers)
    except AuthFailed:
        return None


def csrf_token(request: Request) -> str:
    """The CSRF token of this browser's forms."""
    key = _key_of(request)
    secret = key.encode() if key else _PROCESS_SECRET
    return hmac.new(secret, _LABEL, hashlib.sha256).hexdigest()


def csrf_ok(request: Request, token: str | None) -> bool:
    """Whether an action's token (form field or ``X-CSRF-Token``) and ``Origin`` are this browser's own."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc != host:
            return False
    presented = token or request.headers.get(CSRF_HEADER, "")
    return bool(presented) and hmac.compare_digest(presented, csrf_token(request))


def keep_key(response: Response, key: str, *, secure: bool) -> None:
    """Keep ``key`` in the dashboard's cookie (a browser session: gone when the browser closes)."""
    response.set_cookie(COOKIE, key, httponly=True, samesite="strict", secure=secure, path="/")


def forget_key(response: Response) -> None:
    """Drop the cookie (log out)."""
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
