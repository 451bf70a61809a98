"""Encode JSON-RPC 2.0 messages of the binding and decode responses (requests: :mod:`a2amesh.worker.decode`)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from a2amesh.errors import RpcError
from a2amesh.jsontext import dumps_bytes
from a2amesh.protocol import codes
from a2amesh.protocol.base import A2AModel
from a2amesh.protocol.jsonrpc import (
    JsonRpcId,
    JsonRpcResponse,
    StreamReply,
)


def dumps(value: Any) -> bytes:
    """Compact JSON bytes."""
    return dumps_bytes(value)


def encode_request(method: str, params: A2AModel, request_id: JsonRpcId) -> bytes:
    """A JSON-RPC request carrying ``params`` (their ProtoJSON written straight to bytes, not through a dict)."""
    return b'{"jsonrpc":"2.0","id":%b,"method":%b,"params":%b}' % (
        dumps(request_id),
        dumps(method),
        params.to_json_bytes(),
    )


def encode_send_request(method: str, message_json: bytes, history_length: int | None, request_id: JsonRpcId) -> bytes:
    """:func:`encode_request` of ``SendMessageRequest(message=..., configuration=...)`` from the message's ProtoJSON
    bytes (``configuration`` carrying ``historyLength`` only, or absent when it is None), byte for byte."""
    config = b"" if history_length is None else b',"configuration":{"historyLength":%d}' % history_length
    return b'{"jsonrpc":"2.0","id":%b,"method":%b,"params":{"message":%b%b}}' % (
        dumps(request_id),
        dumps(method),
        message_json,
        config,
    )


def encode_result(request_id: JsonRpcId, result: A2AModel | dict[str, Any]) -> bytes:
    """A JSON-RPC success response."""
    if isinstance(result, A2AModel):
        return b'{"jsonrpc":"2.0","id":%b,"result":%b}' % (dumps(request_id), result.to_json_bytes())
    return dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def encode_task_result(request_id: JsonRpcId, task: A2AModel) -> bytes:
    """A JSON-RPC success response carrying ``{"task": task}`` (a SendMessage's answer)."""
    return b'{"jsonrpc":"2.0","id":%b,"result":{"task":%b}}' % (dumps(request_id), task.to_json_bytes())


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
