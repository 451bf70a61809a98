"""The store on a Valkey Cluster from the wheel (3 primaries, 3 replicas): redirects after a failover are
followed, and a durable write waits for a replica (A2AMESH_REDIS_WAIT_REPLICAS) or hands its work back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis as sync_redis

from a2amesh.config import Settings
from a2amesh.errors import StoreUnavailable
from a2amesh.protocol import Message, Part, Role, Task, TaskState, TaskStatus
from a2amesh.servers import ValkeyCluster, ValkeyServer
from a2amesh.store.cluster import ClusterRedis
from a2amesh.store.keys import Keys
from a2amesh.store.memory import VectorIndex
from a2amesh.store.redis import connect_redis
from a2amesh.store.tasks import TaskStore
from tests.support.waiting import eventually


@pytest.fixture
def valkey_cluster(tmp_path: Path) -> Iterator[ValkeyCluster]:
    cluster = ValkeyCluster(data_dir=tmp_path / "valkey-cluster")
    cluster.start_sync()
    yield cluster
    cluster.stop_sync()


@pytest.fixture
async def store(valkey_cluster: ValkeyCluster, namespace: str) -> AsyncIterator[tuple[ClusterRedis, TaskStore]]:
    settings = Settings.load(
        environ={},
        redis_url=valkey_cluster.url,
        redis_cluster=True,
        redis_wait_replicas=1,
        redis_wait_timeout_ms=300,
        namespace=namespace,
    )
    redis = await connect_redis(settings)
    assert isinstance(redis, ClusterRedis)
    tasks = TaskStore(redis, Keys(namespace), retention=600, queued_ttl=600)
    yield redis, tasks
    await tasks.aclose()
    await redis.aclose()


def task(task_id: str, state: TaskState = TaskState.COMPLETED) -> Task:
    message = Message(message_id="m", role=Role.USER, parts=[Part(text="hello")])
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=state), history=[message])


def replica_of(cluster: ValkeyCluster, redis: ClusterRedis, key: str) -> ValkeyServer:
    """The replica of the primary that owns ``key``'s slot."""
    primary = redis.nodes_manager.get_node_from_slot(redis.keyslot(key))
    for node in cluster.nodes:
        info = sync_redis.Redis(port=node.port, decode_responses=True).info("replication")
        if info.get("role") == "slave" and int(info["master_port"]) == int(primary.port):
            return node
    raise AssertionError(f"no replica of {primary.name}")


def roles(cluster: ValkeyCluster) -> list[str]:
    """Each node's role, as its own INFO says (a replica only once its link to its primary is up)."""
    out = []
    for node in cluster.nodes:
        info = sync_redis.Redis(port=node.port, decode_responses=True).info("replication")
        out.append("replica" if info.get("master_link_status") == "up" else str(info["role"]))
    return sorted(out)


async def test_three_primaries_each_with_a_replica_serve_every_slot(
    valkey_cluster: ValkeyCluster, store: tuple[ClusterRedis, TaskStore]
) -> None:
    redis, tasks = store
    assert roles(valkey_cluster) == ["master"] * 3 + ["replica"] * 3
    owners = {redis.nodes_manager.get_node_from_slot(slot).name for slot in range(0, 16384, 97)}
    assert len(owners) == 3
    for i in range(30):  # task records land on every primary
        assert (await tasks.write(task(f"spread-{i}"), "a", "i", release=True)).outcome == "written"


async def test_a_write_follows_its_slot_after_a_manual_failover(
    valkey_cluster: ValkeyCluster, store: tuple[ClusterRedis, TaskStore], namespace: str
) -> None:
    """The replica takes the slot over (CLUSTER FAILOVER): the client's map is stale, the old primary answers
    MOVED, and the write lands on the new primary, waited for by its new replica."""
    redis, tasks = store
    key = Keys(namespace).task("t1")
    assert (await tasks.write(task("t1", TaskState.WORKING), "a", "i", release=False)).outcome == "written"
    old = redis.nodes_manager.get_node_from_slot(redis.keyslot(key))
    replica = replica_of(valkey_cluster, redis, key)
    sync_redis.Redis(port=replica.port).execute_command("CLUSTER", "FAILOVER")  # type: ignore[no-untyped-call]

    def promoted() -> bool:
        role: str = sync_redis.Redis(port=replica.port, decode_responses=True).info("replication")["role"]
        return role == "master"

    async def done() -> bool:
        info = sync_redis.Redis(port=int(old.port), decode_responses=True).info("replication")
        return promoted() and info.get("master_link_status") == "up"

    await eventually(done, timeout=30, what="the manual failover and the old primary syncing as a replica")
    assert redis.nodes_manager.get_node_from_slot(redis.keyslot(key)).name == old.name  # the map is stale
    view = await tasks.write(task("t1"), "a", "i", release=True)
    assert view.outcome == "written"
    assert int(redis.nodes_manager.get_node_from_slot(redis.keyslot(key)).port) == replica.port
    stored = await tasks.get("t1")
    assert stored is not None
    assert stored.status.state == TaskState.COMPLETED


async def test_a_durable_write_no_replica_acknowledges_is_handed_back(
    valkey_cluster: ValkeyCluster, store: tuple[ClusterRedis, TaskStore], namespace: str
) -> None:
    """With the primary's only replica paused (SIGSTOP), WAIT 1 gets no acknowledgement within its 300 ms:
    the write raises StoreUnavailable (its work is handed back, not acked); resumed, the same write passes."""
    redis, tasks = store
    key = Keys(namespace).task("t2")
    replica = replica_of(valkey_cluster, redis, key)
    replica.pause()
    try:
        with pytest.raises(StoreUnavailable, match=r"reached 0 of the 1 replica"):
            await tasks.write(task("t2"), "a", "i", release=True)
    finally:
        replica.resume()
    assert (await tasks.write(task("t2"), "a", "i", release=True)).outcome in ("written", "terminal")


async def test_memory_uses_exact_search_on_a_cluster(store: tuple[ClusterRedis, TaskStore]) -> None:
    """Guards against the built-in agents failing to start on a cluster: asking a cluster client for the vector
    index (``FT._LIST`` has no key to route by) raised RedisClusterException; a search there would see one shard."""
    redis, _ = store
    assert await VectorIndex.offered(redis) is False
