"""A chat-completions client for any OpenAI-compatible endpoint, through the ``openai`` package.

Each call has a timeout and bounded retries with backoff on HTTP 408/409/429/5xx and connection errors
(the ``openai`` client's own retry loop, which honours ``Retry-After``). Streaming answers are
accumulated (text and tool calls) while their text deltas are passed on, coalesced to at most one
every 50 ms.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import openai

from a2amesh import metrics, tracing
from a2amesh.agent.openai_http import SUPPORTED, WholeAnswerHttpClient, WholeAnswerOpenAI
from a2amesh.errors import LlmError
from a2amesh.jsontext import dumps_bytes, loads
from a2amesh.logs import get_logger

__all__ = [
    "DELTA_INTERVAL",
    "ChatModel",
    "Completion",
    "DeltaCoalescer",
    "Embeddings",
    "GeneratedImage",
    "ToolCallRequest",
]

log = get_logger("llm")

DELTA_INTERVAL = 0.05
"""Seconds between two published text deltas at most once (SPEC §3.2: coalesced ≥ 50 ms)."""


@dataclass(frozen=True)
class ToolCallRequest:
    """One function call the model asked for."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Embeddings:
    """Vectors of an embeddings call, in the order of its texts."""

    vectors: list[list[float]]
    model: str
    prompt_tokens: int = 0


@dataclass(frozen=True)
class GeneratedImage:
    """One image of an images call: its bytes (decoded from base64) and the prompt the endpoint used."""

    data: bytes
    revised_prompt: str | None = None


@dataclass
class Completion:
    """One answer of the model."""

    content: str | None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    finish_reasons: list[str] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return msg


class DeltaCoalescer:
    """Buffers text deltas and passes them on at most once per ``interval`` seconds (and at the end)."""

    def __init__(self, sink: Callable[[str], Awaitable[None]], interval: float = DELTA_INTERVAL) -> None:
        self._sink = sink
        self._interval = interval
        self._buffer: list[str] = []
        self._last = 0.0

    async def feed(self, text: str) -> None:
        """Add a delta; publish the buffer when the interval has passed since the last publish."""
        if not text:
            return
        self._buffer.append(text)
        if time.monotonic() - self._last >= self._interval:
            await self.flush()

    async def flush(self) -> None:
        """Publish what is buffered (best effort: a failed publish is dropped)."""
        if not self._buffer:
            return
        text, self._buffer = "".join(self._buffer), []
        self._last = time.monotonic()
        try:
            await self._sink(text)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.debug("llm.delta_dropped", error=str(e) or type(e).__name__)


class ChatModel:
    """One model behind an OpenAI-compatible endpoint.

    Args:
        base_url: the endpoint, e.g. ``http://localhost:11434/v1``.
        api_key: the key (any non-empty string for endpoints that need none).
        model: the model name.
        timeout: seconds per HTTP request.
        max_retries: retries of one call on 408/409/429/5xx and connection errors, with backoff.
        temperature: sampling temperature, or None for the endpoint's default.
        stream: ask for streamed answers (text deltas are published while they arrive).
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float,
        max_retries: int,
        temperature: float | None = None,
        stream: bool = True,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.stream = stream
        self._api_key = api_key
        self._clients: dict[bool, openai.AsyncOpenAI] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _openai(self, *, streaming: bool = False) -> openai.AsyncOpenAI:
        """The client for whole answers (:mod:`~a2amesh.agent.openai_http`), or the one for streamed answers."""
        # An HTTP client's connections belong to one event loop: make them per loop (tests run many loops).
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._clients = {}
            self._loop = loop
        client = self._clients.get(streaming)
        if client is None:
            options: dict[str, Any] = {
                "base_url": self.base_url,
                "api_key": self._api_key,
                "timeout": self.timeout,
                "max_retries": self.max_retries,
            }
            lean = None if streaming else _whole_answer_http_client()
            if lean is not None:
                client = WholeAnswerOpenAI(**options, http_client=lean)
            else:
                client = openai.AsyncOpenAI(**options, http_client=_http_client())
            self._clients[streaming] = client
        return client

    async def aclose(self) -> None:
        """Close the HTTP clients of the running loop, if any."""
        clients, self._clients = self._clients, {}
        if self._loop is asyncio.get_running_loop():
            for client in clients.values():
                with contextlib.suppress(Exception):
                    await client.close()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_delta: Callable[[str], Awaitable[None]] | None = None,
        stream: bool | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Completion:
        """One chat completion.

        ``options`` are further request fields (``model``, ``temperature``, ``max_tokens``,
        ``response_format``) that override this model's own for this call.

        Raises:
            LlmError: the endpoint failed after its retries, timed out, or could not be reached.
        """
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if options:
            kwargs.update({k: v for k, v in options.items() if v is not None})
        # Stream only when someone reads the deltas: a streamed answer costs about twice the client CPU.
        streaming = (self.stream if stream is None else stream) and on_delta is not None
        if not tracing.enabled:
            c = await self._complete(kwargs, streaming, on_delta)
        else:
            with tracing.model_span(str(kwargs["model"])) as span:
                c = await self._complete(kwargs, streaming, on_delta)
                tracing.model_result(
                    span,
                    model=c.model,
                    input_tokens=c.prompt_tokens,
                    output_tokens=c.completion_tokens,
                    finish_reasons=c.finish_reasons,
                )
        if metrics.enabled:
            metrics.model_tokens(c.model, c.prompt_tokens, c.completion_tokens)
        return c

    async def _complete(
        self, kwargs: dict[str, Any], streaming: bool, on_delta: Callable[[str], Awaitable[None]] | None
    ) -> Completion:
        try:
            if streaming:
                return await self._streamed(kwargs, on_delta)
            body = await self._post("/chat/completions", dumps_bytes(kwargs))
        except openai.OpenAIError as e:
            raise self._failure(e) from e
        return self._completion_of(body)

    async def _post(self, path: str, body: bytes) -> bytes:
        """POST a JSON body through the whole-answer client; the answer's body."""
        client = self._openai()
        if isinstance(client, WholeAnswerOpenAI):
            return await client.post_json(path, body)
        return await client.post(path, content=body, cast_to=bytes)

    async def embed(self, texts: list[str], *, model: str) -> Embeddings:
        """Embed texts with ``POST /embeddings`` (one vector per text, in order).

        Raises:
            LlmError: the endpoint failed after its retries, or answered something that is not embeddings.
        """
        try:
            body = await self._post(
                "/embeddings", dumps_bytes({"model": model, "input": texts, "encoding_format": "float"})
            )
        except openai.OpenAIError as e:
            raise self._failure(e) from e
        try:
            data = loads(body)
            rows = sorted(data["data"], key=lambda row: int(row.get("index", 0)))
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
            usage = data.get("usage") or {}
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise LlmError(
                f"the model endpoint {self.base_url} answered malformed embeddings ({type(e).__name__}: {e})"
            ) from e
        if len(vectors) != len(texts):
            raise LlmError(f"the model endpoint {self.base_url} gave {len(vectors)} embeddings for {len(texts)} texts")
        return Embeddings(vectors, str(data.get("model") or model), int(usage.get("prompt_tokens") or 0))

    async def images(self, prompt: str, *, model: str | None, n: int = 1, **options: Any) -> list[GeneratedImage]:
        """Generate images with ``POST /images/generations`` (``response_format: b64_json``).

        ``options`` are further request fields (``size``, ``quality``, ``style``); None values are left out.

        Raises:
            LlmError: the endpoint failed after its retries, or answered no image data.
        """
        body: dict[str, Any] = {"prompt": prompt, "n": n, "response_format": "b64_json"}
        if model:
            body["model"] = model
        body.update({k: v for k, v in options.items() if v is not None})
        try:
            raw = await self._post("/images/generations", dumps_bytes(body))
        except openai.OpenAIError as e:
            raise self._failure(e) from e
        try:
            rows = loads(raw)["data"]
            images = [GeneratedImage(base64.b64decode(row["b64_json"]), row.get("revised_prompt")) for row in rows]
        except (ValueError, TypeError, KeyError, binascii.Error) as e:
            raise LlmError(
                f"the images endpoint {self.base_url} answered no base64 image data ({type(e).__name__}: {e})"
            ) from e
        if not images:
            raise LlmError(f"the images endpoint {self.base_url} answered no image")
        return images

    def _failure(self, e: openai.OpenAIError) -> LlmError:
        """An ``openai`` error as one line saying what the endpoint did."""
        if isinstance(e, openai.APIStatusError):
            return LlmError(
                f"the model endpoint {self.base_url} answered HTTP {e.status_code} "
                f"(after {self.max_retries} retries): {_error_message(e)}",
                status=e.status_code,
            )
        if isinstance(e, openai.APITimeoutError):
            return LlmError(
                f"the model endpoint {self.base_url} did not answer within {self.timeout:g}s "
                f"(after {self.max_retries} retries)"
            )
        if isinstance(e, openai.APIConnectionError):
            return LlmError(f"cannot reach the model endpoint {self.base_url}: {e}")
        return LlmError(f"the model endpoint {self.base_url} failed: {e}")

    def _completion_of(self, body: bytes) -> Completion:
        """Read a chat-completion response body (the JSON is read directly, without the client's typed models)."""
        try:
            data = loads(body)
            choices = data.get("choices") or []
            msg = (choices[0].get("message") or {}) if choices else {}
            calls = [
                ToolCallRequest(
                    str(c.get("id") or f"call_{i}"),
                    str(c["function"].get("name") or ""),
                    str(c["function"].get("arguments") or ""),
                )
                for i, c in enumerate(msg.get("tool_calls") or [])
                if c.get("type", "function") == "function"
            ]
            usage = data.get("usage") or {}
            content = msg.get("content")
            return Completion(
                content=content if isinstance(content, str) else None,
                tool_calls=calls,
                model=str(data.get("model") or self.model),
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                total_tokens=int(usage.get("total_tokens") or 0),
                finish_reasons=[str(c["finish_reason"]) for c in choices if c.get("finish_reason")],
            )
        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
            raise LlmError(
                f"the model endpoint {self.base_url} answered a malformed chat completion "
                f"({type(e).__name__}: {e}): {body[:200]!r}"
            ) from e

    async def _streamed(self, kwargs: dict[str, Any], on_delta: Callable[[str], Awaitable[None]] | None) -> Completion:
        coalescer = DeltaCoalescer(on_delta) if on_delta is not None else None
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        out = Completion(content=None, model=self.model)
        stream = await self._openai(streaming=True).chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
        async with stream:
            async for chunk in stream:
                if chunk.model:
                    out.model = chunk.model
                if chunk.usage is not None:
                    out.prompt_tokens = chunk.usage.prompt_tokens
                    out.completion_tokens = chunk.usage.completion_tokens
                    out.total_tokens = chunk.usage.total_tokens
                for choice in chunk.choices:
                    if choice.finish_reason:
                        out.finish_reasons.append(choice.finish_reason)
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        if coalescer is not None:
                            await coalescer.feed(delta.content)
                    for tc in delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": []})
                        if tc.id:
                            slot["id"] = tc.id
                        if tc.function is not None:
                            if tc.function.name:
                                slot["name"] += tc.function.name
                            if tc.function.arguments:
                                slot["arguments"].append(tc.function.arguments)
        if coalescer is not None:
            await coalescer.flush()
        out.content = "".join(text) if text else None
        out.tool_calls = [
            ToolCallRequest(s["id"] or f"call_{i}", s["name"], "".join(s["arguments"]))
            for i, s in sorted(calls.items())
        ]
        return out


def _http_client() -> Any:
    """The ``openai`` client's aiohttp transport (its ``aiohttp`` extra), else None for its default (httpx).

    aiohttp's C HTTP parser and single-write requests cost about a third less client CPU per call than
    the default transport (``bench/HISTORY.md``, third round); proxies from the environment are honoured by both.
    """
    factory = getattr(openai, "DefaultAioHttpClient", None)
    if factory is None:
        return None
    try:
        return factory()
    except RuntimeError:  # the aiohttp extra is not installed
        return None


def _whole_answer_http_client() -> Any:
    """:class:`~a2amesh.agent.openai_http.WholeAnswerHttpClient`, or None without the aiohttp extra or with an
    ``openai`` it is not written for."""
    if not SUPPORTED:
        return None
    try:
        return WholeAnswerHttpClient()
    except RuntimeError:
        return None


def _error_message(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(e.message)
