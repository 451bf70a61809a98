"""Concurrency: 10,000 executions in flight at once, each waiting on an agent that sleeps.

One executor process (``A2AMESH_MAX_EXECUTIONS`` = the count, so its consumer's ``max_ack_pending``
is sized for it: twice that) and one ``sleeper`` agent process (``max_concurrency`` = the count). Each
execution is a one-node workflow whose node sleeps 1 s and then waits for a gate file the bench creates
once every execution is in flight (so all of them really are in flight at the same moment, however long
the executor takes to admit them). The bench dispatches them all, waits until the agent holds every
node, reads the executor's RSS, opens the gate and waits for every final Task.

Memory per in-flight execution = (executor RSS with all in flight − RSS before, after a warm-up run)
÷ executions. RSS is what the kernel reports (the executor cannot be made to collect from outside;
the figure includes whatever garbage is live at that moment, so it is an upper bound).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/concurrency.py` from anywhere

import redis.asyncio as aioredis

from a2amesh.client import Client, make_message
from a2amesh.protocol import TaskState
from a2amesh.store.keys import Keys
from bench.common import BenchContext, Figure, Section, drop_namespace, main, rss_mb
from bench.wfkit import (
    CpuMeter,
    chain_workflow,
    cpu_note,
    prepare_namespace,
    start_agents,
    start_executor,
    write_agent,
    write_workflows,
)

COMPLETION_WAIT = 90.0
"""Seconds the full run waits for the finals once the gate opens; unfinished ones are reported, not hidden."""


async def run(ctx: BenchContext) -> list[Figure]:
    count = ctx.scale(10_000, 200)
    ns = ctx.new_namespace("conc")
    gate = ctx.tmp / f"gate-{ns}"
    agent_yaml = write_agent(ctx.tmp / f"agents-{ns}", "sleeper", "sleeper", max_concurrency=count + 100)
    folder = write_workflows(ctx.tmp / f"wf-{ns}", [chain_workflow("sleep1", 1, agent="sleeper")])
    await prepare_namespace(ctx, ns)
    (agent,) = await start_agents(ctx, agent_yaml, ns, env={"BENCH_GATE": str(gate)})
    executor, _ = await start_executor(ctx, folder, ns, env={"A2AMESH_MAX_EXECUTIONS": str(count + 100)})
    client = await Client.connect(ctx.settings(ns), name="bench-concurrency")
    r = aioredis.from_url(ctx.srv.redis_url, decode_responses=True)
    keys = Keys(ns)
    figures: list[Figure] = []
    try:
        await client.registry.wait_for("sleep1", 30)
        gate.touch()
        warm = await asyncio.gather(*(client.send("sleep1", {"sleep": 0.01}, timeout=60) for _ in range(50)))
        assert all(t.status.state == TaskState.COMPLETED for t in warm)
        gate.unlink()
        await asyncio.sleep(1.0)
        rss0 = rss_mb(executor.pid) or 0.0
        meter = CpuMeter({"executor": executor.pid, "agent": agent.pid, **ctx.srv.pids()})
        meter.start()
        t0 = time.perf_counter()
        calls = []
        for i in range(0, count, 500):
            calls += await asyncio.gather(
                *(
                    client.dispatch("sleep1", make_message(data={"i": j}), timeout=1800)
                    for j in range(i, min(i + 500, count))
                )
            )
        dispatched = time.perf_counter() - t0
        # wait until every execution is running (its node in the agent's hands)
        peak = 0
        deadline = time.monotonic() + (600 if not ctx.quick else 60)
        while time.monotonic() < deadline:
            peak = sum([int(await r.zcard(keys.executions_by_status("running", s))) for s in keys.shards])
            if peak >= count or time.perf_counter() - t0 > 180:
                break
            await asyncio.sleep(0.2)
        # executions are created before their node is dispatched: give the last dispatches a moment
        await asyncio.sleep(2.0)
        admitted = time.perf_counter() - t0
        rss_peak = rss_mb(executor.pid) or 0.0
        gate.touch()
        waits = [asyncio.ensure_future(c.result()) for c in calls]
        _, pending = await asyncio.wait(waits, timeout=COMPLETION_WAIT if not ctx.quick else 60)
        for w in pending:
            w.cancel()
        total = time.perf_counter() - t0
        cpu = meter.stop()
        tasks = [w.exception() or w.result() for w in waits if w.done() and not w.cancelled()]
        errors = [t for t in tasks if isinstance(t, BaseException)]
        failed = [t for t in tasks if not isinstance(t, BaseException) and t.status.state != TaskState.COMPLETED]
        completed = len(tasks) - len(errors) - len(failed)
        per_exec_kb = (rss_peak - rss0) * 1024 / count
        figures.append(
            Figure(
                "concurrency.completed",
                f"{count:,} executions in flight at once (sleeper node ≥ 1 s): completed",
                completed,
                "executions",
                n=count,
                note=f"{len(errors)} errors, {len(failed)} failed, {len(pending)} unfinished after "
                f"{COMPLETION_WAIT if not ctx.quick else 60:.0f} s; all in flight after {admitted:.1f} s "
                f"(dispatch {dispatched:.1f} s), all done {total:.1f} s; peak running {peak:,}",
                extra={
                    "errors": [repr(e) for e in errors[:5]],
                    "failed": [t.status.state.value for t in failed[:5]],
                    "seconds_dispatch": dispatched,
                    "seconds_all_in_flight": admitted,
                    "seconds_total": total,
                    "cpu_s": cpu,
                },
            )
        )
        figures.append(
            Figure(
                "concurrency.rss_per_execution",
                "  executor RSS per in-flight execution",
                per_exec_kb,
                "KiB",
                n=count,
                note=f"RSS {rss0:.0f} → {rss_peak:.0f} MiB with {peak:,} running; " + cpu_note(cpu, count, "execution"),
            )
        )
        if ctx.quick and (errors or failed or pending):
            raise RuntimeError(f"{len(errors)} errors, {len(failed)} failed, {len(pending)} unfinished executions")
    finally:
        await r.aclose()
        await client.close()
        await executor.stop()
        await agent.stop()
        await drop_namespace(ctx, ns)
    return figures


SECTION = Section("concurrency", "concurrency: 10,000 executions in flight, each waiting on a sleeping agent", run)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "concurrency", __doc__ or ""))
