"""Chaos on a 3-node NATS JetStream cluster (R3 streams and buckets): the node leading the tasks stream is
SIGKILLed, restarted, or paused for 10 s while 40 five-step workflow runs are in flight; and on a Valkey
Cluster (3 primaries, 3 replicas) beside it: the primary holding an in-flight execution is SIGKILLed and its
replica promoted, with durable writes waiting for one replica (A2AMESH_REDIS_WAIT_REPLICAS=1).

Agents and executors run as separate OS processes with every node's URL in NATS_URL. Every run must
complete, no side effect may happen twice, and no call may fail because one server died.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Call, Client
from a2amesh.config import Settings
from a2amesh.ids import task_id_for
from a2amesh.protocol import TaskState
from a2amesh.servers import NatsServer, ValkeyCluster, ValkeyServer
from a2amesh.store.cluster import ClusterRedis
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import connect_redis
from tests.chaos.conftest import ChaosSummary, completions
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
from tests.chaos.test_starvation import FENCE_EVENTS, log_count
from tests.support.processes import Proc, ProcessFactory
from tests.support.servers import ClusterServers
from tests.support.waiting import eventually, within

Report = Callable[[ChaosSummary], None]
Fault = Callable[[list[Call]], Coroutine[Any, Any, None]]
RUNS = 40
STEPS = 5
CARD_TTL = 15.0
"""Card TTL of these meshes: a card must outlive a partition of its bucket's leader (the test profile's 3 s
does not; the default is 30 s)."""


@dataclass
class ClusterProcesses(ProcessFactory):
    """Processes started with the mesh's card TTL (and the test's records server, when it has one)."""

    records_url: str = ""

    async def start(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        extra = {"A2AMESH_CARD_TTL": str(CARD_TTL), "A2AMESH_TEST_RECORDS_URL": self.records_url}
        return await super().start(*args, env={**extra, **(env or {})})


@asynccontextmanager
async def mesh_on(servers: ClusterServers, namespace: str, tmp_path: Path, **overrides: Any) -> AsyncIterator[Mesh]:
    """A mesh on the test's own clusters, its streams and buckets created with 3 replicas. On a Valkey Cluster,
    the agents record their side effects on a Valkey server of their own (``Mesh.redis`` reads it there)."""
    settings = Settings.load(
        environ={},
        profile="test",
        nats_url=servers.nats_url,
        redis_url=servers.redis_url,
        redis_cluster=servers.redis_cluster,
        namespace=namespace,
        replicas=3,
        card_ttl=CARD_TTL,
        **overrides,
    )
    records = ValkeyServer(data_dir=tmp_path / "records") if servers.redis_cluster else None
    if records is not None:
        await records.start()
    bus = await Bus.connect(settings, name="chaos")
    await init_mesh(bus, settings)
    redis = (
        await connect_redis(settings.model_copy(update={"redis_cluster": False}), url=records.url)
        if records
        else await connect_redis(settings)
    )
    client = Client(bus, settings)
    await client.start()
    factory = ClusterProcesses(
        settings.model_copy(update={"replicas": None}), tmp_path, records_url=records.url if records else ""
    )
    try:
        yield Mesh(settings, bus, client, redis, factory)
    finally:
        await factory.cleanup()
        await client.close()
        await redis.aclose()
        await bus.close()
        if records is not None:
            await records.stop()


@pytest.fixture
async def cluster_mesh(cluster_servers: ClusterServers, namespace: str, tmp_path: Path) -> AsyncIterator[Mesh]:
    """A mesh on the test's own 3-node NATS cluster and a Valkey server."""
    async with mesh_on(cluster_servers, namespace, tmp_path) as m:
        yield m


async def tasks_leader(m: Mesh, cluster: ClusterServers) -> NatsServer:
    """The node leading the tasks stream."""
    info = await m.bus.jsm.stream_info(m.bus.subjects.tasks_stream)
    return cluster.nats.node(str(info.cluster.leader))


def on_leader(m: Mesh, cluster: ClusterServers, fault: Callable[[NatsServer], Awaitable[None]]) -> Fault:
    """``fault`` applied to the node leading the tasks stream when it strikes."""

    async def strike(first_runs: list[Call]) -> None:
        await fault(await tasks_leader(m, cluster))

    return strike


async def run_with_fault(
    m: Mesh,
    tmp_path: Path,
    scenario: str,
    fault: Fault,
    report: Report,
    *,
    count_fenced: bool = False,
    diagnose: Callable[[list[Call]], Awaitable[str]] | None = None,
) -> ChaosSummary:
    """40 five-step runs: ``fault`` strikes once a quarter of the steps of the first 20 are done (it is given
    their calls), and the other 20 are dispatched while it is on. ``count_fenced``: the summary counts the
    runs the agents and executors stopped because another replica took them over (their logs)."""
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
    started = time.monotonic()
    hit = asyncio.create_task(fault(list(calls)))
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
    try:
        tasks, effects = await finish(m, calls, timeout=80)  # within pytest-timeout: a stuck run fails clearly
    except AssertionError as e:
        found = await (diagnose(calls) if diagnose is not None else where_runs_stand(m, calls, agents + executors))
        raise AssertionError(f"{e}\n{found}") from None
    failed = [t.status for t in tasks if t.status.state != TaskState.COMPLETED]
    assert not failed, [s.message.text() if s.message else s.state for s in failed[:3]]
    assert len(effects) == RUNS * STEPS, f"{len(effects)} distinct side effects, expected {RUNS * STEPS}"
    summary = summarise(scenario, calls, tasks, effects, recovery)
    if count_fenced:
        summary.fenced = sum(log_count(p, *FENCE_EVENTS) for p in agents + executors)
    report(summary)
    if summary.duplicated:
        print(await duplicates_seen(m, effects, agents + executors))
    check(summary, tasks)
    alive(agents + executors)
    return summary


async def where_runs_stand(m: Mesh, calls: list[Call], procs: list[Proc]) -> str:
    """For each unfinished run: its execution record and lease, its node records and every process's log lines
    about the run or its callees' tasks, so a run stuck in CI explains itself."""
    store = await connect_redis(m.settings)  # m.redis is the records server on a Valkey Cluster
    executions = ExecutionStore.for_settings(store, m.settings)
    out: list[str] = []
    for call in calls:
        if call.task is not None and call.task.status.state.terminal:
            continue
        record = await executions.record(call.task_id) or {}
        fields = {k: record.get(k) for k in ("status", "epoch", "final_published", "owner")}
        out.append(f"run {call.task_id}: {fields} lease owner={await executions.lease_owner(call.task_id)!r}")
        ids = {call.task_id}
        for path, node in (await executions.nodes(call.task_id)).items():
            out.append(f"  node {path}: {node}")
            if node.get("task_id"):
                ids.add(str(node["task_id"]))
        for p in procs:
            out += [f"  pid {p.pid}: {line}" for line in p.output().splitlines() if any(i in line for i in ids)]
    await store.aclose()
    return "\n".join(out)


async def duplicates_seen(m: Mesh, effects: dict[str, int], procs: list[Proc]) -> str:
    """For each side effect completed more than once: the pids that completed it and every process's log
    lines about its task, so a duplicate found in CI explains itself."""
    out: list[str] = []
    for task_id in [t for t, n in effects.items() if n > 1]:
        out.append(f"task {task_id} completed by pids {await completions(m.redis, m.settings.namespace, task_id)}")
        for p in procs:
            out += [f"  pid {p.pid}: {line}" for line in p.output().splitlines() if task_id in line]
    return "\n".join(out)


async def test_sigkill_tasks_stream_leader(
    cluster_mesh: Mesh, cluster_servers: ClusterServers, tmp_path: Path, report: Report
) -> None:
    """The node leading the tasks stream is SIGKILLed mid-run (and comes back later as a replica)."""
    killed: list[NatsServer] = []

    async def kill(node: NatsServer) -> None:
        await node.kill()
        killed.append(node)

    fault = on_leader(cluster_mesh, cluster_servers, kill)
    await run_with_fault(cluster_mesh, tmp_path, "nats-cluster-sigkill-leader", fault, report)
    assert (await tasks_leader(cluster_mesh, cluster_servers)) is not killed[0]
    await killed[0].start()


async def test_restart_tasks_stream_leader_node(
    cluster_mesh: Mesh, cluster_servers: ClusterServers, tmp_path: Path, report: Report
) -> None:
    """The whole node leading the tasks stream restarts (SIGTERM, same port and store) mid-run."""
    fault = on_leader(cluster_mesh, cluster_servers, lambda n: n.restart())
    await run_with_fault(cluster_mesh, tmp_path, "nats-cluster-restart-node", fault, report)


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

    fault = on_leader(cluster_mesh, cluster_servers, pause)
    await run_with_fault(cluster_mesh, tmp_path, "nats-cluster-sigstop-10s", fault, report)


@pytest.fixture
async def valkey_cluster_mesh(both_clusters: ClusterServers, namespace: str, tmp_path: Path) -> AsyncIterator[Mesh]:
    """A mesh on the test's own NATS cluster and Valkey Cluster; durable writes wait for one replica."""
    async with mesh_on(both_clusters, namespace, tmp_path, redis_wait_replicas=1, redis_wait_timeout_ms=8000) as m:
        yield m


async def test_sigkill_valkey_primary_of_inflight_executions(
    valkey_cluster_mesh: Mesh, both_clusters: ClusterServers, tmp_path: Path, report: Report
) -> None:
    """The Valkey primary holding an in-flight execution's slot is SIGKILLed mid-run; its replica is promoted
    (cluster-node-timeout 1 s) and the killed node, restarted once the promotion is seen, rejoins as its
    replica (durable writes to that shard wait for a replica again from then on)."""
    m = valkey_cluster_mesh
    valkey = both_clusters.valkey
    assert isinstance(valkey, ValkeyCluster)
    store = await connect_redis(m.settings)
    assert isinstance(store, ClusterRedis)
    killed: list[int] = []

    async def kill_primary(first_runs: list[Call]) -> None:
        key = Keys(m.settings.namespace).execution(first_runs[0].task_id)
        port = int(store.nodes_manager.get_node_from_slot(store.keyslot(key)).port)
        await valkey.node_at(port).kill()
        killed.append(port)

        async def promoted() -> bool:
            try:
                await store.nodes_manager.initialize()
            except Exception:  # the map is read again on the next try
                return False
            return int(store.nodes_manager.get_node_from_slot(store.keyslot(key)).port) != port

        killed_at = time.monotonic()
        await eventually(promoted, timeout=30, what="the killed primary's replica to be promoted", interval=0.2)
        print(
            f"valkey primary 127.0.0.1:{port} killed: its replica promoted within {time.monotonic() - killed_at:.2f}s"
        )
        await valkey.node_at(port).start()

    try:
        await run_with_fault(m, tmp_path, "valkey-cluster-sigkill-primary", kill_primary, report)
        await store.nodes_manager.initialize()
        roles = {n.port: n.server_type for n in store.get_nodes()}
        assert roles.get(killed[0]) == "replica", f"the killed primary did not rejoin as a replica: {roles}"
    finally:
        await store.aclose()


async def test_sigstop_valkey_primary_of_inflight_executions(
    valkey_cluster_mesh: Mesh, both_clusters: ClusterServers, tmp_path: Path, report: Report
) -> None:
    """Starvation of a store node: the Valkey primary holding an in-flight execution's slot is SIGSTOPped for
    longer than the claim, lease and presence TTLs (its replica is promoted meanwhile), then continued: it
    finds itself demoted and rejoins as a replica; what was written to it while it was stopped and never
    reached a replica is refused (durable writes wait for a replica), and nothing is lost or done twice."""
    m = valkey_cluster_mesh
    valkey = both_clusters.valkey
    assert isinstance(valkey, ValkeyCluster)
    store = await connect_redis(m.settings)
    assert isinstance(store, ClusterRedis)
    paused: list[int] = []
    pause = 2 * max(m.settings.lease_ttl, m.settings.ack_wait) + 1

    async def stop_primary(first_runs: list[Call]) -> None:
        key = Keys(m.settings.namespace).execution(first_runs[0].task_id)
        port = int(store.nodes_manager.get_node_from_slot(store.keyslot(key)).port)
        node = valkey.node_at(port)
        node.pause()
        paused.append(port)
        try:
            await asyncio.sleep(pause)  # the starvation's length, not a wait for an event
        finally:
            node.resume()

    async def diagnose(calls: list[Call]) -> str:
        """Where each unfinished run stands in the store."""
        keys = Keys(m.settings.namespace)
        lines = []
        for call in calls:
            record = await store.hgetall(keys.execution(call.task_id))
            if record.get("status") == "completed" and record.get("final_published") == "1":
                continue
            entries = [await store.zscore(keys.leases_index(s), call.task_id) for s in keys.shards]
            lease = await store.get(keys.lease(call.task_id))
            fields = {k: record.get(k) for k in ("status", "epoch", "final_published")}
            lines.append(f"{call.task_id}: {fields} lease={lease!r} lease_index={[e for e in entries if e]}")
        return "\n".join(lines)

    try:
        await run_with_fault(
            m, tmp_path, "valkey-cluster-sigstop-primary", stop_primary, report, count_fenced=True, diagnose=diagnose
        )

        async def demoted() -> bool:
            await store.nodes_manager.initialize()
            return {n.port: n.server_type for n in store.get_nodes()}.get(paused[0]) == "replica"

        await eventually(demoted, timeout=30, what="the stopped primary to rejoin as a replica")
    finally:
        await store.aclose()
