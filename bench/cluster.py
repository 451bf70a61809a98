"""JetStream on one server (R1) beside a 3-node cluster (R3), and the store on one Valkey server beside a
Valkey Cluster (3 primaries, 3 replicas), in the same run, through a2amesh's ``Bus`` and ``TaskStore``.

NATS: the ack latency of one request-sized publish at a time, the throughput of ``--concurrency``
publishes in flight, and the latency of a publish through each node of the cluster (the node a client is
connected to forwards to the stream's leader, which waits for one follower before it acks).

Store: an agent's hot path per task, a claim then a final write (two Lua scripts, each with its listing
index write), one task at a time and ``--concurrency`` tasks in flight: on one server (the shared
pipelining connection), on the cluster (redis-py's cluster client, one pipeline per node), and on the
cluster with each write waiting for one replica (``A2AMESH_REDIS_WAIT_REPLICAS=1``); and the latency per
primary (tasks whose slot that primary owns).

    python bench/cluster.py [--count 2000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.config import Settings
from a2amesh.protocol import Message, Part, Role, Task, TaskState, TaskStatus
from a2amesh.servers import NatsCluster, NatsServer, ValkeyCluster, ValkeyServer
from a2amesh.store.cluster import ClusterRedis
from a2amesh.store.keys import Keys
from a2amesh.store.redis import connect_redis
from a2amesh.store.tasks import TaskStore
from bench.common import Figure, Stats, format_table, ms_since, write_results

PAYLOAD = b'{"jsonrpc":"2.0","id":"x","method":"SendMessage","params":{"message":{"data":{"n":1}}}}'.ljust(400, b" ")


async def measure(url: str, replicas: int, label: str, count: int, concurrency: int) -> list[Figure]:
    settings = Settings.load(environ={}, nats_url=url, namespace=f"bench{replicas}", replicas=replicas)
    bus = await Bus.connect(settings, name="bench-cluster")
    try:
        await init_mesh(bus, settings)
        subject = bus.subjects.request("bench")
        serial: list[float] = []
        for i in range(count // 4):
            t0 = time.perf_counter()
            await bus.js_publish(subject, PAYLOAD, {"Nats-Msg-Id": f"s{i}"})
            serial.append(ms_since(t0))
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                await bus.js_publish(subject, PAYLOAD, {"Nats-Msg-Id": f"c{i}"})

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        rate = count / (time.perf_counter() - t0)
        key = f"cluster.r{replicas}"
        return [
            Figure.from_samples(f"{key}.publish_ack", f"{label}: publish → ack, one at a time", serial),
            Figure(f"{key}.publish_rate", f"{label}: publishes/s, {concurrency} in flight", rate, "/s", n=count),
        ]
    finally:
        await bus.close()


async def per_node(cluster: NatsCluster, count: int) -> list[Figure]:
    out = []
    for node in cluster.nodes:
        settings = Settings.load(environ={}, nats_url=node.url, namespace="bench3")
        bus = await Bus.connect(settings, name="bench-node")
        try:
            info = await bus.jsm.stream_info(bus.subjects.tasks_stream)
            role = "leader" if info.cluster.leader == (node.cluster.server_name if node.cluster else "") else "follower"
            samples = []
            for i in range(count):
                t0 = time.perf_counter()
                await bus.js_publish(bus.subjects.request("bench"), PAYLOAD, {"Nats-Msg-Id": f"n{node.port}-{i}"})
                samples.append(ms_since(t0))
            name = node.cluster.server_name if node.cluster else node.url
            out.append(Figure.from_samples(f"cluster.node.{name}", f"R3 via {name} ({role})", samples))
        finally:
            await bus.close()
    return out


def _task(i: int, state: TaskState) -> Task:
    message = Message(message_id=f"m{i}", role=Role.USER, parts=[Part(text="x" * 200)])
    return Task(id=f"bench-{i}", context_id=f"c{i}", status=TaskStatus(state=state), history=[message])


async def one_task(store: TaskStore, i: int) -> None:
    await store.claim(_task(i, TaskState.WORKING), "bench", "inst", 30.0)
    await store.write(_task(i, TaskState.COMPLETED), "bench", "inst", release=True)


async def store_hot_path(
    url: str, key: str, label: str, count: int, concurrency: int, **overrides: Any
) -> list[Figure]:
    settings = Settings.load(environ={}, redis_url=url, namespace=f"b{key.replace('.', '')}", **overrides)
    redis = await connect_redis(settings)
    store = TaskStore(redis, Keys(settings.namespace), retention=600, queued_ttl=600)
    try:
        await one_task(store, -1)  # scripts loaded
        serial: list[float] = []
        for i in range(count // 4):
            t0 = time.perf_counter()
            await one_task(store, i)
            serial.append(ms_since(t0))
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                await one_task(store, i)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(count + i) for i in range(count)))
        rate = count / (time.perf_counter() - t0)
        figures = [
            Figure.from_samples(f"store.{key}.task", f"{label}: claim + final write, one task at a time", serial),
            Figure(f"store.{key}.task_rate", f"{label}: tasks/s, {concurrency} in flight", rate, "/s", n=count),
        ]
        if isinstance(redis, ClusterRedis):
            figures += await per_primary(redis, store, key, label, count // 4)
            figures += await index_spread(redis, key, label)
        return figures
    finally:
        await store.aclose()
        await redis.aclose()


async def per_primary(redis: ClusterRedis, store: TaskStore, key: str, label: str, count: int) -> list[Figure]:
    keys = Keys(store._k.ns)
    samples: dict[str, list[float]] = {}
    i = 3 * count
    while min((len(v) for v in samples.values()), default=0) < count or len(samples) < len(redis.get_primaries()):
        i += 1
        node = redis.nodes_manager.get_node_from_slot(redis.keyslot(keys.task(f"bench-{i}")))
        if len(samples.setdefault(node.name, [])) >= count:
            continue
        t0 = time.perf_counter()
        await one_task(store, i)
        samples[node.name].append(ms_since(t0))
    return [
        Figure.from_samples(f"store.{key}.node.{name}", f"{label}: via primary {name}", values)
        for name, values in sorted(samples.items())
    ]


async def index_spread(redis: ClusterRedis, key: str, label: str) -> list[Figure]:
    """Each primary's share of the index writes (ZADD calls, INFO commandstats) since the cluster started:
    with one key per index, one primary took them all."""
    calls = {}
    for node in redis.get_primaries():
        stats = await redis.info("commandstats", target_nodes=node)
        calls[node.name] = int(stats.get("cmdstat_zadd", {}).get("calls", 0))
    total = sum(calls.values()) or 1
    return [
        Figure(f"store.{key}.zadd.{name}", f"{label}: index writes on {name}", 100 * n / total, "%", n=n)
        for name, n in sorted(calls.items())
    ]


async def run(count: int, concurrency: int) -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(data_dir=Path(tmp) / "single") as single:
            figures = await measure(single.url, 1, "1 server, R1", count, concurrency)
        async with NatsCluster(data_dir=Path(tmp) / "cluster") as cluster:
            figures += await measure(cluster.url, 3, "3-node cluster, R3", count, concurrency)
            figures += await per_node(cluster, count // 8)
        async with ValkeyServer(data_dir=Path(tmp) / "valkey") as valkey:
            figures += await store_hot_path(valkey.url, "single", "1 Valkey server", count, concurrency)
        async with ValkeyCluster(data_dir=Path(tmp) / "valkey-cluster") as vc:
            on = {"redis_cluster": True}
            figures += await store_hot_path(vc.url, "cluster", "Valkey Cluster 3+3", count, concurrency, **on)
            wait = {**on, "redis_wait_replicas": 1}
            figures += await store_hot_path(
                vc.url, "cluster_wait", "Valkey Cluster 3+3, WAIT 1", count, concurrency, **wait
            )
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=64)
    args = p.parse_args()
    figures = asyncio.run(run(args.count, args.concurrency))
    print(format_table(figures))
    payload: dict[str, Any] = {
        "args": vars(args),
        "figures": [{**f.__dict__, "stats": Stats.of([]) if f.stats is None else f.stats} for f in figures],
    }
    print(f"results: {write_results('cluster', payload)}")


if __name__ == "__main__":
    main()
