"""Fan-out: one map over 10,000 items with ``concurrency_limit: 100`` (echo agent nodes).

One executor process and two echo agent replicas, production settings. Reported: total time of the
execution (caller's view), the executor's peak RSS (VmHWM) and its RSS after the run, the Redis
memory the finished execution keeps (``used_memory`` after − before, retention keys included), and a
second identical map to show whether the executor's RSS grows per item once an execution is done.
The same fan-out as a Celery chord is in the peers section (``peers.celery_chord.*``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/fanout.py` from anywhere

import redis.asyncio as aioredis

from a2amesh.client import Client, make_message
from a2amesh.protocol import TaskState
from a2amesh.store.keys import Keys
from bench.common import BenchContext, Figure, Section, drop_namespace, main, rss_mb
from bench.wfkit import (
    ECHO,
    CpuMeter,
    cpu_note,
    hwm_mb,
    map_workflow,
    prepare_namespace,
    start_agents,
    start_executor,
    write_workflows,
)

LIMIT = 100
BIG_LIMIT_S = 60.0


async def used_memory(r: aioredis.Redis) -> int:
    return int((await r.info("memory"))["used_memory"])


async def run(ctx: BenchContext) -> list[Figure]:
    items_n = ctx.scale(1_000, 200)
    big_n = ctx.scale(10_000, 0)
    ns = ctx.new_namespace("fan")
    folder = write_workflows(ctx.tmp / f"wf-{ns}", [map_workflow("fanout", concurrency_limit=LIMIT)])
    await prepare_namespace(ctx, ns)
    agents = await start_agents(ctx, ECHO, ns, 2)
    executor, _ = await start_executor(ctx, folder, ns)
    client = await Client.connect(ctx.settings(ns), name="bench-fanout")
    r = aioredis.from_url(ctx.srv.redis_url)
    keys = Keys(ns)
    figures: list[Figure] = []
    try:
        await client.registry.wait_for("fanout", 30)
        warm = await client.send("fanout", {"items": list(range(20))}, timeout=60)
        assert warm.status.state == TaskState.COMPLETED, warm.status
        pids = {"executor": executor.pid, **{f"agent{i}": a.pid for i, a in enumerate(agents)}, **ctx.srv.pids()}
        if big_n:
            # the 10,000-item map, bounded: the engine copies and the runner serialises the whole state per
            # step, so time per item grows with the item count; report how far it got, then cancel it
            call = await client.dispatch("fanout", make_message(data={"items": [{"i": i} for i in range(big_n)]}))
            t0 = time.perf_counter()
            waiter = asyncio.ensure_future(call.result())
            done_at: list[tuple[float, int]] = []
            while not waiter.done() and time.perf_counter() - t0 < BIG_LIMIT_S:
                await asyncio.wait({waiter}, timeout=10)
                done_at.append((time.perf_counter() - t0, int(await r.hlen(keys.execution_nodes(call.task_id)))))
            finished = waiter.done()
            if not finished:
                waiter.cancel()
                with contextlib.suppress(Exception):
                    await client.cancel_task("fanout", call.task_id, timeout=30)
            rates = [
                (b[1] - a[1]) / (b[0] - a[0])
                for a, b in zip([(0.0, 0), *done_at], done_at, strict=False)
                if b[0] > a[0]
            ]
            figures.append(
                Figure(
                    "fanout.big",
                    f"map over {big_n:,} items, concurrency_limit {LIMIT}: "
                    + ("total time" if finished else f"NOT completed within {BIG_LIMIT_S:.0f} s"),
                    time.perf_counter() - t0,
                    "s",
                    n=big_n,
                    note=f"node records after each 10 s: {[n for _, n in done_at]}; items/s per 10 s: "
                    f"{[round(x) for x in rates]}; executor peak RSS {hwm_mb(executor.pid) or 0:.0f} MiB",
                    extra={"finished": finished, "progress": done_at},
                )
            )
        rss0 = rss_mb(executor.pid) or 0.0
        runs = []
        for _ in range(2):
            mem0 = await used_memory(r)
            meter = CpuMeter(pids)
            meter.start()
            t0 = time.perf_counter()
            task = await client.send("fanout", {"items": [{"i": i} for i in range(items_n)]}, timeout=600)
            elapsed = time.perf_counter() - t0
            cpu = meter.stop()
            out = task.output()
            if task.status.state != TaskState.COMPLETED or not isinstance(out, dict) or len(out["results"]) != items_n:
                text = task.status.message.text() if task.status.message else ""
                raise RuntimeError(f"map ended {task.status.state.value}: {text} {str(out)[:200]}")
            mem1 = await used_memory(r)
            runs.append(
                {
                    "seconds": elapsed,
                    "redis_bytes": mem1 - mem0,
                    "rss_after": rss_mb(executor.pid) or 0.0,
                    "hwm": hwm_mb(executor.pid) or 0.0,
                    "cpu": cpu,
                }
            )
        first, second = runs
        figures.append(
            Figure(
                "fanout.total",
                f"map over {items_n:,} items, concurrency_limit {LIMIT}: total time",
                first["seconds"],
                "s",
                n=items_n,
                note=f"{items_n / first['seconds']:,.0f} items/s; second run {second['seconds']:.1f} s; "
                + cpu_note(first["cpu"], items_n, "item"),
                extra={"runs": runs},
            )
        )
        figures.append(
            Figure(
                "fanout.executor_peak_rss",
                "  executor peak RSS (VmHWM, whole section)",
                second["hwm"],
                "MiB",
                n=1,
                note=f"RSS before the {items_n:,}-item runs {rss0:.0f}, after run 1 {first['rss_after']:.0f}, "
                f"after run 2 {second['rss_after']:.0f} MiB",
            )
        )
        growth = (second["rss_after"] - first["rss_after"]) * 1024 * 1024 / items_n
        figures.append(
            Figure(
                "fanout.rss_growth_per_item",
                "  executor RSS growth per item after completion (run 2 − run 1)",
                growth,
                "B",
                n=items_n,
            )
        )
        figures.append(
            Figure(
                "fanout.redis_per_execution",
                f"  Redis memory kept by one finished {items_n:,}-item map execution",
                first["redis_bytes"] / 1024 / 1024,
                "MiB",
                n=1,
                note=f"{first['redis_bytes'] / items_n:,.0f} B per item (state, node records, events, task records)",
            )
        )
    finally:
        await r.aclose()
        await client.close()
        await executor.stop()
        for a in agents:
            await a.stop()
        await drop_namespace(ctx, ns)
    return figures


SECTION = Section("fanout", "fanout: a map over 10,000 items, concurrency_limit 100", run)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "fanout", __doc__ or ""))
