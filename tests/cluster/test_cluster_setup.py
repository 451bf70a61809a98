"""A 3-node NATS JetStream cluster from the wheel: `init --replicas 3` makes R3 streams and buckets, a
comma-separated NATS_URL connects, and a JetStream publish rides out the loss of its stream's leader;
`up --cluster` starts it beside a Valkey Cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.cli.settings import adopt_local_mesh
from a2amesh.config import Settings
from a2amesh.errors import ConfigError
from a2amesh.mesh import Mesh
from a2amesh.store.cluster import ClusterRedis
from a2amesh.store.redis import connect_redis
from tests.cluster.test_valkey_cluster import roles
from tests.support.cli import run_cli
from tests.support.servers import ClusterServers
from tests.support.waiting import eventually, within


def cluster_settings(c: ClusterServers, namespace: str, replicas: int = 3) -> Settings:
    return Settings.load(
        environ={}, profile="test", nats_url=c.nats_url, redis_url=c.redis_url, namespace=namespace, replicas=replicas
    )


async def leader(bus: Bus, stream: str) -> str:
    info = await bus.jsm.stream_info(stream)
    return str(info.cluster.leader or "")


async def test_init_replicas_3_makes_r3_streams_and_buckets(cluster_servers: ClusterServers, namespace: str) -> None:
    env = {"NATS_URL": cluster_servers.nats_url, "A2AMESH_NAMESPACE": namespace, "A2AMESH_PROFILE": "test"}
    code, out, err = await run_cli("init", "--replicas", "3", env=env)
    assert code == 0, err
    assert "(3 replica(s))" in out
    settings = cluster_settings(cluster_servers, namespace)
    bus = await Bus.connect(settings, name="check")
    try:
        s = bus.subjects
        for stream in (
            s.tasks_stream,
            s.replies_stream,
            s.events_stream,
            f"KV_{s.cards_bucket}",
            f"KV_{s.presence_bucket}",
        ):
            info = await bus.jsm.stream_info(stream)
            assert info.config.num_replicas == 3, (stream, info.config.num_replicas)
            assert info.cluster is not None, stream
            assert info.cluster.leader, stream
            assert len(info.cluster.replicas or []) == 2, (stream, info.cluster.replicas)
        # a service starting without A2AMESH_REPLICAS (verify mode) keeps the replicas it finds
        await init_mesh(bus, settings.model_copy(update={"replicas": None}))
        for stream in (s.tasks_stream, f"KV_{s.cards_bucket}"):
            assert (await bus.jsm.stream_info(stream)).config.num_replicas == 3, stream
    finally:
        await bus.close()


async def test_replicas_beyond_a_single_server_is_a_precise_error(settings: Settings) -> None:
    bus = await Bus.connect(settings, name="single")
    try:
        with pytest.raises(ConfigError, match=r"3 replicas need a JetStream cluster of at least 3 nodes"):
            await init_mesh(bus, settings.model_copy(update={"replicas": 3}))
    finally:
        await bus.close()


async def test_publishes_ride_out_a_sigkilled_stream_leader(cluster_servers: ClusterServers, namespace: str) -> None:
    """300 publishes, one every 10 ms, while the node leading the tasks stream is SIGKILLed: every one is
    acknowledged and the stream holds each exactly once."""
    settings = cluster_settings(cluster_servers, namespace)
    bus = await Bus.connect(settings, name="publisher")
    try:
        await init_mesh(bus, settings)
        stream = bus.subjects.tasks_stream
        victim = cluster_servers.nats.node(await leader(bus, stream))
        subject = bus.subjects.request("ride")

        async def one(i: int) -> int:
            await asyncio.sleep(i * 0.01)
            ack = await bus.js_publish(subject, b"%d" % i, {"Nats-Msg-Id": f"ride:{i}"})
            return ack.seq

        publishes = asyncio.gather(*(one(i) for i in range(300)))
        await asyncio.sleep(0.8)
        await victim.kill()
        seqs = await within(publishes, 60, "every publish to be acknowledged")
        assert len(set(seqs)) == 300
        assert victim.cluster is not None
        assert await leader(bus, stream) not in ("", victim.cluster.server_name)
        info = await bus.jsm.stream_info(stream)
        assert info.state.messages == 300
        await victim.start()

        async def caught_up() -> bool:
            info = await bus.jsm.stream_info(stream)
            return all(r.current for r in info.cluster.replicas or []) and len(info.cluster.replicas or []) == 2

        await eventually(caught_up, timeout=30, what="the restarted node to catch up as a replica")
    finally:
        await bus.close()


async def test_up_cluster_starts_three_nodes_with_r3_streams(tmp_path: Path, namespace: str) -> None:
    """`a2amesh up --cluster`'s supervisor: three NATS nodes, R3 streams, a Valkey Cluster of 3 primaries and 3
    replicas, the URLs saved for the other verbs."""
    settings = Settings.load(environ={}, profile="test", namespace=namespace)
    state = tmp_path / "state"
    async with Mesh(settings, agents_dir=None, state_dir=state, cluster=True) as mesh:
        urls = mesh.nats_url.split(",")
        assert len(urls) == 3
        assert (state / "nats.urls").read_text() == mesh.nats_url
        adopted = adopt_local_mesh(settings.model_copy(update={"state_dir": str(state)}))
        assert adopted.nats_url == mesh.nats_url
        assert mesh.valkey_cluster is not None
        assert len(mesh.valkey_cluster.nodes) == 6
        assert adopted.redis_cluster
        assert adopted.redis_url is not None
        assert adopted.redis_url.get_secret_value() == mesh.redis_url
        assert roles(mesh.valkey_cluster) == ["master"] * 3 + ["replica"] * 3
        redis = await connect_redis(adopted)
        try:
            assert isinstance(redis, ClusterRedis)
            assert len(redis.get_primaries()) == 3
        finally:
            await redis.aclose()
        bus = await Bus.connect(mesh.effective_settings(), name="check-up")
        try:
            info = await bus.jsm.stream_info(bus.subjects.tasks_stream)
            assert info.config.num_replicas == 3
        finally:
            await bus.close()
