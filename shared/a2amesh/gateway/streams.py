"""The a2a-sdk's A2A 0.3 HTTP+JSON streams, answered like its 1.0 ones: an error before the first event is a
plain HTTP error, one after it an ``event: error``.

The SDK's 1.0 REST dispatcher waits for a stream's first event before it starts the response; its 0.3 adapter
(``REST03Adapter``) does not, so an error raised before any event (SubscribeToTask of a finished task, an
unknown task, the mesh unavailable) escaped after the ``200 text/event-stream`` head was sent: the server
logged "Exception in ASGI application" and the client saw a cut connection. :func:`first_event_first` wraps
those routes' endpoints.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import A2AError
from sse_starlette.event import ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from a2amesh.jsontext import dumps_text
from a2amesh.logs import get_logger

log = get_logger("gateway")

V0_3_STREAMS = ("/v1/message:stream", "/v1/tasks/{id}:subscribe")
"""Paths of the SDK's 0.3 HTTP+JSON streaming routes."""

Endpoint = Callable[[Request], Awaitable[Response]]


def error_response(error: Exception) -> JSONResponse:
    """An error before any event: the SDK's HTTP+JSON error body (``error``: code, status, message, details:
    what its other 0.3 routes answer), plus the ``type`` and ``message`` an A2A 0.3 client reads to raise the
    error's own class (the SDK's 0.3 client maps ``type`` to its error classes by name)."""
    payload = build_rest_error_payload(error)
    if isinstance(error, A2AError):
        payload = {**payload, "type": type(error).__name__, "message": error.message}
    return JSONResponse(payload, status_code=int(payload.get("error", {}).get("code", 500)))


async def _rest(first: Any, stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield first
    try:
        async for item in stream:
            yield item
    except Exception as e:  # the stream's end is an error event, not a cut connection
        log.warning("gateway.stream_failed", error=str(e) or type(e).__name__)
        yield ServerSentEvent(data=dumps_text(build_rest_error_payload(e)), event="error")


def first_event_first(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` (one returning a server-sent event response) started only once its first event is there."""

    async def wrapped(request: Request) -> Response:
        response = await endpoint(request)
        stream = getattr(response, "body_iterator", None)
        if stream is None:  # already an error response
            return response
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            return response  # an empty stream: the head and its end
        except Exception as e:
            return error_response(e)
        response.body_iterator = _rest(first, stream)  # type: ignore[attr-defined]
        return response

    return wrapped


def v0_3_streams_first_event_first(routes: list[BaseRoute]) -> list[BaseRoute]:
    """``routes`` with the 0.3 HTTP+JSON streaming endpoints wrapped by :func:`first_event_first`."""
    out: list[BaseRoute] = []
    for route in routes:
        if isinstance(route, Route) and route.path in V0_3_STREAMS:
            route = Route(route.path, first_event_first(route.endpoint), methods=list(route.methods or ()))
        out.append(route)
    return out
