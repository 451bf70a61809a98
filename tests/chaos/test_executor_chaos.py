"""Chaos: executor replicas SIGKILLed, fault hooks, NATS and Valkey restarts and pauses, duplicate replies.

Every scenario runs executors and agents as separate OS processes (test profile) and asserts that every
execution reaches its final state, that no completed side effect happened twice and that nothing was lost.
Side effects are counted by the ``side_effect`` test agent, keyed by callee task id.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Call, Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import Task, TaskState
from a2amesh.store.redis import Redis, connect_redis
from tests.chaos.conftest import ChaosSummary, completions
from tests.support.processes import Proc, ProcessFactory, write_agent
from tests.support.servers import MeshServers
from tests.support.waiting import eventually, within

Report = Callable[[ChaosSummary], None]


# --- a mesh on the test's own servers (for the NATS / Valkey faults) ---------------------------


@dataclass
class Mesh:
    """Connections of one test to a mesh."""

    settings: Settings
    bus: Bus
    client: Client
    redis: Redis
    processes: ProcessFactory


@pytest.fixture
async def own_mesh(fault_servers: MeshServers, namespace: str, tmp_path: Path) -> AsyncIterator[Mesh]:
    """Settings, bus, client, Redis and a process factory on this test's own servers."""
    settings = Settings.load(
        environ={},
        profile="test",
        nats_url=fault_servers.nats_url,
        redis_url=fault_servers.redis_url,
        namespace=namespace,
    )
    bus = await Bus.connect(settings, name="chaos")
    await init_mesh(bus, settings)
    redis = await connect_redis(settings)
    client = Client(bus, settings)
    await client.start()
    factory = ProcessFactory(settings, tmp_path)
    try:
        yield Mesh(settings, bus, client, redis, factory)
    finally:
        await factory.cleanup()
        await client.close()
        await redis.aclose()
        await bus.close()


@pytest.fixture
async def mesh(settings: Settings, bus: Bus, client: Client, redis: Redis, processes: ProcessFactory) -> Mesh:
    """The session servers' mesh (for scenarios that only kill our own processes)."""
    return Mesh(settings, bus, client, redis, processes)


# --- workflows, agents, executors -----------------------------------------------------------


def chain(name: str, nodes: int, seconds: float) -> str:
    """A workflow of ``nodes`` agent nodes one after the other, each a side effect of ``seconds``."""
    lines = [f"name: {name}", "nodes:"]
    for i in range(nodes):
        deps = f", depends_on: [n{i - 1}]" if i else ""
        lines.append(f"  - {{id: n{i}, type: agent, agent_name: effects{deps}, input: {{seconds: {seconds}}}}}")
    lines.append(f'output_mapping: {{last: "{{{{n{nodes - 1}.output.task}}}}"}}')
    return "\n".join(lines) + "\n"


def fan(name: str, items: int, concurrency: int, seconds: float) -> str:
    """A map of ``items`` side effects, ``concurrency`` at once."""
    return textwrap.dedent(
        f"""
        name: {name}
        nodes:
          - id: each
            type: map
            withItems: {list(range(items))}
            node: item
            concurrency_limit: {concurrency}
            max_items: {items}
          - {{id: item, type: agent, agent_name: effects, input: {{seconds: {seconds}}}}}
        output_mapping: {{results: "{{{{each.output.results}}}}"}}
        """
    )


def write_folder(folder: Path, workflows: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in workflows.items():
        (folder / f"{name}.yaml").write_text(text)
    return folder


def instance_of(proc: Proc) -> str | None:
    for line in proc.output().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "executor.ready":
            return str(entry.get("instance"))
    return None


async def start_executor(m: Mesh, folder: Path, workflow: str, fault: str | None = None) -> Proc:
    env = {"A2AMESH_FAULT": f"crash:{fault}"} if fault else None
    proc = await m.processes.start("executor", str(folder), "--reload-interval", "0.5", env=env)

    async def ready() -> bool:
        assert proc.returncode is None, f"executor exited: {proc.output()[-3000:]}"
        return instance_of(proc) is not None and m.client.registry.get(workflow) is not None

    await eventually(ready, timeout=30, what="the executor to serve its workflows")
    return proc


async def present(bus: Bus, prefix: str) -> int:
    kv = await bus.kv(bus.subjects.presence_bucket)
    return len([k for k in await kv.keys() if k.startswith(prefix)])


async def start_agents(m: Mesh, tmp: Path, replicas: int = 2, concurrency: int = 32) -> list[Proc]:
    path = write_agent(tmp, "effects", "side_effect", max_concurrency=concurrency)
    procs = [await m.processes.start("agent", str(path)) for _ in range(replicas)]

    async def all_present() -> bool:
        for p in procs:
            assert p.returncode is None, f"agent exited: {p.output()[-3000:]}"
        return await present(m.bus, "effects.") >= replicas

    await eventually(all_present, timeout=30, what=f"{replicas} agent replicas")
    return procs


async def dispatch(m: Mesh, workflow: str, runs: int) -> list[Call]:
    return [await m.client.dispatch(workflow, make_message(data={}), timeout=240) for _ in range(runs)]


async def side_effects(m: Mesh) -> dict[str, int]:
    """Completed side effects per callee task id."""
    prefix = f"{m.settings.namespace}:test:completed:"
    out: dict[str, int] = {}
    async for key in m.redis.scan_iter(match=prefix + "*", count=1000):
        task_id = str(key)[len(prefix) :]
        out[task_id] = len(await completions(m.redis, m.settings.namespace, task_id))
    return out


async def completed_effects(m: Mesh) -> int:
    return len(await side_effects(m))


async def lease_of(m: Mesh, execution_id: str) -> str:
    return str(await m.redis.get(f"{m.settings.namespace}:exec:{{{execution_id}}}:lease") or "")


async def node_records(m: Mesh, execution_id: str) -> dict[str, dict[str, Any]]:
    raw = await m.redis.hgetall(f"{m.settings.namespace}:exec:{{{execution_id}}}:nodes")
    return {str(k): json.loads(v) for k, v in raw.items()}


def alive(procs: list[Proc]) -> None:
    for p in procs:
        assert p.returncode is None, f"{p.argv[3:]} exited with {p.returncode}: {p.output()[-3000:]}"


async def finish(
    m: Mesh, calls: list[Call], *, timeout: float, expect_effects: int | None = None, done: list[Task] | None = None
) -> tuple[list[Task], dict[str, int]]:
    """Await every call (``done``: tasks of calls already awaited); return the final tasks and the side effects."""
    outcomes: list[Task | BaseException] = list(done or [])
    outcomes += await within(
        asyncio.gather(*(c.result() for c in calls), return_exceptions=True), timeout, "every run to finish"
    )
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    tasks = [o for o in outcomes if isinstance(o, Task)]
    effects = await side_effects(m)
    assert not errors, errors[:3]
    if expect_effects is not None:
        assert len(effects) == expect_effects, f"{len(effects)} distinct side effects, expected {expect_effects}"
    return tasks, effects


def summarise(
    scenario: str, calls: list[Call], tasks: list[Task], effects: dict[str, int], recovery: float
) -> ChaosSummary:
    completed = [t for t in tasks if t.status.state == TaskState.COMPLETED]
    return ChaosSummary(
        scenario=scenario,
        runs=len(calls),
        completed=len(completed),
        lost=len(calls) - len(completed),
        duplicated=sum(1 for n in effects.values() if n > 1),
        max_recovery_s=recovery,
    )


def check(summary: ChaosSummary, tasks: list[Task]) -> None:
    assert summary.lost == 0, [t.status for t in tasks if t.status.state != TaskState.COMPLETED][:3]
    assert summary.duplicated == 0


async def progress_after(m: Mesh, since: float, baseline: int, timeout: float) -> float:
    """Seconds from ``since`` until one more side effect completed than ``baseline``."""

    async def moved() -> bool:
        return await completed_effects(m) > baseline

    await eventually(moved, timeout=timeout, what="work to resume after the fault", interval=0.05)
    return time.monotonic() - since


async def kill_driver(m: Mesh, execution_id: str, executors: list[Proc]) -> tuple[Proc, float, str]:
    """SIGKILL the replica holding the execution's lease; returns it, the kill time and its instance."""
    holder = await eventually(lambda: lease_of(m, execution_id), timeout=10, what="a lease holder")
    owner_instance = holder.partition(":")[0]
    victim = next(p for p in executors if instance_of(p) == owner_instance)
    victim.signal(signal.SIGKILL)
    killed = time.monotonic()
    await victim.wait(10)
    executors.remove(victim)
    return victim, killed, owner_instance


async def taken_over(m: Mesh, execution_id: str, old_instance: str, killed: float) -> float:
    """Seconds from the kill until another replica holds the lease (or the execution finished)."""

    async def moved() -> bool:
        lease = await lease_of(m, execution_id)
        if lease:
            return not lease.startswith(old_instance + ":")
        status = await m.redis.hget(f"{m.settings.namespace}:exec:{{{execution_id}}}", "status")
        return status not in (None, "running")

    await eventually(moved, timeout=20, what="another replica to take the execution over", interval=0.02)
    return time.monotonic() - killed


# --- scenario 1: SIGKILL the replica driving a 10-node workflow --------------------------------


async def test_sigkill_executor_driving_chain(mesh: Mesh, tmp_path: Path, report: Report) -> None:
    """Scenario 1: the replica driving a 10-node run is SIGKILLed at a random node; another replica finishes it."""
    rng = random.Random(5001)
    folder = write_folder(tmp_path / "wf", {"chain10": chain("chain10", 10, 0.15)})
    await start_agents(mesh, tmp_path)
    executors = [await start_executor(mesh, folder, "chain10") for _ in range(2)]
    calls: list[Call] = []
    done: list[Task] = []
    recoveries: list[float] = []
    for _ in range(3):
        call = (await dispatch(mesh, "chain10", 1))[0]
        calls.append(call)
        base = await completed_effects(mesh)
        at = rng.randint(1, 8)

        async def reached(base: int = base, at: int = at) -> bool:
            return await completed_effects(mesh) >= base + at

        await eventually(reached, timeout=30, what=f"node {at} of the run")
        _, killed, owner = await kill_driver(mesh, call.task_id, executors)
        recoveries.append(await taken_over(mesh, call.task_id, owner, killed))
        done.append(await within(call.result(), 60, "the run after the kill"))
        executors.append(await start_executor(mesh, folder, "chain10"))
    tasks, effects = await finish(mesh, [], timeout=30, expect_effects=30, done=done)
    summary = summarise("executor-sigkill-chain", calls, tasks, effects, max(recoveries))
    report(summary)
    check(summary, tasks)
    for call in calls:
        nodes = await node_records(mesh, call.task_id)
        assert all(n["status"] == "completed" and n["attempt"] == 1 for n in nodes.values()), nodes
    assert max(recoveries) < 5, recoveries


# --- scenario 3: NATS restart during 50 concurrent executions ----------------------------------


async def test_nats_restart_during_50_runs(
    own_mesh: Mesh, fault_servers: MeshServers, tmp_path: Path, report: Report
) -> None:
    """Scenario 3: NATS restarts (same store) while 50 executions run: every one completes, none twice."""
    m = own_mesh
    folder = write_folder(tmp_path / "wf", {"chain3": chain("chain3", 3, 0.3)})
    agents = await start_agents(m, tmp_path)
    executors = [await start_executor(m, folder, "chain3") for _ in range(2)]
    calls = await dispatch(m, "chain3", 50)
    await eventually(lambda: _at_least(m, 25), timeout=30, what="a quarter of the nodes to complete")
    assert fault_servers.nats is not None
    await fault_servers.nats.restart()
    restarted = time.monotonic()
    recovery = await progress_after(m, restarted, await completed_effects(m), timeout=30)
    tasks, effects = await finish(m, calls, timeout=120, expect_effects=150)
    summary = summarise("nats-restart-50", calls, tasks, effects, recovery)
    report(summary)
    check(summary, tasks)
    alive(agents + executors)


async def _at_least(m: Mesh, n: int) -> bool:
    return await completed_effects(m) >= n


# --- scenario 4: Valkey restart (AOF) and Valkey SIGSTOP for 10 s ------------------------------


async def test_valkey_restart_with_aof(
    own_mesh: Mesh, fault_servers: MeshServers, tmp_path: Path, report: Report
) -> None:
    """Scenario 4a: Valkey restarts (AOF everysec) during 20 runs: they continue from their checkpoints."""
    m = own_mesh
    folder = write_folder(tmp_path / "wf", {"chain6": chain("chain6", 6, 0.4)})
    agents = await start_agents(m, tmp_path)
    executors = [await start_executor(m, folder, "chain6") for _ in range(2)]
    calls = await dispatch(m, "chain6", 20)
    await eventually(lambda: _at_least(m, 30), timeout=30, what="a quarter of the nodes to complete")
    assert fault_servers.valkey is not None
    # SIGTERM: Valkey fsyncs its AOF on the way down, so the restart loses nothing
    await fault_servers.valkey.restart()
    restarted = time.monotonic()
    recovery = await progress_after(m, restarted, await completed_effects(m), timeout=30)
    tasks, effects = await finish(m, calls, timeout=120, expect_effects=120)
    summary = summarise("valkey-restart-aof", calls, tasks, effects, recovery)
    report(summary)
    check(summary, tasks)
    alive(agents + executors)


async def test_valkey_paused_10s(own_mesh: Mesh, fault_servers: MeshServers, tmp_path: Path, report: Report) -> None:
    """Scenario 4b: Valkey SIGSTOPped for 10 s mid-run: no process exits, nothing is dispatched, all complete."""
    m = own_mesh
    folder = write_folder(tmp_path / "wf", {"chain4": chain("chain4", 4, 0.3)})
    agents = await start_agents(m, tmp_path)
    executors = [await start_executor(m, folder, "chain4") for _ in range(2)]
    calls = await dispatch(m, "chain4", 20)
    await eventually(lambda: _at_least(m, 20), timeout=30, what="a quarter of the nodes to complete")
    dispatched: list[float] = []

    async def on_request(msg: Received) -> None:
        dispatched.append(time.monotonic())

    watcher = await m.bus.subscribe(m.bus.subjects.request("effects"), on_request)
    assert fault_servers.valkey is not None
    fault_servers.valkey.pause()
    paused = time.monotonic()
    try:
        await asyncio.sleep(10)
    finally:
        fault_servers.valkey.resume()
    resumed = time.monotonic()
    alive(agents + executors)
    await eventually(lambda: any(t > resumed for t in dispatched), timeout=30, what="a dispatch after the pause")
    recovery = min(t for t in dispatched if t > resumed) - resumed
    # a dispatch already past its checkpoint may still leave in the first moment of the pause
    during = [t for t in dispatched if paused + 0.5 < t < resumed]
    tasks, effects = await finish(m, calls, timeout=120, expect_effects=80)
    await watcher.unsubscribe()
    summary = summarise("valkey-sigstop-10s", calls, tasks, effects, recovery)
    report(summary)
    check(summary, tasks)
    assert not during, f"{len(during)} node requests published while Valkey was paused"
    alive(agents + executors)


# --- scenario 5: SIGKILL the executor while a map of 200 items is half done --------------------


async def test_sigkill_executor_mid_map(mesh: Mesh, tmp_path: Path, report: Report) -> None:
    """Scenario 5: a map of 200 items (concurrency 20) loses its executor half way; the other finishes it."""
    folder = write_folder(tmp_path / "wf", {"map200": fan("map200", 200, 20, 0.05)})
    await start_agents(mesh, tmp_path)
    executors = [await start_executor(mesh, folder, "map200") for _ in range(2)]
    call = (await dispatch(mesh, "map200", 1))[0]
    await eventually(lambda: _at_least(mesh, 100), timeout=60, what="half of the map")
    _, killed, owner = await kill_driver(mesh, call.task_id, executors)
    recovery = await taken_over(mesh, call.task_id, owner, killed)
    tasks, effects = await finish(mesh, [call], timeout=60, expect_effects=200)
    summary = summarise("executor-sigkill-map200", [call], tasks, effects, recovery)
    report(summary)
    check(summary, tasks)
    results = tasks[0].output()["results"]
    assert len(results) == 200
    assert all(r is not None for r in results)
    assert recovery < 5


# --- scenario 6: duplicate and out-of-order replies --------------------------------------------


class ReplyInjector:
    """Re-publishes every agent reply on the reply stream: the final twice more (one late), and a stale
    progress message with a lower sequence number after the final — new Nats-Msg-Ids, so none is deduplicated."""

    MARK = "X-Chaos-Copy"

    def __init__(self, bus: Bus, agent: str) -> None:
        self.bus = bus
        self.agent = agent
        self.injected = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.sub = await self.bus.subscribe(self.bus.subjects.reply_all, self._on_reply)

    async def stop(self) -> None:
        await self.sub.unsubscribe()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)

    async def _on_reply(self, msg: Received) -> None:
        if msg.headers.get(self.MARK) or msg.headers.get(h.AGENT) != self.agent or msg.headers.get(h.FINAL) != "true":
            return
        task = asyncio.create_task(self._inject(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _inject(self, msg: Received) -> None:
        base = {k: v for k, v in msg.headers.items() if k != h.MSG_ID}
        stale = {k: v for k, v in base.items() if k != h.FINAL}
        copies: list[tuple[float, dict[str, str]]] = [
            (0.0, {**base, h.MSG_ID: f"chaos:{msg.subject}:a"}),
            (0.05, {**stale, h.SEQ: "1", h.MSG_ID: f"chaos:{msg.subject}:s"}),
            (0.4, {**base, h.MSG_ID: f"chaos:{msg.subject}:b"}),
        ]
        for delay, hdrs in copies:
            await asyncio.sleep(delay)
            await self.bus.js_publish(msg.subject, msg.data, {**hdrs, self.MARK: "1"})
            self.injected += 1


async def test_duplicate_and_out_of_order_replies(mesh: Mesh, tmp_path: Path, report: Report) -> None:
    """Scenario 6: duplicated, late and out-of-order replies change nothing: each node result is applied once."""
    folder = write_folder(
        tmp_path / "wf",
        {"chain5": chain("chain5", 5, 0.05), "map8": fan("map8", 8, 4, 0.05)},
    )
    await start_agents(mesh, tmp_path)
    executors = [await start_executor(mesh, folder, "chain5") for _ in range(2)]
    await eventually(lambda: mesh.client.registry.get("map8") is not None, timeout=10, what="the map8 card")
    injector = ReplyInjector(mesh.bus, "effects")
    await injector.start()
    started = time.monotonic()
    try:
        calls = await dispatch(mesh, "chain5", 10) + await dispatch(mesh, "map8", 5)
        tasks, effects = await finish(mesh, calls, timeout=90, expect_effects=10 * 5 + 5 * 8)
        await asyncio.sleep(0.6)  # room for the late copies to arrive after the runs finished
    finally:
        await injector.stop()
    summary = summarise("duplicate-replies", calls, tasks, effects, 0.0)
    report(summary)
    check(summary, tasks)
    assert injector.injected >= 3 * 90
    for call in calls:
        nodes = await node_records(mesh, call.task_id)
        agents = {p: n for p, n in nodes.items() if n.get("agent") == "effects"}
        assert all(n["status"] == "completed" and n["attempt"] == 1 for n in agents.values()), agents
        events = cast(  # decode_responses; a stream's range is never None
            list[tuple[str, dict[str, str]]],
            await mesh.redis.xrange(f"{mesh.settings.namespace}:exec:{{{call.task_id}}}:events"),
        )
        done = [json.loads(f["event"]) for _, f in events]
        done = [e["path"] for e in done if e.get("event") == "node.completed"]
        assert len(done) == len(set(done)), done
    alive(executors)
    assert time.monotonic() - started < 60


# --- scenario 7: one deterministic run per fault-hook window -----------------------------------

WINDOWS = [
    # after the dispatch's PubAck (its step is written at the same time: it may or may not have landed)
    "after_dispatch_publish",
    # a step's dispatch published, the step itself never written (the replica resumes from the step before)
    "dispatched_before_checkpoint",
    # the execution created in Redis, its indexes (the lease index among them) not yet written
    "after_execution_create",
    # after the execution was created in Redis, before the request's ack
    "after_redis_commit_before_ack",
    # just before a lease renewal
    "before_lease_renew",
    # between a node's completion (checkpointed) and the dispatch of the next node
    "after_checkpoint",
]


async def test_fault_hook_windows(mesh: Mesh, tmp_path: Path, report: Report) -> None:
    """Scenario 7: an executor dies in each narrow window; a clean replica finishes the run, no node twice."""
    folder = write_folder(tmp_path / "wf", {"chain4": chain("chain4", 4, 0.2)})
    await start_agents(mesh, tmp_path)
    calls: list[Call] = []
    done: list[Task] = []
    recoveries: list[float] = []
    rescuer: Proc | None = None
    for window in WINDOWS:
        faulty = await start_executor(mesh, folder, "chain4", fault=window)
        if rescuer is not None:
            rescuer.signal(signal.SIGTERM)  # the faulty replica must be the one that pulls the request
            await rescuer.wait(15)
        call = (await dispatch(mesh, "chain4", 1))[0]
        calls.append(call)
        code = await faulty.wait(20)
        died = time.monotonic()
        assert code == 137, faulty.output()[-2000:]
        assert f"fault hook crash:{window}" in faulty.output()
        rescuer = await start_executor(mesh, folder, "chain4")
        done.append(await within(call.result(), 30, f"the run after a crash at {window}"))
        recoveries.append(time.monotonic() - died)
    tasks, effects = await finish(mesh, [], timeout=30, expect_effects=4 * len(WINDOWS), done=done)
    summary = summarise("fault-hook-windows", calls, tasks, effects, max(recoveries))
    report(summary)
    check(summary, tasks)
    for call in calls:
        nodes = await node_records(mesh, call.task_id)
        assert all(n["status"] == "completed" and n["attempt"] == 1 for n in nodes.values()), nodes
