"""The embedded servers (``a2amesh.servers``): started, stopped, killed and restarted as real processes."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2amesh.errors import ServerError
from a2amesh.servers import NatsCluster, NatsServer, ValkeyServer


@contextlib.contextmanager
def squatting(port: int) -> Iterator[int]:
    """Another process's listener on ``port`` (0: any free one) for the block; yields the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        yield squatter.getsockname()[1]


def accepts(port: int) -> None:
    """Raises unless something accepts connections on ``port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


@pytest.fixture
def thread_errors() -> Iterator[list[threading.ExceptHookArgs]]:
    """Exceptions raised in any thread while the test runs."""
    seen: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = seen.append
    try:
        yield seen
    finally:
        threading.excepthook = previous


@pytest.mark.parametrize("kind", [NatsServer, ValkeyServer])
def test_stop_and_kill_end_the_output_reader_cleanly(
    kind: type[NatsServer] | type[ValkeyServer], tmp_path: Path, thread_errors: list[threading.ExceptHookArgs]
) -> None:
    """Each stop or SIGKILL waits for the thread reading the server's output to reach its end; the reader
    closes the pipe itself, so it never fails on a pipe closed under it (a race seen on a loaded machine)."""
    server = kind(data_dir=tmp_path / "data")
    try:
        for cycle in range(6):
            server.start_sync()
            assert server.pid is not None
            assert server.reading_output
            if cycle % 2:
                server.kill_sync()
            else:
                server.stop_sync()
            assert server.pid is None
            assert not server.reading_output, f"cycle {cycle}: the output reader outlived the stop"
        server.stop_sync()  # a second stop is a no-op
        assert [str(e.exc_value) for e in thread_errors] == []
    finally:
        server.stop_sync()  # a failed assertion leaves no server behind


@pytest.mark.parametrize("kind", [NatsServer, ValkeyServer])
def test_a_picked_port_taken_before_the_server_binds_it_is_replaced(
    kind: type[NatsServer] | type[ValkeyServer], tmp_path: Path
) -> None:
    """Another process can take the free port picked for a server before the server binds it (a client's
    outgoing connection draws from the same range): the first start moves to a fresh port, and a restart
    keeps the port it got."""
    server = kind(data_dir=tmp_path / "data")
    taken = server.port
    with squatting(taken):
        try:
            server.start_sync()
            assert server.port != taken
            accepts(server.port)
            got = server.port
            server.stop_sync()
            server.start_sync()
            assert server.port == got, "a restart must keep the port its clients know"
        finally:
            server.stop_sync()


@pytest.mark.parametrize("kind", [NatsServer, ValkeyServer])
def test_a_port_given_by_the_caller_is_kept_and_a_taken_one_is_a_clear_error(
    kind: type[NatsServer] | type[ValkeyServer], tmp_path: Path
) -> None:
    """A port the caller chose is never changed: when it is taken the start fails and says why."""
    with squatting(0) as taken:
        server = kind(port=taken, data_dir=tmp_path / "data")
        try:
            with pytest.raises(ServerError, match="(?i)address already in use"):
                server.start_sync()
            assert server.port == taken
        finally:
            server.stop_sync()


@pytest.mark.parametrize("which", ["client", "route"])
def test_a_nats_cluster_whose_picked_port_was_taken_moves_every_node(which: str, tmp_path: Path) -> None:
    """A NATS cluster's nodes name each other's route ports, so a node whose picked client or route port was
    taken before it bound it moves the whole cluster to fresh ports (seen with parallel test sessions); a
    restart of a node keeps its ports."""
    cluster = NatsCluster(data_dir=tmp_path / "cluster")
    node = cluster.nodes[1]
    assert node.cluster is not None
    taken = node.port if which == "client" else node.cluster.port
    with squatting(taken):
        try:
            cluster.start_sync()
            ports = {n.port for n in cluster.nodes} | {n.cluster.port for n in cluster.nodes if n.cluster}
            assert taken not in ports
            for n in cluster.nodes:
                accepts(n.port)
            got = node.port
            node.kill_sync()
            node.start_sync()
            assert node.port == got, "a restarted node must keep the port its clients know"
        finally:
            cluster.stop_sync()
