"""The ``openai`` client configured for whole answers: the same client, requests and retries, less work per call.

:class:`WholeAnswerOpenAI` is ``openai.AsyncOpenAI`` with the URL of each path merged once, the headers of
each kind of request and the request options of each path built once, and no uuid4 for an idempotency key
that goes in no header; :class:`WholeAnswerHttpClient` is the ``openai`` package's aiohttp ``httpx`` client
(``DefaultAioHttpClient``) with two changes for requests that send a JSON body and read the whole answer:

- a request whose only parts are a method, a URL, headers, a timeout and a body (what ``openai`` builds for
  every JSON call) reuses the URL and the merged headers (the client's and the call's) of the last request
  with the same ones, instead of parsing and normalising them again;
- its transport reads the whole body on aiohttp and hands ``httpx`` a complete response, instead of a
  stream ``httpx`` reads chunk by chunk. So it cannot stream: streamed answers go through a client with
  the ``openai`` package's own transport.

Proxies from the environment are found by ``httpx`` as before (a transport per proxy); timeouts, status
errors, retries (``Retry-After``, ``x-should-retry``), headers and authentication are the ``openai`` client's.
"""

from __future__ import annotations

import base64
import itertools
import ssl
from typing import Any

import aiohttp
import httpx2
import openai

try:
    from openai._models import FinalRequestOptions as _FinalRequestOptions
except ImportError:  # pragma: no cover - an openai without it: post() builds the options
    _FinalRequestOptions = None  # type: ignore[assignment,misc]

__all__ = ["SUPPORTED", "WholeAnswerHttpClient", "WholeAnswerOpenAI"]

_CACHE_LIMIT = 64
"""Entries kept per cache: a client sends a handful of distinct URLs and header sets (one per retry count)."""
_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20)

WRITTEN_FOR = "3."
"""The ``openai`` major version whose request steps these classes override (tested in CI on it)."""


def supported(version: str) -> bool:
    """Whether an ``openai`` of ``version``, built as the installed one, is one these classes are written for."""
    return (
        version.startswith(WRITTEN_FOR)
        and _FinalRequestOptions is not None
        and issubclass(openai.DefaultAioHttpClient, httpx2.AsyncClient)
        and all(
            callable(getattr(openai.AsyncOpenAI, name, None))
            for name in ("_prepare_url", "_build_headers", "_idempotency_key", "request")
        )
    )


SUPPORTED = supported(openai.__version__)
"""Whether the installed ``openai`` is one this configuration is written for (its major version, its HTTP layer
``httpx2``, the request-building steps overridden here); else the stock client serves whole answers too."""


class WholeAnswerOpenAI(openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` that merges the base URL with each path once (a URL is parsed twice per call) and
    builds the headers of each kind of request once (the same call headers, retry count and timeout give the
    same headers while the client's key, organisation and project stay as they are)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._urls: dict[str, tuple[object, httpx2.URL]] = {}
        self._headers: dict[tuple[Any, ...], httpx2.Headers] = {}
        self._options: dict[str, Any] = {}
        self._requests = itertools.count()
        self._user_agent = super().user_agent.replace(type(self).__name__, openai.AsyncOpenAI.__name__, 1)

    @property
    def user_agent(self) -> str:
        """The stock client's (its class name and the package version): endpoints see the same client."""
        return self._user_agent

    def _prepare_url(self, url: str) -> httpx2.URL:
        base = self.base_url
        hit = self._urls.get(url)
        if hit is not None and hit[0] is base:
            return hit[1]
        merged = super()._prepare_url(url)
        if len(self._urls) >= _CACHE_LIMIT:
            self._urls.clear()
        self._urls[url] = (base, merged)
        return merged

    async def post_json(self, path: str, body: bytes) -> bytes:
        """``post(path, content=body, cast_to=bytes)``: the same request, through :meth:`request` with options
        copied from ones built once per path (building them sets a dozen defaults, deep copies included)."""
        template = self._options.get(path)
        if template is None:
            assert _FinalRequestOptions is not None  # SUPPORTED
            template = _FinalRequestOptions.construct(method="post", url=path, json_data=None, content=b"", files=None)
            if len(self._options) >= _CACHE_LIMIT:
                self._options.clear()
            self._options[path] = template
        return await self.request(bytes, template.model_copy(update={"content": body}))

    def _idempotency_key(self) -> str:
        if self._idempotency_header is None:  # the key goes in no header: any unique string does (no uuid4)
            return f"a2amesh-{next(self._requests)}"
        return super()._idempotency_key()

    def _build_headers(self, options: Any, *, retries_taken: int = 0) -> httpx2.Headers:
        custom = options.headers if isinstance(options.headers, dict) else {}
        security = options.security if isinstance(options.security, dict) else None
        timeout = options.timeout
        if (
            security is None
            or not all(type(v) is str for v in custom.values())
            or not isinstance(timeout, float | int | httpx2.Timeout | openai.NotGiven | None)
        ):
            return super()._build_headers(options, retries_taken=retries_taken)
        key = (
            retries_taken,
            tuple(custom.items()),
            tuple(sorted(security.items())),
            "client" if isinstance(timeout, openai.NotGiven) else _timeout_key(timeout),
            self.api_key,
            self.organization,
            self.project,
            self._platform is None,
        )
        headers = self._headers.get(key)
        if headers is None:
            headers = super()._build_headers(options, retries_taken=retries_taken)
            if len(self._headers) >= _CACHE_LIMIT:
                self._headers.clear()
            self._headers[key] = headers
        return httpx2.Headers(headers)  # a copy: the caller may change it


class WholeAnswerHttpClient(openai.DefaultAioHttpClient):
    """``openai.DefaultAioHttpClient`` whose JSON requests reuse their parsed URL and merged headers, and whose
    transport answers with the whole body read (so it serves no streamed answer)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._prepared: dict[tuple[Any, ...], tuple[httpx2.URL, httpx2.Headers, dict[str, Any]]] = {}

    def build_request(
        self,
        method: str,
        url: httpx2.URL | str,
        *,
        content: Any = None,
        data: Any = None,
        files: Any = None,
        json: Any = None,
        params: Any = None,
        headers: Any = None,
        cookies: Any = None,
        timeout: Any = httpx2.USE_CLIENT_DEFAULT,
        extensions: Any = None,
    ) -> httpx2.Request:
        plain = (
            isinstance(url, str)
            and isinstance(headers, list)
            and isinstance(content, bytes)
            and data is None
            and files is None
            and json is None
            and not params
            and not cookies
            and not extensions
            and not self.cookies
            and not self.params
            and not self.base_url.raw_path.strip(b"/")
            and not self.base_url.host
        )
        if not plain:
            return super().build_request(
                method,
                url,
                content=content,
                data=data,
                files=files,
                json=json,
                params=params,
                headers=headers,
                cookies=cookies,
                timeout=timeout,
                extensions=extensions,
            )
        key = (url, tuple(headers), _timeout_key(timeout))
        hit = self._prepared.get(key)
        if hit is None:
            template = super().build_request(method, url, headers=headers, timeout=timeout)
            hit = (template.url, template.headers, template.extensions)
            for name in ("Content-Length", "Host"):
                hit[1].pop(name, None)  # set again for each request by httpx
            if len(self._prepared) >= _CACHE_LIMIT:
                self._prepared.clear()
            self._prepared[key] = hit
        return httpx2.Request(method, hit[0], headers=hit[1], content=content, extensions=hit[2])

    def _init_transport(
        self,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,  # aiohttp speaks HTTP/1.1, as the openai package's own aiohttp transport
        limits: httpx2.Limits = _LIMITS,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> httpx2.AsyncBaseTransport:
        if transport is not None:
            return transport
        return _WholeBodyTransport(httpx2.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env), limits)

    def _init_proxy_transport(
        self,
        proxy: httpx2.Proxy,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx2.Limits = _LIMITS,
    ) -> httpx2.AsyncBaseTransport:
        ssl_context = httpx2.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
        return _WholeBodyTransport(ssl_context, limits, proxy=proxy)


def _timeout_key(timeout: Any) -> Any:
    if isinstance(timeout, httpx2.Timeout):
        return tuple(timeout.as_dict().items())
    return timeout


class _WholeBodyTransport(httpx2.AsyncBaseTransport):
    """An ``httpx`` transport on one aiohttp session that reads each response whole."""

    def __init__(self, ssl_context: ssl.SSLContext, limits: httpx2.Limits, proxy: httpx2.Proxy | None = None) -> None:
        self._ssl = ssl_context
        self._limits = limits
        self._proxy = str(proxy.url) if proxy is not None else None
        self._proxy_headers = dict(proxy.headers) if proxy is not None else None
        if proxy is not None and proxy.auth and self._proxy_headers is not None:
            credentials = base64.b64encode(":".join(proxy.auth).encode()).decode()
            self._proxy_headers["Proxy-Authorization"] = f"Basic {credentials}"
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[Any, ...], aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            ssl=self._ssl,
            limit=self._limits.max_connections or 0,
            keepalive_timeout=self._limits.keepalive_expiry,
        )
        self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _timeout(self, timeout: dict[str, Any]) -> aiohttp.ClientTimeout:
        key = tuple(timeout.items())
        t = self._timeouts.get(key)
        if t is None:
            t = aiohttp.ClientTimeout(
                sock_connect=timeout.get("connect"), sock_read=timeout.get("read"), connect=timeout.get("pool")
            )
            if len(self._timeouts) >= _CACHE_LIMIT:
                self._timeouts.clear()
            self._timeouts[key] = t
        return t

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session = self._session if self._session is not None and not self._session.closed else self._open()
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers.raw}
        try:
            body = request.content
        except httpx2.RequestNotRead:
            body = await request.aread()
        try:
            async with session.request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                auto_decompress=False,  # httpx decodes the body by its Content-Encoding
                timeout=self._timeout(request.extensions.get("timeout") or {}),
                server_hostname=request.extensions.get("sni_hostname"),
                proxy=self._proxy,
                proxy_headers=self._proxy_headers,
            ) as resp:
                data = await resp.read()
        except aiohttp.ClientError as e:
            raise _httpx_error(e, request) from e
        except TimeoutError as e:
            raise httpx2.ReadTimeout(str(e) or "timed out", request=request) from e
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if resp.reason:
            extensions["reason_phrase"] = resp.reason.encode()
        return httpx2.Response(
            resp.status, headers=resp.raw_headers, content=data, request=request, extensions=extensions
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _httpx_error(e: aiohttp.ClientError, request: httpx2.Request) -> httpx2.RequestError:
    """The ``httpx`` error the ``openai`` client retries or reports for an aiohttp error."""
    message = str(e) or type(e).__name__
    if isinstance(e, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        return httpx2.ProxyError(message, request=request)
    if isinstance(e, aiohttp.ConnectionTimeoutError):
        return httpx2.ConnectTimeout(message, request=request)
    if isinstance(e, aiohttp.ServerTimeoutError):
        return httpx2.ReadTimeout(message, request=request)
    if isinstance(e, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(message, request=request)
    if isinstance(e, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return httpx2.UnsupportedProtocol(message, request=request)
    if isinstance(e, aiohttp.ClientPayloadError):
        return httpx2.ReadError(message, request=request)
    return httpx2.NetworkError(message, request=request)
