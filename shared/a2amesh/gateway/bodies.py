"""Request bodies read once, within the gateway's limit, and handed on: every HTTP surface of the gateway
(the A2A routes, MCP, the management API) reads them through here."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit", "read_body", "replay"]

_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


async def read_body(request: Request, limit: int) -> bytes | None:
    """The whole body, or None when it is (or announces itself) larger than ``limit``."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def replay(body: bytes, original: Receive) -> Receive:
    """The body read once, then the server's own ``receive`` (which reports the client's disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await original()

    return receive


class BodyLimit:
    """ASGI middleware: a POST/PUT/PATCH body above ``limit`` bytes is answered by ``too_large`` (a 413), and the
    app never sees it; a body within it is read once and replayed to the app."""

    def __init__(self, app: ASGIApp, *, limit: int, too_large: ASGIApp) -> None:
        self.app = app
        self.limit = limit
        self.too_large = too_large

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY:
            await self.app(scope, receive, send)
            return
        body = await read_body(Request(scope, receive), self.limit)
        if body is None:
            await self.too_large(scope, receive, send)
            return
        await self.app(scope, replay(body, receive), send)
