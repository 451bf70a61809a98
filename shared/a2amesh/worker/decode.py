"""The one decode path of every message a worker receives: work and control, agent host and executor.

A body is checked in this order, each failure a precise :class:`~a2amesh.errors.RpcError` (docs/protocol.md
§1, §8): size, JSON (nesting at most :data:`MAX_JSON_DEPTH`, no lone UTF-16 surrogates), the JSON-RPC
envelope, the method, ``A2A-Version``, the params; a work request then its numeric headers. Nothing here
raises anything else for any input: the intake (:mod:`a2amesh.worker.intake`) relies on that.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from a2amesh.bus import headers as h
from a2amesh.errors import RpcError, TransportError, VersionNotSupported
from a2amesh.protocol import Message, codes
from a2amesh.protocol.base import A2AModel
from a2amesh.protocol.jsonrpc import PARAMS_BY_METHOD, JsonRpcId, JsonRpcRequest, SendMessageRequest
from a2amesh.rpc import pydantic_problem

__all__ = [
    "control_part",
    "CLOCK_SKEW",
    "MAX_INT_ID",
    "MAX_DEADLINE_MS",
    "MAX_JSON_DEPTH",
    "Body",
    "Decoded",
    "WorkRequest",
    "call_depth_of",
    "deadline_of",
    "decode_request",
    "decode_work_request",
    "parse_body",
]

MAX_JSON_DEPTH = 100
"""Deepest nesting of arrays and objects a body may have (the envelope itself takes 5 levels).

Well below what the encoders handle when the data travels on (orjson 255, pydantic-core's serializer),
so accepted input can always be stored and answered."""

MAX_DEADLINE_MS = 253_402_300_799_999
"""The largest ``A2A-Deadline`` accepted: 9999-12-31T23:59:59.999Z in epoch milliseconds."""

CLOCK_SKEW = 2.0
"""Seconds a deadline may look passed before a request is refused for it (clocks of hosts differ)."""

_MAX_CALL_DEPTH_DIGITS = 6
_DIGITS = re.compile(r"[0-9]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class Decoded:
    """A request that passed every check: its envelope and validated params."""

    envelope: JsonRpcRequest
    params: A2AModel

    @property
    def request_id(self) -> JsonRpcId:
        return self.envelope.id


@dataclass(frozen=True)
class WorkRequest:
    """A valid SendMessage / SendStreamingMessage, as the host or executor acts on it.

    Attributes:
        agent: the agent or workflow it was sent to.
        request_id: the JSON-RPC id, echoed on the answer.
        method: ``SendMessage`` or ``SendStreamingMessage``.
        message: the message (validated).
        reply_to: the caller's reply subject (valid by the grammar of docs/protocol.md §3).
        history_length: the caller's ``configuration.historyLength``.
        deadline: ``A2A-Deadline`` in epoch seconds, or None.
        call_depth: ``A2A-Call-Depth``.
    """

    agent: str
    request_id: JsonRpcId
    method: str
    message: Message
    reply_to: str
    history_length: int | None
    deadline: float | None
    call_depth: int

    @property
    def streaming(self) -> bool:
        return self.method == codes.SEND_STREAMING_MESSAGE


def _depth_problem(value: Any) -> str | None:
    """Where ``value`` nests deeper than :data:`MAX_JSON_DEPTH`, or None (iterative: no recursion to overflow)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        stack.extend((c, depth + 1) for c in children)
    return None


def _surrogate_path(value: Any) -> str | None:
    """The dotted path of the first string (or key) holding a lone UTF-16 surrogate, or None."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path or "(body)"
        elif isinstance(item, dict):
            for k, v in item.items():
                sub = f"{path}.{k}" if path else str(k)
                if isinstance(k, str) and _SURROGATE.search(k):
                    return f"{path}.<key {k.encode('utf-8', 'backslashreplace').decode()}>" if path else "<key>"
                stack.append((v, sub))
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return None


MAX_INT_ID = 2**63 - 1
"""The largest integer a request ``id`` may be (JSON-RPC leaves it open; 64 bits is what every peer can echo)."""


MAX_EXACT_FLOAT = 2.0**53
"""The largest magnitude of a non-integer (or float-parsed) ``id``: beyond it a number is not echoed as sent."""


@dataclass(frozen=True)
class Body:
    """A parsed body: its value, the request id as far as it can be read, and what breaks the binding's limits.

    The id is read before the limits are checked, so that an error about the params still echoes it
    (JSON-RPC 2.0 §5: the id is null only when it cannot be detected).
    """

    value: Any
    request_id: JsonRpcId
    problem: RpcError | None = None


def parse_body(data: bytes) -> Body:
    """Parse a body as JSON and check it against the limits of the binding.

    A nesting deeper than :data:`MAX_JSON_DEPTH` (-32700) or a string holding a lone UTF-16 surrogate
    (-32602 inside ``params``, -32600 elsewhere) is not raised here but kept as :attr:`Body.problem`, for
    :func:`validate_request` to raise with the id known.

    Raises:
        RpcError: -32700 for what is not JSON at all, or nests too deep for the standard parser.
    """
    try:
        value = orjson.loads(data)
        standard = False
    except orjson.JSONDecodeError:
        # orjson refuses integers beyond 64 bits, NaN, lone surrogates and nesting past 1,024 levels; the
        # standard parser says which it was (or that it is not JSON at all)
        standard = True
        try:
            value = json.loads(data)
        except RecursionError as e:
            raise RpcError(
                codes.PARSE_ERROR, f"request body is not valid JSON: nested deeper than {MAX_JSON_DEPTH} levels"
            ) from e
        except (ValueError, UnicodeDecodeError) as e:
            raise RpcError(codes.PARSE_ERROR, f"request body is not valid JSON: {e}") from e
    request_id = request_id_of(value)
    # a body with few brackets cannot nest deep: only count levels when it might
    if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH:
        problem = _depth_problem(value)
        if problem is not None:
            error = RpcError(codes.PARSE_ERROR, f"request body is not valid JSON for this binding: {problem}")
            return Body(value, request_id, error)
    if standard:  # orjson accepts no lone surrogate: only text it refused can hold one
        where = _surrogate_path(value)
        if where is not None:
            code = codes.INVALID_PARAMS if where.startswith("params") else codes.INVALID_REQUEST
            error = RpcError(code, f"{where}: invalid Unicode (a lone UTF-16 surrogate escape such as \\ud800)")
            return Body(value, request_id, error)
    return Body(value, request_id)


def request_id_of(body: Any) -> JsonRpcId:
    """The ``id`` of a parsed body when it is one a reply can echo exactly: a string of valid Unicode, a 64-bit
    integer or a number within ±2^53; None otherwise (for the error reply to a bad request)."""
    if not isinstance(body, dict):
        return None
    rid = body.get("id")
    if isinstance(rid, bool):
        return None
    if isinstance(rid, int):
        return rid if -MAX_INT_ID - 1 <= rid <= MAX_INT_ID else None
    if isinstance(rid, float):  # orjson reads an integer beyond 64 bits as a float: it could not be echoed as sent
        return rid if math.isfinite(rid) and abs(rid) <= MAX_EXACT_FLOAT else None
    if isinstance(rid, str):
        return None if _SURROGATE.search(rid) else rid
    return None


def validate_request(parsed: Body, headers: dict[str, str], *, allowed: tuple[str, ...]) -> Decoded:
    """Validate a parsed body: its limits, envelope, method, ``A2A-Version``, params (in that order).

    Raises:
        RpcError: -32700 (too deep), -32600, -32601, -32009 or -32602, saying what is wrong and where.
    """
    if parsed.problem is not None:
        raise parsed.problem
    body = parsed.value
    if not isinstance(body, dict):
        raise RpcError(codes.INVALID_REQUEST, f"a JSON-RPC request must be an object, got {type(body).__name__}")
    try:
        envelope = JsonRpcRequest.model_validate(body)
    except ValidationError as e:
        raise RpcError(codes.INVALID_REQUEST, f"invalid JSON-RPC 2.0 envelope: {pydantic_problem(e, 'request')}") from e
    if envelope.id is not None and envelope.id != parsed.request_id:
        raise RpcError(
            codes.INVALID_REQUEST,
            f"id: must be a string, an integer within 64 bits or a number within ±2^53 (got {_shown_id(envelope.id)})",
        )
    if envelope.method not in allowed:
        raise RpcError(
            codes.METHOD_NOT_FOUND,
            f"method {envelope.method!r} is not served on this subject (served: {', '.join(allowed)})",
        )
    version = headers.get(h.VERSION)
    if version not in codes.SERVED_VERSIONS:
        raise VersionNotSupported(version)
    try:
        params = PARAMS_BY_METHOD[envelope.method].model_validate(envelope.params)
    except ValidationError as e:
        raise RpcError(codes.INVALID_PARAMS, f"invalid params of {envelope.method}: {pydantic_problem(e)}") from e
    return Decoded(envelope, params)


def decode_request(data: bytes, headers: dict[str, str], *, allowed: tuple[str, ...]) -> Decoded:
    """:func:`parse_body` then :func:`validate_request`.

    Raises:
        RpcError: -32700, -32600, -32601, -32009 or -32602.
    """
    return validate_request(parse_body(data), headers, allowed=allowed)


def deadline_of(headers: dict[str, str]) -> float | None:
    """``A2A-Deadline`` in epoch seconds, None when absent.

    Raises:
        RpcError: -32600 when it is not epoch milliseconds in 0…:data:`MAX_DEADLINE_MS`.
    """
    raw = headers.get(h.DEADLINE)
    if not raw:
        return None
    if len(raw) > 16 or not _DIGITS.fullmatch(raw) or int(raw) > MAX_DEADLINE_MS:
        shown = raw if len(raw) <= 40 else f"{raw[:40]}… ({len(raw)} characters)"
        raise RpcError(
            codes.INVALID_REQUEST,
            f"header {h.DEADLINE} must be epoch milliseconds between 0 and {MAX_DEADLINE_MS}, got {shown!r}",
        )
    return int(raw) / 1000


def call_depth_of(headers: dict[str, str]) -> int:
    """``A2A-Call-Depth`` (0 when absent).

    Raises:
        RpcError: -32600 when it is not a non-negative integer of at most six digits.
    """
    raw = headers.get(h.CALL_DEPTH) or "0"
    if len(raw) > _MAX_CALL_DEPTH_DIGITS or not _DIGITS.fullmatch(raw):
        shown = raw if len(raw) <= 40 else f"{raw[:40]}… ({len(raw)} characters)"
        raise RpcError(
            codes.INVALID_REQUEST, f"header {h.CALL_DEPTH} must be a non-negative integer (0-999999), got {shown!r}"
        )
    return int(raw)


def decode_work_request(
    body: Body,
    headers: dict[str, str],
    *,
    agent: str,
    reply_to: str,
    max_call_depth: int,
    now: float,
) -> WorkRequest:
    """Validate a parsed work request (SendMessage / SendStreamingMessage) as agents and workflows both do.

    In order: the request (:func:`validate_request`), ``A2A-Deadline`` (:data:`CLOCK_SKEW` tolerated),
    ``A2A-Call-Depth``. The body's size is checked by the caller before parsing.

    Raises:
        TransportError: ``DEADLINE_EXCEEDED``, ``CALL_DEPTH_EXCEEDED``.
        RpcError: the errors of :func:`validate_request`; -32600 for a malformed header.
    """
    decoded = validate_request(body, headers, allowed=codes.WORK_METHODS)
    params = decoded.params
    assert isinstance(params, SendMessageRequest)
    deadline = deadline_of(headers)
    if deadline is not None and now > deadline + CLOCK_SKEW:
        raise TransportError(
            codes.DEADLINE_EXCEEDED, f"the request's deadline passed {now - deadline:.1f}s before it was pulled"
        )
    depth = call_depth_of(headers)
    if depth > max_call_depth:
        raise TransportError(codes.CALL_DEPTH_EXCEEDED, f"call depth {depth} exceeds the maximum of {max_call_depth}")
    return WorkRequest(
        agent=agent,
        request_id=decoded.request_id,
        method=decoded.envelope.method,
        message=params.message,
        reply_to=reply_to,
        history_length=params.configuration.history_length if params.configuration else None,
        deadline=deadline,
        call_depth=depth,
    )


def _shown_id(value: JsonRpcId) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:40]}… ({len(text)} characters)"


def control_part(message: Message, kind: str) -> dict[str, Any] | None:
    """The data of the first DataPart of ``message`` whose ``type`` is ``kind``."""
    for p in message.parts:
        if isinstance(p.data, dict) and p.data.get("type") == kind:
            return p.data
    return None
