"""Chaos on a 3-node NATS JetStream cluster (R3 streams and buckets): the node leading the tasks stream is
SIGKILLed, restarted, or paused for 10 s while 40 five-step workflow runs are in flight.

Agents and executors run as separate OS processes with every node's URL in NATS_URL. Every run must
complete, no side effect may happen twice, and no call may fail because one server died.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.ids import task_id_for
from a2amesh.protocol import TaskState
from a2amesh.servers import NatsServer
from a2amesh.store.redis import connect_redis
from tests.chaos.conftest import ChaosSummary
from tests.chaos.test_executor_chaos import (
    Mesh,
    alive,
    chain,
    check,
    completed_effects,
    dispatch,
    finish,
    side_effects,
    start_agents,
    start_executor,
    summarise,
    write_folder,
)
from tests.support.processes import Proc, ProcessFactory
from tests.support.servers import ClusterServers
from tests.support.waiting import eventually, within

Report = Callable[[ChaosSummary], None]
RUNS = 40
STEPS = 5
CARD_TTL = 15.0
"""Card TTL of these meshes: a card must outlive a partition of its bucket's leader (the test profile's 3 s
does not; the default is 30 s)."""


@dataclass
class ClusterProcesses(ProcessFactory):
    """Processes started with the mesh's card TTL."""

    async def start(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        return await super().start(*args, env={"A2AMESH_CARD_TTL": str(CARD_TTL), **(env or {})})


@pytest.fixture
async def cluster_mesh(cluster_servers: ClusterServers, namespace: str, tmp_path: Path) -> AsyncIterator[Mesh]:
    """A mesh on the test's own 3-node cluster, its streams and buckets created with 3 replicas."""
    settings = Settings.load(
        environ={},
        profile="test",
        nats_url=cluster_servers.nats_url,
        redis_url=cluster_servers.redis_url,
        namespace=namespace,
        replicas=3,
        card_ttl=CARD_TTL,
    )
    bus = await Bus.connect(settings, name="chaos")
    await init_mesh(bus, settings)
    redis = await connect_redis(settings)
    client = Client(bus, settings)
    await client.start()
    factory = ClusterProcesses(settings.model_copy(update={"replicas": None}), tmp_path)
    try:
        yield Mesh(settings, bus, client, redis, factory)
    finally:
        await factory.cleanup()
        await client.close()
        await redis.aclose()
        await bus.close()


async def tasks_leader(m: Mesh, cluster: ClusterServers) -> NatsServer:
    """The node leading the tasks stream."""
    info = await m.bus.jsm.stream_info(m.bus.subjects.tasks_stream)
    return cluster.nats.node(str(info.cluster.leader))


async def run_with_fault(
    m: Mesh,
    cluster: ClusterServers,
    tmp_path: Path,
    scenario: str,
    fault: Callable[[NatsServer], Awaitable[None]],
    report: Report,
) -> ChaosSummary:
    """40 five-step runs: ``fault`` hits the tasks stream's leader once a quarter of the steps of the first 20
    are done, and the other 20 are dispatched while it is on."""
    folder = write_folder(tmp_path / "wf", {"chain5": chain("chain5", STEPS, 0.2)})
    agents = await start_agents(m, tmp_path)
    executors = [await start_executor(m, folder, "chain5") for _ in range(2)]
    first_seen: dict[str, float] = {}  # task id of each step -> when its request was first published

    async def on_request(msg: Received) -> None:
        message_id = msg.headers.get(h.MSG_ID, "").partition(":")[2]
        first_seen.setdefault(task_id_for("effects", message_id), time.monotonic())

    watcher = await m.bus.subscribe(m.bus.subjects.request("effects"), on_request)
    calls = await dispatch(m, "chain5", RUNS // 2)

    async def quarter() -> bool:
        return await completed_effects(m) >= RUNS // 2 * STEPS // 4

    await eventually(quarter, timeout=60, what="a quarter of the first runs' steps to complete")
    victim = await tasks_leader(m, cluster)
    started = time.monotonic()
    hit = asyncio.create_task(fault(victim))
    # the other half is dispatched while the fault is on: the callers' publishes meet the election
    calls += await dispatch(m, "chain5", RUNS - RUNS // 2)

    async def new_step_done() -> bool:
        done = await side_effects(m)
        return any(t in done for t, seen in list(first_seen.items()) if seen > started)

    # recovery: from the fault until a step dispatched after it (through the new leader) has completed
    await eventually(new_step_done, timeout=60, what="a step dispatched after the fault to complete", interval=0.05)
    recovery = time.monotonic() - started
    await within(hit, 30, "the fault to end")
    await watcher.unsubscribe()
    tasks, effects = await finish(m, calls, timeout=80)  # within pytest-timeout: a stuck run fails clearly
    failed = [t.status for t in tasks if t.status.state != TaskState.COMPLETED]
    assert not failed, [s.message.text() if s.message else s.state for s in failed[:3]]
    assert len(effects) == RUNS * STEPS, f"{len(effects)} distinct side effects, expected {RUNS * STEPS}"
    summary = summarise(scenario, calls, tasks, effects, recovery)
    report(summary)
    check(summary, tasks)
    alive(agents + executors)
    return summary


async def test_sigkill_tasks_stream_leader(
    cluster_mesh: Mesh, cluster_servers: ClusterServers, tmp_path: Path, report: Report
) -> None:
    """The node leading the tasks stream is SIGKILLed mid-run (and comes back later as a replica)."""
    killed: list[NatsServer] = []

    async def kill(node: NatsServer) -> None:
        await node.kill()
        killed.append(node)

    await run_with_fault(cluster_mesh, cluster_servers, tmp_path, "nats-cluster-sigkill-leader", kill, report)
    assert (await tasks_leader(cluster_mesh, cluster_servers)) is not killed[0]
    await killed[0].start()


async def test_restart_tasks_stream_leader_node(
    cluster_mesh: Mesh, cluster_servers: ClusterServers, tmp_path: Path, report: Report
) -> None:
    """The whole node leading the tasks stream restarts (SIGTERM, same port and store) mid-run."""
    await run_with_fault(
        cluster_mesh, cluster_servers, tmp_path, "nats-cluster-restart-node", lambda n: n.restart(), report
    )


async def test_pause_tasks_stream_leader_10s(
    cluster_mesh: Mesh, cluster_servers: ClusterServers, tmp_path: Path, report: Report
) -> None:
    """The node leading the tasks stream is SIGSTOPped for 10 s mid-run (a partition), then resumed."""

    async def pause(node: NatsServer) -> None:
        node.pause()
        try:
            await asyncio.sleep(10)  # the fault's length, not a wait for an event
        finally:
            node.resume()

    await run_with_fault(cluster_mesh, cluster_servers, tmp_path, "nats-cluster-sigstop-10s", pause, report)
