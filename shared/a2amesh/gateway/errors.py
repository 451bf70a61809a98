"""Our errors as the a2a-sdk's errors, so its JSON-RPC and HTTP+JSON layers answer them with the right code.

A2A codes (-32001…-32009, -32600…-32700) map to the SDK's own classes. Our transport failures (-32000 with a
reason such as ``AGENT_NOT_FOUND``) have no SDK class: :func:`register` adds one class per reason to the SDK's
public code and status tables (``JSON_RPC_ERROR_CODE_MAP``, ``A2A_ERROR_MAPPING``, ``A2A_ERROR_REASONS``), so
the JSON-RPC binding answers -32000 and the HTTP+JSON binding the status below, both with an ``ErrorInfo``
whose ``reason`` is ours and whose ``metadata`` carries ``domain: a2amesh`` (the SDK fixes the ``domain``
field itself to ``a2a-protocol.org``).
"""

from __future__ import annotations

from a2a.server.jsonrpc_models import JSONRPCError
from a2a.server.request_handlers import response_helpers
from a2a.utils import errors as sdk

from a2amesh.errors import RpcError, TransportError
from a2amesh.protocol import codes


class MeshTransportError(sdk.A2AError):
    """Base of the SDK-side classes of our transport reasons (-32000)."""

    reason = "UNAVAILABLE"


# reason → HTTP status and gRPC status name
_TRANSPORT_STATUS: dict[str, tuple[int, str]] = {
    codes.AGENT_NOT_FOUND: (404, "NOT_FOUND"),
    codes.DEADLINE_EXCEEDED: (504, "DEADLINE_EXCEEDED"),
    codes.PAYLOAD_TOO_LARGE: (413, "INVALID_ARGUMENT"),
    codes.MAX_DELIVERIES: (500, "ABORTED"),
    codes.UNAVAILABLE: (503, "UNAVAILABLE"),
    codes.CALL_DEPTH_EXCEEDED: (400, "FAILED_PRECONDITION"),
}

TRANSPORT_CLASSES: dict[str, type[MeshTransportError]] = {
    reason: type(f"Mesh{reason.title().replace('_', '')}Error", (MeshTransportError,), {"reason": reason})
    for reason in _TRANSPORT_STATUS
}

_BY_CODE: dict[int, type[sdk.A2AError]] = {code: cls for cls, code in sdk.JSON_RPC_ERROR_CODE_MAP.items()}

_registered = False


def register() -> None:
    """Teach the SDK's error tables our transport reasons (idempotent; done by ``create_app``)."""
    global _registered
    if _registered:
        return
    for reason, cls in TRANSPORT_CLASSES.items():
        http, grpc = _TRANSPORT_STATUS[reason]
        sdk.JSON_RPC_ERROR_CODE_MAP[cls] = codes.TRANSPORT_ERROR
        sdk.A2A_ERROR_MAPPING[cls] = sdk.ErrorMapping(http, grpc, reason)
        sdk.A2A_ERROR_REASONS[cls] = reason
        response_helpers.EXCEPTION_MAP[cls] = JSONRPCError
    _registered = True


def transport_error(reason: str, message: str, metadata: dict[str, str] | None = None) -> sdk.A2AError:
    """The SDK error that answers one of our transport failures."""
    cls = TRANSPORT_CLASSES.get(reason, TRANSPORT_CLASSES[codes.UNAVAILABLE])
    return cls(message, {"domain": codes.DOMAIN, **(metadata or {})})


def to_sdk_error(exc: TransportError | RpcError) -> sdk.A2AError:
    """Map one of our errors (raised by ``Client``) to the SDK error the bindings answer."""
    if isinstance(exc, TransportError):
        return transport_error(exc.reason, str(exc), exc.metadata)
    if exc.code == codes.TRANSPORT_ERROR:
        return transport_error(exc.reason or codes.UNAVAILABLE, str(exc))
    cls = _BY_CODE.get(exc.code, sdk.InternalError)
    metadata: dict[str, str] = {}
    for item in exc.data:
        if isinstance(item, dict) and isinstance(item.get("metadata"), dict):
            metadata.update({str(k): str(v) for k, v in item["metadata"].items()})
    return cls(str(exc), metadata or None)
