"""A scripted OpenAI-compatible HTTP server for tests (pydantic-ai's ``FunctionModel`` idea, over real HTTP).

It serves ``POST /v1/chat/completions`` (JSON, or SSE when ``stream`` is true), ``POST /v1/embeddings``
(deterministic vectors, below), ``POST /v1/images/generations`` (a tiny PNG per image, base64) and
``GET /v1/models``
from a background thread on ``127.0.0.1``, so the real ``openai`` client — in the test's event loop
or in a separate agent process pointed at :attr:`FakeOpenAIServer.base_url` — talks to it as to any
provider.

A test scripts it turn by turn::

    with FakeOpenAIServer() as llm:
        llm.script(
            Reply(tool_calls=[ToolCall("save_artifact", {"name": "out.json", "content": {...}})]),
            HttpError(429, retry_after=0.01),
            "Done. «result:artifact=out.json status=success»",
        )
        ...  # run the agent with base_url=llm.base_url
        assert "out.json" in llm.requests[1]["messages"][-1]["content"]

Each chat request takes the next scripted response; when the script is empty the ``responder``
callable (``request_json -> response``) answers, for per-request logic such as concurrent agents.
A request that finds neither is answered ``400`` and reported by :meth:`FakeOpenAIServer.check`.

Embeddings need no script: each text gets a bag-of-words vector of :attr:`FakeOpenAIServer.embedding_dimensions`
numbers (every lower-cased word adds 1 to a bucket chosen by its hash; the vector is normalised), so texts
that share words are close by cosine similarity, and the same text always gets the same vector.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import math
import re
import socket
import socketserver
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = [
    "PNG",
    "FakeOpenAIServer",
    "embedding",
    "HttpError",
    "Raw",
    "Reply",
    "Responder",
    "ResponseSpec",
    "ToolCall",
    "Usage",
]

log = logging.getLogger(__name__)

JSON = dict[str, Any]

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""The 1×1 PNG every generated image is."""


@dataclass(frozen=True)
class ToolCall:
    """One function call the assistant asks for.

    Attributes:
        name: the tool's name.
        arguments: a JSON object (encoded for the wire) or a raw string, e.g. deliberately invalid JSON.
        id: the call id; ``call_{request}_{index}`` when omitted.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Usage:
    """Token counts reported for a completion."""

    prompt_tokens: int
    completion_tokens: int

    def to_json(self) -> JSON:
        """The OpenAI ``usage`` object."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass(frozen=True)
class Reply:
    """An assistant answer: text, tool calls, or both.

    Attributes:
        content: the text, or ``None`` (typical with tool calls).
        tool_calls: the function calls, in order.
        finish_reason: defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``.
        usage: the reported usage; defaults to a word count of the prompt and of the answer.
        delay: seconds to wait before answering (to make a client time out).
        chunk_size: characters per streamed content or arguments delta.
        chunk_delay: seconds between streamed chunks.
        model: the model name reported; defaults to the requested one.
    """

    content: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    delay: float = 0.0
    chunk_size: int = 8
    chunk_delay: float = 0.0
    model: str | None = None


@dataclass(frozen=True)
class HttpError:
    """An HTTP error answer in OpenAI's error format.

    Attributes:
        status: the HTTP status, e.g. 429 or 500.
        message: ``error.message``.
        retry_after: seconds for a ``Retry-After`` header (fractions are honoured by the openai client).
        code: ``error.code``.
        delay: seconds to wait before answering.
        headers: extra response headers, e.g. ``{"x-should-retry": "false"}``.
    """

    status: int
    message: str = "scripted error"
    retry_after: float | None = None
    code: str | None = None
    delay: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Raw:
    """An answer sent byte for byte (malformed JSON, a broken SSE stream, an odd content type)."""

    body: str | bytes
    status: int = 200
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


ResponseSpec = Reply | HttpError | Raw | str
"""What one chat request is answered with; a plain ``str`` is ``Reply(content=...)``."""

Responder = Callable[[JSON], ResponseSpec]
"""Per-request logic: gets the request's JSON body, returns the answer. Runs in a server thread."""


class FakeOpenAIServer:
    """A real HTTP server speaking the OpenAI chat-completions API from a script.

    Args:
        responder: answers requests once the script is used up.
        models: the model ids ``GET /v1/models`` lists.
        api_key: when set, requests without ``Authorization: Bearer <api_key>`` get ``401``.
    """

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        models: Sequence[str] = ("fake-model",),
        api_key: str | None = None,
    ) -> None:
        self.responder = responder
        self.models = tuple(models)
        self.embedding_dimensions = 32
        """Length of the vectors ``/v1/embeddings`` answers (change it to provoke a dimension mismatch)."""
        self._embedding_requests: list[JSON] = []
        self._image_requests: list[JSON] = []
        self.api_key = api_key
        self._script: deque[ResponseSpec] = deque()
        self._requests: list[JSON] = []
        self._headers: list[dict[str, str]] = []
        self._errors: list[str] = []
        self._cond = threading.Condition()
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---

    def start(self) -> Self:
        """Bind a free port on 127.0.0.1 and serve from a background thread."""
        if self._httpd is not None:
            raise RuntimeError("fake OpenAI server already started")
        self._stopping.clear()
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections (ending any scripted delay) and wait for every thread."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client, ending in ``/v1``."""
        if self._httpd is None:
            raise RuntimeError("fake OpenAI server is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    # --- scripting ---

    def script(self, *responses: ResponseSpec) -> None:
        """Queue answers for the next chat requests, in order."""
        with self._cond:
            self._script.extend(responses)

    @property
    def pending(self) -> int:
        """How many scripted answers are still queued."""
        with self._cond:
            return len(self._script)

    # --- what was received ---

    @property
    def requests(self) -> list[JSON]:
        """The JSON body of every chat request received, in arrival order."""
        with self._cond:
            return list(self._requests)

    @property
    def embedding_requests(self) -> list[JSON]:
        """The JSON body of every embeddings request received, in arrival order."""
        with self._cond:
            return list(self._embedding_requests)

    @property
    def image_requests(self) -> list[JSON]:
        """The JSON body of every images request received, in arrival order."""
        with self._cond:
            return list(self._image_requests)

    def _image_request(self, body: JSON) -> None:
        with self._cond:
            self._image_requests.append(body)

    def _embed_request(self, body: JSON) -> tuple[int, list[list[float]]]:
        with self._cond:
            self._embedding_requests.append(body)
            dimensions = self.embedding_dimensions
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return dimensions, [embedding(str(text), dimensions) for text in texts]

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The headers (lower-case names) of every chat request, parallel to :attr:`requests`."""
        with self._cond:
            return list(self._headers)

    @property
    def last_request(self) -> JSON:
        """The most recent chat request body."""
        with self._cond:
            if not self._requests:
                raise AssertionError("the fake OpenAI server has received no chat request")
            return self._requests[-1]

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[JSON]:
        """Block until ``count`` chat requests have arrived; raise AssertionError after ``timeout`` seconds."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= count, timeout):
                raise AssertionError(
                    f"the fake OpenAI server got {len(self._requests)} chat request(s) within {timeout}s, "
                    f"expected {count}"
                )
            return list(self._requests)

    async def wait_for_requests_async(self, count: int) -> list[JSON]:
        """Wait in the event loop until ``count`` chat requests have arrived; bound it with ``asyncio.timeout``."""
        loop = asyncio.get_running_loop()
        arrived: asyncio.Future[None] = loop.create_future()
        with self._cond:
            if len(self._requests) >= count:
                return list(self._requests)
            self._waiters.append((count, loop, arrived))
        try:
            await arrived
        finally:
            with self._cond:
                self._waiters = [w for w in self._waiters if w[2] is not arrived]
        return self.requests

    @property
    def errors(self) -> list[str]:
        """Problems the server met: requests nothing answered, responders that raised."""
        with self._cond:
            return list(self._errors)

    def check(self) -> None:
        """Raise AssertionError listing :attr:`errors`, if any."""
        problems = self.errors
        if problems:
            raise AssertionError("fake OpenAI server: " + "; ".join(problems))

    # --- used by the handler threads ---

    def _take(self, body: JSON, headers: dict[str, str]) -> tuple[int, ResponseSpec]:
        """Record a chat request and pick its answer; the n-th request gets the n-th scripted answer."""
        with self._cond:
            self._requests.append(body)
            self._headers.append(headers)
            number = len(self._requests)
            scripted = self._script.popleft() if self._script else None
            self._cond.notify_all()
            for count, loop, arrived in self._waiters:
                if number >= count:
                    with contextlib.suppress(RuntimeError):  # that test's loop is already closed
                        loop.call_soon_threadsafe(_resolve, arrived)
        return number, scripted if scripted is not None else self._respond(body, number)

    def _respond(self, body: JSON, number: int) -> ResponseSpec:
        """The responder's answer when the script is used up; a 400/500 reported by :meth:`check` otherwise."""
        if self.responder is None:
            problem = f"chat request #{number} found no scripted response and no responder"
            self._error(problem)
            return HttpError(400, problem, code="fake_unscripted", headers={"x-should-retry": "false"})
        try:
            return self.responder(body)
        except Exception as e:  # the test's own bug: report it at check() instead of hiding it in a 500
            problem = f"responder raised on chat request #{number}: {type(e).__name__}: {e}"
            self._error(problem)
            return HttpError(500, problem, code="fake_responder_error", headers={"x-should-retry": "false"})

    def _error(self, problem: str) -> None:
        log.error("fake_openai.error: %s", problem)
        with self._cond:
            self._errors.append(problem)

    def _sleep(self, seconds: float) -> bool:
        """Wait, unless the server stops first; False when it stopped."""
        return seconds <= 0 or not self._stopping.wait(seconds)


def _resolve(arrived: asyncio.Future[None]) -> None:
    if not arrived.done():
        arrived.set_result(None)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the stdlib's 5 drops bursts of connects from concurrent agents (1 s SYN retry)

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], fake: FakeOpenAIServer):
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (getfqdn), which can stall on a machine without DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("fake_openai.connection_error client=%s", client_address, exc_info=True)

    def close_connections(self) -> None:
        """Unblock handler threads waiting on keep-alive reads or on slow clients."""
        with self.connections_lock:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # headers and body leave in separate writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("fake_openai.http " + format, *args)

    # --- routes ---

    def do_GET(self) -> None:
        fake = self.server.fake
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [_model(m) for m in fake.models]})
        elif path.startswith("/v1/models/") and path.removeprefix("/v1/models/") in fake.models:
            self._send_json(200, _model(path.removeprefix("/v1/models/")))
        else:
            self._send_error_json(404, f"no route GET {path}", "not_found")

    def do_POST(self) -> None:
        fake = self.server.fake
        path = self.path.split("?", 1)[0].rstrip("/")
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path not in ("/v1/chat/completions", "/v1/embeddings", "/v1/images/generations"):
            self._send_error_json(404, f"no route POST {path}", "not_found")
            return
        if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            self._send_error_json(401, "Incorrect API key provided", "invalid_api_key")
            return
        try:
            body = json.loads(raw)
        except ValueError as e:
            self._send_error_json(400, f"request body is not JSON: {e}", "invalid_json")
            return
        if path == "/v1/embeddings":
            self._embeddings(body)
            return
        if path == "/v1/images/generations":
            self._images(body)
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send_error_json(400, "request body needs a 'messages' array", "invalid_request")
            return
        number, spec = fake._take(body, {k.lower(): v for k, v in self.headers.items()})
        try:
            self._answer(body, number, spec)
        except OSError:
            # The client went away (e.g. it timed out during a scripted delay).
            self.close_connection = True

    # --- answers ---

    def _images(self, body: Any) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            self._send_error_json(400, "request body needs a 'prompt' text", "invalid_request")
            return
        self.server.fake._image_request(body)
        n = int(body.get("n") or 1)
        data = [{"b64_json": base64.b64encode(PNG).decode(), "revised_prompt": f"fake: {body['prompt']}"}] * n
        self._send_json(200, {"created": int(time.time()), "data": data})

    def _embeddings(self, body: Any) -> None:
        ok = isinstance(body, dict) and (
            isinstance(body.get("input"), str)
            or (isinstance(body.get("input"), list) and all(isinstance(t, str) for t in body["input"]))
        )
        if not ok:
            self._send_error_json(400, "request body needs an 'input' text or list of texts", "invalid_request")
            return
        _, vectors = self.server.fake._embed_request(body)
        tokens = sum(_words(t) for t in (body["input"] if isinstance(body["input"], list) else [body["input"]]))
        self._send_json(
            200,
            {
                "object": "list",
                "model": body.get("model") or "fake-embedding",
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _answer(self, request: JSON, number: int, spec: ResponseSpec) -> None:
        fake = self.server.fake
        reply = Reply(content=spec) if isinstance(spec, str) else spec
        if not fake._sleep(reply.delay):
            self.close_connection = True
            return
        if isinstance(reply, HttpError):
            headers = dict(reply.headers)
            if reply.retry_after is not None:
                headers["Retry-After"] = f"{reply.retry_after:g}"
            self._send_error_json(reply.status, reply.message, reply.code, headers)
        elif isinstance(reply, Raw):
            data = reply.body.encode() if isinstance(reply.body, str) else reply.body
            self._send_bytes(reply.status, data, reply.content_type, reply.headers)
        elif request.get("stream"):
            self._stream(request, number, reply)
        else:
            self._send_json(200, _completion(request, number, reply))

    def _stream(self, request: JSON, number: int, reply: Reply) -> None:
        fake = self.server.fake
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, chunk in enumerate(_chunks(request, number, reply, include_usage)):
            if index and not fake._sleep(reply.chunk_delay):
                self.close_connection = True
                return
            self._write_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(self, status: int, body: JSON, headers: Mapping[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(body).encode(), "application/json", headers or {})

    def _send_error_json(
        self, status: int, message: str, code: str | None, headers: Mapping[str, str] | None = None
    ) -> None:
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}
        error = {"message": message, "type": kind.get(status, "server_error" if status >= 500 else "api_error")}
        if status == 429:
            error["type"] = "rate_limit_error"
        self._send_json(status, {"error": {**error, "param": None, "code": code}}, headers)

    def _send_bytes(self, status: int, data: bytes, content_type: str, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def _model(model_id: str) -> JSON:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "a2amesh-tests"}


def _call_id(number: int, index: int, call: ToolCall) -> str:
    return call.id or f"call_{number}_{index}"


def _arguments(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _words(value: Any) -> int:
    """Words of a message content: a string, or a list of parts whose ``text`` counts."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(part.get("text")) for part in value if isinstance(part, Mapping))
    return 0


def _usage(request: JSON, reply: Reply) -> JSON:
    """The scripted usage, else a word count of the messages' contents and of the answer."""
    if reply.usage is not None:
        return reply.usage.to_json()
    messages = request.get("messages") or []
    prompt = sum(_words(m.get("content")) for m in messages if isinstance(m, Mapping))
    completion = _words(reply.content or "") + sum(_words(_arguments(c)) + 1 for c in reply.tool_calls)
    return Usage(prompt_tokens=max(1, prompt), completion_tokens=max(1, completion)).to_json()


def _envelope(request: JSON, number: int, reply: Reply, obj: str) -> JSON:
    return {
        "id": f"chatcmpl-fake-{number}",
        "object": obj,
        "created": int(time.time()),
        "model": reply.model or str(request.get("model") or "fake-model"),
        "system_fingerprint": None,
    }


def _finish_reason(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _completion(request: JSON, number: int, reply: Reply) -> JSON:
    message: JSON = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(number, i, call),
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for i, call in enumerate(reply.tool_calls)
        ]
    choice = {"index": 0, "message": message, "finish_reason": _finish_reason(reply), "logprobs": None}
    return {
        **_envelope(request, number, reply, "chat.completion"),
        "choices": [choice],
        "usage": _usage(request, reply),
    }


def _pieces(text: str, size: int) -> Iterator[str]:
    size = max(1, size)
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _chunks(request: JSON, number: int, reply: Reply, include_usage: bool) -> Iterator[JSON]:
    """The ``chat.completion.chunk`` objects of a streamed answer, as OpenAI sends them."""
    envelope = _envelope(request, number, reply, "chat.completion.chunk")
    extra: JSON = {"usage": None} if include_usage else {}

    def chunk(delta: JSON, finish_reason: str | None = None) -> JSON:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return {**envelope, "choices": [choice], **extra}

    yield chunk({"role": "assistant", "content": "" if reply.content is not None else None})
    for piece in _pieces(reply.content or "", reply.chunk_size):
        yield chunk({"content": piece})
    for i, call in enumerate(reply.tool_calls):
        head = {"index": i, "id": _call_id(number, i, call), "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for piece in _pieces(_arguments(call), reply.chunk_size):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, _finish_reason(reply))
    if include_usage:
        yield {**envelope, "choices": [], "usage": _usage(request, reply)}


def embedding(text: str, dimensions: int) -> list[float]:
    """The fake's deterministic vector of a text: a normalised bag of hashed lower-case words."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % dimensions
        vector[bucket] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]
