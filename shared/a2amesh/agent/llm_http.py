"""Whole-answer JSON calls to a model endpoint over aiohttp: one session per event loop, bounded retries.

A workflow node's model calls ask for whole answers (nobody reads deltas), two per node. Through the
``openai`` client each cost about 0.5 ms more CPU than the HTTP exchange itself: request options built
as pydantic models, an httpx request, URL and headers built and then converted to an aiohttp request,
auth and redirect wrappers (``bench/README.md``, issue 27). So whole answers (chat completions without
a delta reader, embeddings, images) are posted here, with the headers and base URL the ``openai``
client is configured with; streamed answers still go through that client, which parses their chunks.

Retries follow the ``openai`` client's documented policy: HTTP 408, 409, 429 and 5xx answers,
timeouts and connection errors are retried up to ``max_retries`` times, after a server's
``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date) when it asks for at most a minute,
else after 0.5 s doubling per retry, capped at 8 s, less up to a quarter (jitter); an
``x-should-retry: true|false`` header decides where a server sends one.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import random
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from a2amesh.errors import LlmError
from a2amesh.jsontext import dumps_bytes, loads

__all__ = ["JsonEndpoint", "endpoint_message", "retry_delay"]

RETRY_STATUSES = frozenset({408, 409, 429})
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0
MAX_RETRY_AFTER = 60.0


class JsonEndpoint:
    """POSTs JSON bodies under one base URL and returns the answer's bytes; one per event loop.

    Args:
        base_url: the endpoint, ending in ``/`` (paths are appended).
        headers: sent with every request (authorization, content type, client identity).
        timeout: seconds to connect, and seconds without a byte of the answer, per attempt.
        max_retries: retries of one call (see the module docstring).
        name: the endpoint as its failures name it (the base URL as configured).
    """

    def __init__(
        self, *, base_url: str, headers: Mapping[str, str], timeout: float, max_retries: int, name: str
    ) -> None:
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.name = name
        self.timeout = timeout
        self.max_retries = max_retries
        self._headers = dict(headers)
        self._session: aiohttp.ClientSession | None = None
        self._proxy: tuple[URL | None, aiohttp.BasicAuth | None] = (None, None)

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # The proxy from HTTP(S)_PROXY / NO_PROXY, looked up once: a session that trusts the environment
            # looks it (and ~/.netrc) up in a thread on every request, about 0.3 ms of CPU per call.
            try:
                self._proxy = await asyncio.to_thread(get_env_proxy_for_url, URL(self.base_url))
            except LookupError:
                self._proxy = (None, None)
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, connect=self.timeout, sock_read=self.timeout)
            )
        return self._session

    async def aclose(self) -> None:
        """Close the session (its connections)."""
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):
                await session.close()

    async def post(self, path: str, body: Any) -> bytes:
        """POST ``body`` as JSON to ``path`` (relative to the base URL); the answer's bytes (HTTP < 400).

        Raises:
            LlmError: the endpoint answered an error status, timed out or could not be reached, after the
                retries; the message says which, naming the endpoint.
        """
        url = self.base_url + path.lstrip("/")
        data = dumps_bytes(body)
        retries = 0
        while True:
            try:
                session = await self._client()
                proxy, proxy_auth = self._proxy
                async with session.post(
                    url, data=data, headers=self._headers, proxy=proxy, proxy_auth=proxy_auth
                ) as resp:
                    content = await resp.read()
                    if resp.status < 400:
                        return content
                    if retries >= self.max_retries or not should_retry(resp.status, resp.headers):
                        raise self.status_error(resp.status, endpoint_message(content, resp.reason))
                    delay = retry_delay(retries, resp.headers)
            except TimeoutError as e:
                if retries >= self.max_retries:
                    raise self.timeout_error() from e
                delay = retry_delay(retries, None)
            except aiohttp.ClientError as e:
                if retries >= self.max_retries:
                    raise self.connection_error(str(e) or type(e).__name__) from e
                delay = retry_delay(retries, None)
            retries += 1
            await asyncio.sleep(delay)

    def status_error(self, status: int, message: str) -> LlmError:
        """The failure of an error answer that is not retried (any more)."""
        return LlmError(
            f"the model endpoint {self.name} answered HTTP {status} (after {self.max_retries} retries): {message}",
            status=status,
        )

    def timeout_error(self) -> LlmError:
        """The failure of a call that timed out on its last attempt."""
        return LlmError(
            f"the model endpoint {self.name} did not answer within {self.timeout:g}s (after {self.max_retries} retries)"
        )

    def connection_error(self, detail: str) -> LlmError:
        """The failure of a call whose last attempt could not reach the endpoint."""
        return LlmError(f"cannot reach the model endpoint {self.name}: {detail}")


def should_retry(status: int, headers: Mapping[str, str]) -> bool:
    """Whether an error answer is worth another attempt (the module docstring's policy)."""
    after = retry_after(headers)
    if after is not None and after > MAX_RETRY_AFTER:
        return False
    verdict = headers.get("x-should-retry")
    if verdict in ("true", "false"):
        return verdict == "true"
    return status in RETRY_STATUSES or status >= 500


def retry_delay(retries: int, headers: Mapping[str, str] | None) -> float:
    """Seconds to wait before retry number ``retries + 1``: the server's ask, else the backoff."""
    after = retry_after(headers) if headers is not None else None
    if after is not None and 0 < after <= MAX_RETRY_AFTER:
        return after
    return min(FIRST_BACKOFF * 2.0 ** min(retries, 30), MAX_BACKOFF) * (1 - 0.25 * random.random())


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The delay a server asked for in seconds (``retry-after-ms``, else ``Retry-After``), or None."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        return seconds if math.isfinite(seconds) else MAX_RETRY_AFTER + 1
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None


def endpoint_message(content: bytes, reason: str | None) -> str:
    """What an error answer says: its JSON ``error.message`` (or ``message``), else its text, else the reason."""
    try:
        body = loads(content)
    except ValueError:
        body = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str) and inner:
            return inner
    text = content.decode("utf-8", "replace").strip()
    return text[:500] if text else (reason or "no message")
