"""One Redis connection shared by all of a process's concurrent hot-path callers (auto-pipelining).

Redis answers the commands of one connection in the order it received them, so callers need not take
turns: each appends its commands to the connection's output buffer and a future to a FIFO, the buffer
leaves in one write at the end of the event-loop turn, and replies are handed back in order as they are
read. There is no pool checkout, no per-call retry wrapper and no per-command parse call; replies are
parsed by hiredis. The queued Lua scripts of claims, task writes and commits go through here
(:class:`a2amesh.store.redis.AutoPipeline`); everything else keeps redis-py's pool.

Failure semantics: a lost connection fails every command in flight with redis-py's ``ConnectionError``
(the next call reconnects); a reply that takes longer than the socket timeout fails everything in
flight with ``TimeoutError`` and drops the connection. Nothing is retried here: a caller that is told
"unavailable" decides (the task and execution scripts are safe to repeat).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, InvalidResponse, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

Command = Sequence[Any]

_pack_command = hiredis.pack_command


def pack(commands: Sequence[Command], out: bytearray, encoding: str = "utf-8") -> None:
    """Append ``commands`` to ``out`` in RESP, with redis-py's argument rules (bytes, str, int, float).

    hiredis encodes each command (in C, the same bytes); a command it refuses (a bool, None, another type)
    is encoded here, which raises redis-py's precise :class:`DataError`.
    """
    if encoding != "utf-8":
        _pack_python(commands, out, encoding)
        return
    for command in commands:
        try:
            out += _pack_command(command if type(command) is tuple else tuple(command))
        except TypeError:
            _pack_python((command,), out, encoding)


def _pack_python(commands: Sequence[Command], out: bytearray, encoding: str) -> None:
    for command in commands:
        out += b"*%d\r\n" % len(command)
        for arg in command:
            if isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, str):
                data = arg.encode(encoding)
            elif isinstance(arg, int | float) and not isinstance(arg, bool):
                data = repr(arg).encode()
            elif isinstance(arg, memoryview):
                data = arg.tobytes()
            else:
                raise DataError(
                    f"Invalid input of type: '{type(arg).__name__}'. Convert to a bytes, string, int or float first."
                )
            out += b"$%d\r\n" % len(data)
            out += data
            out += b"\r\n"


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect (from a redis-py pool's connection settings)."""

    host: str = "127.0.0.1"
    port: int = 6379
    path: str | None = None  # a unix socket instead of host:port
    username: str | None = None
    password: str | None = None
    db: int = 0
    connect_timeout: float | None = 5.0
    timeout: float | None = 10.0
    encoding: str | None = "utf-8"  # None: replies stay bytes
    protocol: int = 3  # RESP version, as redis-py's connections of the same pool speak it (its callbacks expect it)

    def describe(self) -> str:
        return f"unix:{self.path}" if self.path else f"{self.host}:{self.port}"


class _Call:
    __slots__ = ("future", "remaining", "replies", "sent")

    def __init__(self, future: asyncio.Future[list[Any]], count: int, sent: float) -> None:
        self.future = future
        self.remaining = count
        self.replies: list[Any] = []
        self.sent = sent


class _Protocol(asyncio.Protocol):
    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._loop = asyncio.get_running_loop()
        if endpoint.encoding:
            self._reader = hiredis.Reader(
                protocolError=InvalidResponse, replyError=BaseParser.parse_error, encoding=endpoint.encoding
            )
        else:
            self._reader = hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)
        self._calls: deque[_Call] = deque()
        self._out = bytearray()
        self._flush_scheduled = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        calls = self._calls
        try:
            reply = self._reader.gets()
            while reply is not False:
                if not calls:
                    raise InvalidResponse("a reply no command asked for")
                call = calls[0]
                call.replies.append(reply)
                call.remaining -= 1
                if not call.remaining:
                    calls.popleft()
                    if not call.future.done():  # its caller may have been cancelled meanwhile
                        call.future.set_result(call.replies)
                reply = self._reader.gets()
        except RedisError as e:
            self._fail_all(RedisConnectionError(f"Redis at {self._endpoint.describe()}: {e}"))

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self._fail_all(RedisConnectionError(f"Connection to Redis at {self._endpoint.describe()} lost{reason}"))

    # callers
    def send(self, commands: Sequence[Command]) -> asyncio.Future[list[Any]]:
        """Queue ``commands`` for the end of this loop turn; the future gets their replies in order."""
        if self.closed:
            raise RedisConnectionError(f"Connection to Redis at {self._endpoint.describe()} is closed")
        packed = bytearray()
        pack(commands, packed)  # a DataError leaves nothing queued
        self._out += packed
        future: asyncio.Future[list[Any]] = self._loop.create_future()
        now = time.monotonic()
        self._calls.append(_Call(future, len(commands), now))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        if self._watchdog is None and self._endpoint.timeout:
            self._watchdog = self._loop.call_at(self._loop.time() + self._endpoint.timeout, self._check_timeout)
        return future

    def close(self) -> None:
        self._fail_all(RedisConnectionError(f"Connection to Redis at {self._endpoint.describe()} closed"))

    # internals
    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self._transport is not None and not self.closed:
            self._transport.write(bytes(self._out))
            self._out.clear()

    def _check_timeout(self) -> None:
        self._watchdog = None
        if not self._calls or self.closed:
            return
        timeout = self._endpoint.timeout or 0.0
        waited = time.monotonic() - self._calls[0].sent
        if waited >= timeout:
            self._fail_all(RedisTimeoutError(f"Redis at {self._endpoint.describe()} did not answer in {timeout:g}s"))
        else:
            self._watchdog = self._loop.call_at(self._loop.time() + timeout - waited, self._check_timeout)

    def _fail_all(self, error: RedisError) -> None:
        self.closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._transport is not None:
            self._transport.abort()
        calls, self._calls = self._calls, deque()
        self._out.clear()
        for call in calls:
            if not call.future.done():
                call.future.set_exception(error)
                call.future.exception()  # a cancelled-then-dropped caller must not log "never retrieved"


class SharedConnection:
    """A lazily (re)connected :class:`_Protocol` to one Redis server."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` as one pipeline; their replies in order (error replies as exception objects).

        Raises:
            redis.exceptions.ConnectionError, redis.exceptions.TimeoutError: Redis cannot be reached or
                did not answer in time (everything in flight on the connection fails alike).
            redis.exceptions.DataError: an argument is not bytes, str, int or float (nothing is sent).
        """
        if not commands:
            return []  # nothing to wait for: no reply would ever settle it
        protocol = self._protocol
        if protocol is None or protocol.closed:
            protocol = await self._connect()
        return await protocol.send(commands)

    async def aclose(self) -> None:
        """Close the connection; commands in flight fail with ``ConnectionError``."""
        if self._protocol is not None:
            self._protocol.close()
            self._protocol = None

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._protocol is not None and not self._protocol.closed:
                return self._protocol
            ep = self.endpoint
            loop = asyncio.get_running_loop()
            protocol: _Protocol | None = None
            try:
                async with asyncio.timeout(ep.connect_timeout):
                    if ep.path:
                        _, protocol = await loop.create_unix_connection(lambda: _Protocol(ep), ep.path)
                    else:
                        _, protocol = await loop.create_connection(lambda: _Protocol(ep), ep.host, ep.port)
                    await self._handshake(protocol)
            except TimeoutError as e:
                if protocol is not None:
                    protocol.close()
                raise RedisTimeoutError(f"Timeout connecting to Redis at {ep.describe()}") from e
            except OSError as e:
                raise RedisConnectionError(f"Error connecting to Redis at {ep.describe()}: {e}") from e
            except BaseException:
                if protocol is not None:
                    protocol.close()
                raise
            self._protocol = protocol
            return protocol

    async def _handshake(self, protocol: _Protocol) -> None:
        ep = self.endpoint
        setup: list[tuple[Any, ...]] = []
        if ep.protocol == 3:
            auth = ("AUTH", ep.username or "default", ep.password) if ep.password is not None else ()
            setup.append(("HELLO", 3, *auth))
        elif ep.password is not None:
            setup.append(("AUTH", ep.username, ep.password) if ep.username else ("AUTH", ep.password))
        if ep.db:
            setup.append(("SELECT", ep.db))
        if not setup:
            return
        for reply in await protocol.send(setup):
            if isinstance(reply, Exception):
                raise reply


def endpoint_of(connection_class: type, kwargs: dict[str, Any]) -> Endpoint | None:
    """The :class:`Endpoint` of a redis-py pool's settings, or None when it needs more than this module does
    (TLS, or a connection class of its own): such a pool keeps redis-py's pipelines."""
    from redis.asyncio.connection import Connection, UnixDomainSocketConnection
    from redis.utils import DEFAULT_RESP_VERSION

    if connection_class is UnixDomainSocketConnection:
        path = kwargs.get("path")
        if not path:
            return None
    elif connection_class is not Connection:
        return None
    else:
        path = None
    encoding = kwargs.get("encoding", "utf-8") if kwargs.get("decode_responses") else None
    protocol = kwargs.get("protocol") or DEFAULT_RESP_VERSION
    with contextlib.suppress(TypeError, ValueError):
        return Endpoint(
            host=str(kwargs.get("host") or "127.0.0.1"),
            port=int(kwargs.get("port") or 6379),
            path=path,
            username=kwargs.get("username"),
            password=kwargs.get("password"),
            db=int(kwargs.get("db") or 0),
            connect_timeout=kwargs.get("socket_connect_timeout"),
            timeout=kwargs.get("socket_timeout"),
            encoding=encoding,
            protocol=int(protocol),
        )
    return None
