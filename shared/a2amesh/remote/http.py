"""The HTTP client of one remote: its credentials, TLS, timeouts, and retries with backoff.

Retries happen below the a2a-sdk client, per HTTP request: a connection that could not be opened (the
request never left) and an answer of 5xx or 429 (before its body is read, so a streamed answer too) are
tried again after ``backoff × 2^n`` seconds (a ``Retry-After`` of up to 30 s is honoured); any other 4xx is
the remote's answer and is returned as it is. An error after the request was sent (a connection reset while
reading) is not retried: the remote may have acted on it.

JSON and SSE answers pass through one leniency: a ``timestamp`` without a UTC offset is read as UTC (see
:func:`_lenient`), so servers that write naive local times still parse.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator

import httpx
from pydantic import SecretStr

from a2amesh.errors import ConfigError
from a2amesh.logs import get_logger
from a2amesh.remote.spec import ApiKeyAuth, BearerAuth, OAuth2Auth, RemoteSpec

__all__ = ["OAuth2ClientCredentials", "RetryTransport", "StaticHeader", "make_http_client"]

log = get_logger("remote")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_NAIVE_TIMESTAMP = re.compile(rb'("timestamp"\s*:\s*"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)"')
_TEXT_BODIES = ("application/json", "text/event-stream")
_MAX_RETRY_AFTER = 30.0


class RetryTransport(httpx.AsyncBaseTransport):
    """Retries a request on connection errors and 5xx/429 answers (see the module doc)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, *, retries: int, backoff: float, url: str) -> None:
        self.inner = inner
        self.retries = retries
        self.backoff = backoff
        self.url = url

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self.inner.handle_async_request(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                if attempt >= self.retries:
                    raise
                delay = self.backoff * 2**attempt
                log.warning("remote.retry", url=self.url, attempt=attempt + 1, error=type(e).__name__, delay=delay)
            else:
                if response.status_code not in RETRY_STATUSES or attempt >= self.retries:
                    return _lenient(request, response)
                delay = _retry_after(response) or self.backoff * 2**attempt
                await response.aclose()
                log.warning("remote.retry", url=self.url, attempt=attempt + 1, status=response.status_code, delay=delay)
            attempt += 1
            await asyncio.sleep(delay)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _lenient(request: httpx.Request, response: httpx.Response) -> httpx.Response:
    """The answer with every ``timestamp`` that has no UTC offset read as UTC (``Z`` added).

    ProtoJSON (and so the a2a-sdk's parser) requires RFC 3339 with an offset; some A2A servers (fasta2a 2.1) write
    local ISO times without one, and every answer of theirs would fail to parse.
    """
    kind = response.headers.get("content-type", "")
    if not kind.startswith(_TEXT_BODIES):
        return response
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-length"]
    return httpx.Response(
        response.status_code,
        headers=headers,
        stream=_NaiveTimestamps(response.stream),
        request=request,
        extensions=response.extensions,
    )


class _NaiveTimestamps(httpx.AsyncByteStream):
    """A body passed on line by line (an SSE event or a JSON document is never cut), naive timestamps fixed."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = b""
        async for chunk in self._inner:
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut:
                yield _NAIVE_TIMESTAMP.sub(rb'\1Z"', pending[:cut])
                pending = pending[cut:]
        if pending:
            yield _NAIVE_TIMESTAMP.sub(rb'\1Z"', pending)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)


class StaticHeader(httpx.Auth):
    """One header with a secret value on every request (a bearer token, an API key)."""

    def __init__(self, name: str, value: SecretStr, *, prefix: str = "") -> None:
        self._name = name
        self._value = value
        self._prefix = prefix

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers[self._name] = self._prefix + self._value.get_secret_value()
        yield request

    def __repr__(self) -> str:
        return f"StaticHeader({self._name}, ***)"


class OAuth2ClientCredentials(httpx.Auth):
    """OAuth2 client credentials (RFC 6749 §4.4): a token fetched from ``token_url``, reused until 30 s before it
    expires, fetched again after a 401."""

    def __init__(self, spec: OAuth2Auth, secret: SecretStr) -> None:
        self._spec = spec
        self._secret = secret
        self._token: SecretStr | None = None
        self._expires = 0.0

    def __repr__(self) -> str:
        return f"OAuth2ClientCredentials({self._spec.token_url}, client_id={self._spec.client_id}, ***)"

    def _token_request(self) -> httpx.Request:
        form = {
            "grant_type": "client_credentials",
            "client_id": self._spec.client_id,
            "client_secret": self._secret.get_secret_value(),
        }
        if self._spec.scopes:
            form["scope"] = " ".join(self._spec.scopes)
        return httpx.Request("POST", self._spec.token_url, data=form, headers={"Accept": "application/json"})

    async def _take(self, response: httpx.Response) -> None:
        await response.aread()
        problem = None
        if response.status_code != 200:
            problem = f"the token endpoint answered HTTP {response.status_code}"
        else:
            try:
                body = response.json()
                token, expires_in = body["access_token"], float(body.get("expires_in", 3600))
            except (ValueError, KeyError, TypeError):
                problem = "the token endpoint's answer has no access_token"
        if problem is not None:
            raise httpx.HTTPStatusError(
                f"OAuth2 {self._spec.token_url}: {problem}", request=response.request, response=response
            )
        self._token = SecretStr(str(token))
        self._expires = time.monotonic() + expires_in - 30

    def _authorize(self, request: httpx.Request) -> None:
        assert self._token is not None
        request.headers["Authorization"] = "Bearer " + self._token.get_secret_value()

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        if self._token is None or time.monotonic() >= self._expires:
            await self._take((yield self._token_request()))
        self._authorize(request)
        response = yield request
        if response.status_code == 401:
            await response.aclose()
            await self._take((yield self._token_request()))
            self._authorize(request)
            yield request


def auth_of(spec: RemoteSpec, source: str) -> httpx.Auth | None:
    """The ``httpx.Auth`` of a remote's ``auth:`` (its secret read now).

    Raises:
        ConfigError: the secret's variable or file is missing.
    """
    auth = spec.auth
    if auth is None:
        return None
    if isinstance(auth, BearerAuth):
        return StaticHeader("Authorization", auth.token.read(source, "remote.auth.token"), prefix="Bearer ")
    if isinstance(auth, ApiKeyAuth):
        return StaticHeader(auth.header, auth.key.read(source, "remote.auth.key"))
    return OAuth2ClientCredentials(auth, auth.client_secret.read(source, "remote.auth.client_secret"))


def make_http_client(spec: RemoteSpec, *, source: str) -> httpx.AsyncClient:
    """The HTTP client every request to this remote goes through (the card, tasks, cancels).

    Raises:
        ConfigError: a missing secret, or a CA file that cannot be loaded.
    """
    verify: ssl.SSLContext | bool = spec.verify_tls
    if spec.ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=spec.ca_file)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(source, "remote.ca_file", f"cannot load {spec.ca_file}: {e}") from e
    limits = httpx.Limits(max_connections=spec.max_concurrency + 4, max_keepalive_connections=spec.max_concurrency)
    inner = httpx.AsyncHTTPTransport(verify=verify, limits=limits)
    return httpx.AsyncClient(
        transport=RetryTransport(inner, retries=spec.retries, backoff=spec.backoff, url=spec.url),
        auth=auth_of(spec, source),
        timeout=httpx.Timeout(spec.timeout, connect=spec.connect_timeout),
        follow_redirects=True,
    )
