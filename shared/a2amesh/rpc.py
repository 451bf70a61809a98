"""Encode and decode JSON-RPC 2.0 messages of the binding, turning every bad input into a precise RpcError."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from a2amesh.errors import RpcError, TransportError, VersionNotSupported
from a2amesh.jsontext import dumps_bytes, loads
from a2amesh.protocol import codes
from a2amesh.protocol.base import A2AModel
from a2amesh.protocol.jsonrpc import (
    PARAMS_BY_METHOD,
    JsonRpcId,
    JsonRpcRequest,
    JsonRpcResponse,
    SendMessageRequest,
    StreamReply,
)


def dumps(value: Any) -> bytes:
    """Compact JSON bytes."""
    return dumps_bytes(value)


def encode_request(method: str, params: A2AModel, request_id: JsonRpcId) -> bytes:
    """A JSON-RPC request carrying ``params``."""
    return dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params.to_json_dict()})


def encode_result(request_id: JsonRpcId, result: A2AModel | dict[str, Any]) -> bytes:
    """A JSON-RPC success response."""
    body = result.to_json_dict() if isinstance(result, A2AModel) else result
    return dumps({"jsonrpc": "2.0", "id": request_id, "result": body})


def encode_error(request_id: JsonRpcId, error: RpcError) -> bytes:
    """A JSON-RPC error response."""
    err: dict[str, Any] = {"code": error.code, "message": str(error)}
    if error.data:
        err["data"] = error.data
    return dumps({"jsonrpc": "2.0", "id": request_id, "error": err})


def pydantic_problem(e: ValidationError, prefix: str = "params") -> str:
    """One line naming each invalid field of a validation error (at most three)."""
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(p) for p in (prefix, *err["loc"]))
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{len(e.errors()) - 3} more)" if len(e.errors()) > 3 else ""
    return "; ".join(parts) + more


def request_id_of(data: bytes) -> JsonRpcId:
    """The ``id`` of a request, as far as it can be read (for error replies to bad requests)."""
    try:
        obj = loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("id"), str | int):
        return obj["id"]  # type: ignore[no-any-return]
    return None


def decode_request(
    data: bytes, headers: dict[str, str], *, allowed: tuple[str, ...]
) -> tuple[JsonRpcRequest, A2AModel]:
    """Validate a request: JSON, envelope, method, A2A-Version, params (in that order).

    Raises:
        RpcError: -32700, -32600, -32601, -32009 or -32602, saying what is wrong and where.
    """
    try:
        obj = loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise RpcError(codes.PARSE_ERROR, f"request body is not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise RpcError(codes.INVALID_REQUEST, f"a JSON-RPC request must be an object, got {type(obj).__name__}")
    try:
        envelope = JsonRpcRequest.model_validate(obj)
    except ValidationError as e:
        raise RpcError(codes.INVALID_REQUEST, f"invalid JSON-RPC 2.0 envelope: {pydantic_problem(e, 'request')}") from e
    if envelope.method not in allowed:
        raise RpcError(
            codes.METHOD_NOT_FOUND,
            f"method {envelope.method!r} is not served on this subject (served: {', '.join(allowed)})",
        )
    version = headers.get("A2A-Version")
    if version not in codes.SERVED_VERSIONS:
        raise VersionNotSupported(version)
    try:
        params = PARAMS_BY_METHOD[envelope.method].model_validate(envelope.params)
    except ValidationError as e:
        raise RpcError(codes.INVALID_PARAMS, f"invalid params of {envelope.method}: {pydantic_problem(e)}") from e
    return envelope, params


def decode_response(data: bytes) -> JsonRpcResponse:
    """Validate a JSON-RPC response.

    Raises:
        RpcError: -32006 (InvalidAgentResponse) when the response is not valid JSON-RPC.
    """
    try:
        return JsonRpcResponse.model_validate_json(data)
    except ValidationError as e:
        raise RpcError(codes.INVALID_AGENT_RESPONSE, f"invalid response: {pydantic_problem(e, 'response')}") from e


def decode_stream_reply(data: bytes) -> StreamReply:
    """Validate a response on a reply subject (the envelope and its ``StreamResponse`` at once).

    Raises:
        RpcError: -32006 (InvalidAgentResponse) when it is not a valid JSON-RPC response carrying a
            ``StreamResponse`` or an error.
    """
    try:
        return StreamReply.model_validate_json(data)
    except ValidationError as e:
        raise RpcError(codes.INVALID_AGENT_RESPONSE, f"invalid response: {pydantic_problem(e, 'response')}") from e


CLOCK_SKEW = 2.0


def deadline_of(headers: dict[str, str]) -> float | None:
    """The request's ``A2A-Deadline`` in epoch seconds, or None when absent or malformed."""
    raw = headers.get("A2A-Deadline")
    if raw and raw.isdigit():
        return int(raw) / 1000
    return None


def decode_work_request(
    data: bytes, headers: dict[str, str], *, max_request_bytes: int, max_call_depth: int, now: float
) -> tuple[JsonRpcRequest, SendMessageRequest]:
    """Validate a work request (SendMessage / SendStreamingMessage) as agents and workflows both do.

    In order: size, JSON-RPC envelope and params (:func:`decode_request`), ``A2A-Deadline`` (with
    :data:`CLOCK_SKEW` tolerated), ``A2A-Call-Depth``.

    Raises:
        TransportError: ``PAYLOAD_TOO_LARGE``, ``DEADLINE_EXCEEDED``, ``CALL_DEPTH_EXCEEDED``.
        RpcError: the JSON-RPC errors of :func:`decode_request`; ``-32600`` for a malformed header.
    """
    if len(data) > max_request_bytes:
        raise TransportError(
            codes.PAYLOAD_TOO_LARGE,
            f"request of {len(data)} bytes exceeds the limit of {max_request_bytes} bytes; "
            "send large inputs as artifact:// URLs",
        )
    envelope, params = decode_request(data, headers, allowed=codes.WORK_METHODS)
    assert isinstance(params, SendMessageRequest)
    raw = headers.get("A2A-Deadline")
    if raw:
        try:
            deadline = int(raw) / 1000
        except ValueError as e:
            raise RpcError(codes.INVALID_REQUEST, f"header A2A-Deadline must be epoch milliseconds, got {raw!r}") from e
        if now > deadline + CLOCK_SKEW:
            raise TransportError(
                codes.DEADLINE_EXCEEDED, f"the request's deadline passed {now - deadline:.1f}s before it was pulled"
            )
    depth = headers.get("A2A-Call-Depth", "0")
    if not depth.isdigit():
        raise RpcError(codes.INVALID_REQUEST, f"header A2A-Call-Depth must be a non-negative integer, got {depth!r}")
    if int(depth) > max_call_depth:
        raise TransportError(codes.CALL_DEPTH_EXCEEDED, f"call depth {depth} exceeds the maximum of {max_call_depth}")
    return envelope, params
