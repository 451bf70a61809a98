"""Chaos: agent replicas SIGKILLed at random while tasks run. Nothing lost, no completed side effect twice."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

from a2amesh.bus.nats import Bus
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.store.redis import Redis
from tests.chaos.conftest import ChaosSummary, completions
from tests.support.processes import ProcessFactory, write_agent
from tests.support.waiting import eventually, within


async def present(bus: Bus, agent: str) -> int:
    kv = await bus.kv(bus.subjects.presence_bucket)
    return len([k for k in await kv.keys() if k.startswith(f"{agent}.")])


async def test_sigkill_agent_replicas_mid_task(
    processes: ProcessFactory,
    bus: Bus,
    client: Client,
    redis: Redis,
    settings: Settings,
    tmp_path: Path,
    report: Callable[[ChaosSummary], None],
) -> None:
    """Scenario 2: two replicas, 30 tasks; a replica is SIGKILLed mid-task twice; the other finishes its work.

    Completed side effects repeat only in the window between a handler's end and the stored result
    of a killed replica; that is asserted, and counted in the summary line.
    """
    rng = random.Random(20261122)
    path = write_agent(tmp_path, "effects", "side_effect", max_concurrency=8)
    replicas = [await processes.start("agent", str(path)) for _ in range(2)]

    async def both_present() -> bool:
        return await present(bus, "effects") >= 2

    await eventually(both_present, timeout=20, what="two replicas")
    calls = [
        await client.dispatch("effects", make_message(data={"seconds": rng.uniform(0.3, 1.2)}), timeout=120)
        for _ in range(30)
    ]
    results: asyncio.Task[list[object]] = asyncio.ensure_future(
        asyncio.gather(*(c.result() for c in calls), return_exceptions=True)
    )
    kill_times: list[float] = []
    killed_pids: set[str] = set()
    for _ in range(2):
        await asyncio.sleep(rng.uniform(0.2, 0.6))
        victim = rng.choice([p for p in replicas if p.returncode is None])
        killed_pids.add(str(victim.pid))
        victim.signal(signal.SIGKILL)
        kill_times.append(time.monotonic())
        await victim.wait(10)
        replicas.remove(victim)
        replicas.append(await processes.start("agent", str(path)))
    outcomes = await within(results, 90, "every task to finish after the kills")
    done_at = time.monotonic()
    tasks = [o for o in outcomes if not isinstance(o, BaseException)]
    completed = [t for t in tasks if t.status.state == TaskState.COMPLETED]  # type: ignore[attr-defined]
    effects = {c.task_id: await completions(redis, settings.namespace, c.task_id) for c in calls}
    duplicated = sum(1 for pids in effects.values() if len(pids) > 1)
    summary = ChaosSummary(
        scenario="agent-sigkill",
        runs=len(calls),
        completed=len(completed),
        lost=len(calls) - len(completed),
        duplicated=duplicated,
        max_recovery_s=done_at - kill_times[-1],
    )
    report(summary)
    assert summary.lost == 0, [o for o in outcomes if isinstance(o, BaseException)][:3]
    assert all(effects.values()), "a task finished without its side effect completing"
    # A side effect completes twice only when its replica died after the handler finished and
    # before the result was stored (docs/operations.md): the first completion is then a killed pid.
    for task_id, pids in effects.items():
        if len(pids) > 1:
            assert pids[0] in killed_pids, (task_id, pids)
            assert len(pids) == 2, (task_id, pids)
