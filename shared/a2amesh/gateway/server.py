"""Run the gateway as an HTTP server (uvicorn) over its own or a given NATS and Redis connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn

from a2amesh.bus.nats import Bus
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import ConfigError
from a2amesh.gateway.app import create_app
from a2amesh.gateway.settings import GatewaySettings
from a2amesh.logs import get_logger
from a2amesh.store.redis import Redis, connect_redis

log = get_logger("gateway")

HTTP_PARSER = "httptools"
"""uvicorn's HTTP/1.1 parser: httptools (llhttp, C) rather than h11 (pure Python), which cost ~10 % of the
gateway's CPU per call under load. The event loop is the process's own (``eventloop.run``: uvloop), since
the server is served inside it, so uvicorn's ``loop`` setting does not apply."""

SHUTDOWN_GRACE = 5
"""Seconds open HTTP connections (streams) get to finish when the gateway stops."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free one).

    Raises:
        ConfigError: the address is busy or cannot be bound, naming it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        problem = "is already in use" if e.errno in (98, 48) else f"cannot be bound: {e.strerror}"
        raise ConfigError(
            "gateway", "port", f"{host}:{port} {problem} (choose another with --http-port / --port)"
        ) from e
    sock.setblocking(False)
    return sock


KEEP_ALIVE = 65
"""Seconds an idle keep-alive connection stays open. Longer than clients' own idle limits (httpx 5 s, aiohttp
15 s) and load balancers' (60 s), so the client closes it, never the server: a server closing at the moment
the client sends its next request on the connection fails that request (uvicorn's default is 5 s, httpx's too).
"""


class Gateway:
    """The HTTP gateway service: ``run_until(stop)`` serves until ``stop`` is set; ``url`` once ``ready``.

    Args:
        settings: mesh settings (NATS, Redis, timeouts).
        http: the gateway's own settings.
        bus: an open bus to use (not closed here); a new one is opened when None.
        redis: a Redis client for ``/readyz`` (not closed here); a new one is made when None.
    """

    def __init__(
        self, settings: Settings, http: GatewaySettings, *, bus: Bus | None = None, redis: Redis | None = None
    ) -> None:
        http.check_exposure()
        self.settings = settings
        self.http = http
        self._bus = bus
        self._redis = redis
        self.ready = asyncio.Event()
        self.url = ""
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Serve until :meth:`shutdown`."""
        await self.run_until(self._stop)

    async def shutdown(self) -> None:
        """Ask the gateway to stop (idempotent, safe before ``run``); ``run`` returns once it has."""
        self._stop.set()

    @contextlib.asynccontextmanager
    async def _connections(self) -> AsyncIterator[tuple[Client, Redis]]:
        own_bus = self._bus is None
        bus = self._bus or await Bus.connect(self.settings, name="a2amesh-gateway")
        redis: Redis | None = None
        try:
            redis = self._redis or await connect_redis(self.settings)
            async with Client(bus, self.settings) as client:
                yield client, redis
        finally:
            if redis is not None and self._redis is None:
                await redis.aclose()
            if own_bus:
                await bus.close()

    async def run_until(self, stop: asyncio.Event) -> None:
        """Bind, connect, serve until ``stop`` is set, then let open requests finish (bounded) and close."""
        self._stop = stop
        sock = bind(self.http.host, self.http.port)
        try:
            async with self._connections() as (client, redis):
                closing = asyncio.Event()
                app = create_app(client, self.http, redis=redis, closing=closing)
                config = uvicorn.Config(
                    app,
                    http=HTTP_PARSER,
                    lifespan="on",  # the app's lifespan runs the MCP session manager
                    log_config=None,
                    access_log=False,
                    timeout_graceful_shutdown=SHUTDOWN_GRACE,
                    timeout_keep_alive=KEEP_ALIVE,
                )
                server = uvicorn.Server(config)
                host, port = sock.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                self.url = self.http.public_url or f"http://{shown}:{port}"
                log.info("gateway.listening", url=self.url, auth=self.http.auth_enabled)
                async with asyncio.TaskGroup() as tg:
                    serving = tg.create_task(server.serve(sockets=[sock]))
                    self.ready.set()
                    stopper = tg.create_task(stop.wait())
                    await asyncio.wait({serving, stopper}, return_when=asyncio.FIRST_COMPLETED)
                    closing.set()
                    server.should_exit = True
                    stopper.cancel()
                if app.state.push is not None:
                    await app.state.push.aclose()
        finally:
            sock.close()
            log.info("gateway.stopped")
