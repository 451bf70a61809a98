"""Chaos under pressure: a process holding work is starved — SIGSTOPped for longer than its claim, lease or
presence TTL — then continued, on a quiet machine and with the CPU saturated beside the mesh.

What the woken process may still do is fenced: its writes and replies are refused (counted from its log), so
no run is lost and no side effect happens twice, except the documented limit: a handler already past its
outside effect when it was paused (counted as ``limit_case``; docs/agents.md, "Effects outside the mesh";
its outside effect is made once by the idempotency key in test_idempotent_effects.py).

``A2AMESH_CHAOS_ROUNDS`` sets the rounds per scenario (2 by default, for CI); a longer run:
``A2AMESH_CHAOS_ROUNDS=20 pytest tests/chaos/test_starvation.py -s``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from a2amesh.bus.nats import Bus
from a2amesh.client import Call, Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import Task, TaskState
from a2amesh.store.redis import Redis
from tests.chaos.conftest import ChaosSummary, completions
from tests.chaos.test_executor_chaos import (
    Mesh,
    alive,
    chain,
    instance_of,
    lease_of,
    side_effects,
    start_agents,
    start_executor,
    write_folder,
)
from tests.support.processes import Proc, ProcessFactory
from tests.support.waiting import eventually, within

Report = Callable[[ChaosSummary], None]
FENCE_EVENTS = (
    "task.fenced",
    "execution.fenced",
    "execution.lease_lost",
    "execution.presence_lapsed",
    "executor.presence_lapsed",
)
"""Log events of a run stopped because another replica took it over: an agent's fenced run; an executor's
runners stopped when its presence lapsed (a ``stopped`` count), its lease renewal or a step's commit refused."""
ROUNDS = int(os.environ.get("A2AMESH_CHAOS_ROUNDS", "2"))
SATURATION = [False, pytest.param(True, marks=pytest.mark.alone)]
"""Without and with the CPU saturated: a saturated run starves whatever runs beside it, so it is ``alone``."""


@asynccontextmanager
async def cpu_burners(on: bool, seconds: float = 600) -> AsyncIterator[None]:
    """One busy-looping process per core beside the mesh while the block runs (each ends by itself after
    ``seconds`` should the test die without stopping it)."""
    procs: list[asyncio.subprocess.Process] = []
    if on:
        code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"
        for _ in range(os.cpu_count() or 1):
            procs.append(await asyncio.create_subprocess_exec(sys.executable, "-c", code))
    try:
        yield
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
        for p in procs:
            await p.wait()


async def stop(proc: Proc) -> float:
    """SIGSTOP ``proc`` and return once the kernel reports it stopped (the time it was sent)."""
    sent = time.monotonic()
    proc.signal(signal.SIGSTOP)

    def stopped() -> bool:
        return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"

    await eventually(stopped, timeout=5, what=f"process {proc.pid} to stop", interval=0.01)
    return sent


def _counted_past(proc: Proc, before: int, events: tuple[str, ...]) -> bool | None:
    """True once ``proc`` logged more of ``events`` than ``before`` (None until then: keep waiting)."""
    return log_count(proc, *events) > before or None


def log_count(proc: Proc, *events: str) -> int:
    """How many of ``proc``'s log lines are one of ``events`` (a line with a ``stopped`` count: that many)."""
    n = 0
    for line in proc.output().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") in events:
            n += int(entry.get("stopped", 1))
    return n


def agent_instance(proc: Proc) -> str | None:
    for line in proc.output().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == "agent.ready":
            return str(entry.get("instance"))
    return None


@pytest.fixture
async def mesh(settings: Settings, bus: Bus, client: Client, redis: Redis, processes: ProcessFactory) -> Mesh:
    """The session servers' mesh."""
    return Mesh(settings, bus, client, redis, processes)


async def timed(call: Call, done_at: dict[str, float]) -> Task:
    task = await call.result()
    done_at[call.task_id] = time.monotonic()
    return task


@pytest.mark.parametrize("burn", SATURATION, ids=["quiet", "cpu-saturated"])
async def test_agent_sigstop_past_its_claim(mesh: Mesh, tmp_path: Path, report: Report, burn: bool) -> None:
    """An agent replica holding tasks is SIGSTOPped past its claim TTL and JetStream's ack wait (the other
    replica takes its tasks over), then continued: its handlers wake and are fenced."""
    m = mesh
    pause = 2 * m.settings.ack_wait + 1
    async with cpu_burners(burn):
        agents = await start_agents(m, tmp_path, replicas=2, concurrency=8)
        runs = lost = duplicated = limit = fenced = 0
        recovery = 0.0
        for round_ in range(ROUNDS):
            victim = agents[round_ % 2]
            instance = await eventually(functools.partial(agent_instance, victim), timeout=10, what="the victim's id")
            fenced_before = log_count(victim, "task.fenced")
            calls = [
                await m.client.dispatch("effects", make_message(data={"seconds": 1.5}), timeout=120) for _ in range(12)
            ]
            done_at: dict[str, float] = {}
            results = asyncio.ensure_future(asyncio.gather(*(timed(c, done_at) for c in calls), return_exceptions=True))

            async def held(instance: str = instance, calls: list[Call] = calls) -> list[str]:
                owners = [await m.redis.get(f"{m.settings.namespace}:claim:{{{c.task_id}}}") for c in calls]
                return [c.task_id for c, o in zip(calls, owners, strict=True) if o == instance]

            await eventually(held, timeout=30, what="the victim to hold a task")
            stopped_at = await stop(victim)
            held_ids = await held()
            before = {c.task_id: await completions(m.redis, m.settings.namespace, c.task_id) for c in calls}
            try:
                await asyncio.sleep(pause)  # the starvation's length, not a wait for an event
            finally:
                victim.signal(signal.SIGCONT)
            outcomes = await within(results, 90, "every task to finish after the pause")
            tasks = [o for o in outcomes if isinstance(o, Task)]
            runs += len(calls)
            lost += len(calls) - sum(1 for t in tasks if t.status.state == TaskState.COMPLETED)
            for c in calls:
                pids = await completions(m.redis, m.settings.namespace, c.task_id)
                if len(pids) > 1:
                    duplicated += 1
                    # the limit: the victim had completed the effect before it was stopped
                    limit += int(before[c.task_id][:1] == [str(victim.pid)])
            await eventually(
                functools.partial(_counted_past, victim, fenced_before, ("task.fenced",)),
                timeout=10,
                what="the woken replica to report its fenced runs",
            )
            fenced += log_count(victim, "task.fenced") - fenced_before
            recovery = max([recovery, *(done_at[t] - stopped_at for t in held_ids if t in done_at)])
            alive(agents)
    summary = ChaosSummary(
        scenario=f"agent-sigstop-{'cpu' if burn else 'quiet'}",
        runs=runs,
        completed=runs - lost,
        lost=lost,
        duplicated=duplicated,
        max_recovery_s=recovery,
        fenced=fenced,
        limit=limit,
    )
    report(summary)
    assert summary.lost == 0
    assert summary.duplicated == summary.limit, "a side effect ran twice outside the documented limit case"
    assert (summary.fenced or 0) >= ROUNDS, "the woken replica's runs were not fenced"


@pytest.mark.parametrize("burn", SATURATION, ids=["quiet", "cpu-saturated"])
async def test_executor_sigstop_past_its_lease(mesh: Mesh, tmp_path: Path, report: Report, burn: bool) -> None:
    """The executor replica driving runs is SIGSTOPped past its lease and presence TTLs (the other replica
    takes its executions over), then continued: its steps are refused by the lease epoch."""
    m = mesh
    pause = 2 * m.settings.lease_ttl + 1
    folder = write_folder(tmp_path / "wf", {"chain4": chain("chain4", 4, 0.3)})
    async with cpu_burners(burn):
        agents = await start_agents(m, tmp_path)
        executors = [await start_executor(m, folder, "chain4") for _ in range(2)]
        runs = lost = duplicated = fenced = 0
        recovery = 0.0
        fence_events = FENCE_EVENTS[1:]
        for round_ in range(ROUNDS):
            victim = executors[round_ % 2]
            instance = instance_of(victim)
            assert instance is not None
            fenced_before = log_count(victim, *fence_events)
            calls = [await m.client.dispatch("chain4", make_message(data={}), timeout=120) for _ in range(6)]

            async def held(instance: str = instance, calls: list[Call] = calls) -> list[str]:
                leases = [await lease_of(m, c.task_id) for c in calls]
                return [c.task_id for c, lease in zip(calls, leases, strict=True) if lease.startswith(instance + ":")]

            await eventually(held, timeout=30, what="the victim to drive a run")
            stopped_at = await stop(victim)
            held_ids = await held()
            taken: dict[str, float] = {}

            async def watch(
                execution_id: str, instance: str = instance, taken: dict[str, float] = taken, since: float = stopped_at
            ) -> None:
                async def moved() -> bool:
                    lease = await lease_of(m, execution_id)
                    if lease:
                        return not lease.startswith(instance + ":")
                    status = await m.redis.hget(f"{m.settings.namespace}:exec:{{{execution_id}}}", "status")
                    return status not in (None, "running")

                await eventually(moved, timeout=60, what="another replica to take the run over", interval=0.02)
                taken[execution_id] = time.monotonic() - since

            watchers = asyncio.ensure_future(asyncio.gather(*(watch(e) for e in held_ids)))
            try:
                await asyncio.sleep(pause)  # the starvation's length, not a wait for an event
            finally:
                victim.signal(signal.SIGCONT)
            outcomes = await within(
                asyncio.gather(*(c.result() for c in calls), return_exceptions=True), 120, "every run to finish"
            )
            await within(watchers, 30, "the takeovers")
            tasks = [o for o in outcomes if isinstance(o, Task)]
            runs += len(calls)
            lost += len(calls) - sum(1 for t in tasks if t.status.state == TaskState.COMPLETED)
            await eventually(
                functools.partial(_counted_past, victim, fenced_before, tuple(fence_events)),
                timeout=10,
                what="the woken replica to report its fenced runs",
            )
            fenced += log_count(victim, *fence_events) - fenced_before
            recovery = max([recovery, *taken.values()])
            alive(agents + executors)
        effects = await side_effects(m)
        duplicated = sum(1 for n in effects.values() if n > 1)
        assert len(effects) == 4 * runs, f"{len(effects)} distinct side effects, expected {4 * runs}"
    summary = ChaosSummary(
        scenario=f"executor-sigstop-{'cpu' if burn else 'quiet'}",
        runs=runs,
        completed=runs - lost,
        lost=lost,
        duplicated=duplicated,
        max_recovery_s=recovery,
        fenced=fenced,
    )
    report(summary)
    assert summary.lost == 0
    assert summary.duplicated == 0
    assert (summary.fenced or 0) >= ROUNDS, "the woken replica's runners were not stopped"
