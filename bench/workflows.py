"""Per-node overhead of a workflow: sequential workflows of 1, 10 and 50 no-op Python agent nodes.

One executor process (``a2amesh executor DIR``) and one echo agent process (``agent_cards/echo.yaml``),
production settings, durable delivery (every node is a JetStream request, claimed and answered through
Redis and the replies stream, the executor checkpointing every step in Redis). The bench process is
the caller: ``Client.send("chainN", …)`` and wait for the workflow's final Task; one execution at a
time. Per node = run time / N; p50/p99 over the runs; CPU seconds of every process over each N, so a
miss on a 2-core machine can be explained.

The ratios to the floors use floors measured **interleaved with the runs** (after each run of N nodes,
N samples each of the durable, node and core floors, in alternating order), not the floors section's
figures: this machine's speed drifts by up to 2× within minutes, and the floors section runs minutes
before this one, so a ratio across sections measured the drift as much as the mesh. For the same
reason a Celery chain of the same N (the peers section's worker setup) runs beside every run, which of
the two goes first alternating, when the ``bench`` extras are installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/workflows.py` from anywhere

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from bench.common import BenchContext, Figure, Section, drop_namespace, main, ms_since, percentile, ratio
from bench.floors import Probes
from bench.peers import celery_chain_ms, celery_installed, celery_worker
from bench.wfkit import (
    ECHO,
    CpuMeter,
    chain_workflow,
    cpu_note,
    prepare_namespace,
    start_agents,
    start_executor,
    write_workflows,
)

SIZES = (1, 10, 50)


async def run_chain(client: Client, name: str, i: int) -> float:
    """One execution of ``name``; milliseconds. Raises when it did not complete with the input echoed."""
    t0 = time.perf_counter()
    task = await client.send(name, {"i": i}, timeout=60)
    elapsed = ms_since(t0)
    if task.status.state != TaskState.COMPLETED or task.output() != {"out": {"i": i}}:
        raise RuntimeError(f"{name} ended {task.status.state.value} with {task.output()!r}")
    return elapsed


async def floor_samples(probes: Probes, count: int, first: bool) -> dict[str, list[float]]:
    """``count`` samples each of the durable, node and core floors, the order alternating with ``first``."""
    out: dict[str, list[float]] = {"durable": [], "node": [], "core": []}
    for _ in range(count):
        if first:
            out["durable"].append((await probes.durable_floor())["total"])
            out["node"].append(await probes.node_floor())
            out["core"].append((await probes.core_floor())["total"])
        else:
            out["core"].append((await probes.core_floor())["total"])
            out["node"].append(await probes.node_floor())
            out["durable"].append((await probes.durable_floor())["total"])
    return out


async def run(ctx: BenchContext) -> list[Figure]:
    async with contextlib.AsyncExitStack() as stack:
        celery = celery_installed()
        if celery:
            await stack.enter_async_context(celery_worker(ctx))
        return await _measure(ctx, celery=celery)


async def _measure(ctx: BenchContext, *, celery: bool) -> list[Figure]:
    ns = ctx.new_namespace("wf")
    folder = write_workflows(ctx.tmp / f"wf-{ns}", [chain_workflow(f"chain{n}", n) for n in SIZES])
    await prepare_namespace(ctx, ns)
    (agent,) = await start_agents(ctx, ECHO, ns)
    executor, _ = await start_executor(ctx, folder, ns)
    client = await Client.connect(ctx.settings(ns), name="bench-workflows")
    probes = await Probes.open(ctx, ctx.new_namespace("wffloor"), node=True)
    figures: list[Figure] = []
    pids = {"executor": executor.pid, "agent": agent.pid, **ctx.srv.pids()}
    try:
        for n in SIZES:
            await client.registry.wait_for(f"chain{n}", 30)
        reps = {1: ctx.scale(400, 10), 10: ctx.scale(300, 3), 50: ctx.scale(60, 1)}  # enough runs for a p99
        for n in SIZES:  # warm-up
            for i in range(ctx.scale(max(10, 100 // n), 1)):
                await run_chain(client, f"chain{n}", i)
                if celery:
                    await asyncio.to_thread(celery_chain_ms, n)
        totals: dict[int, list[float]] = {}
        for n in SIZES:
            totals[n] = []
            floors: dict[str, list[float]] = {"durable": [], "node": [], "core": []}
            celery_runs: list[float] = []
            cpu: dict[str, float] = {}
            for i in range(reps[n]):
                if celery and i % 2:
                    celery_runs.append(await asyncio.to_thread(celery_chain_ms, n))
                meter = CpuMeter(pids)  # the processes' CPU over the workflow runs only
                meter.start()
                totals[n].append(await run_chain(client, f"chain{n}", i))
                for k, v in meter.stop().items():
                    cpu[k] = cpu.get(k, 0.0) + v
                if celery and not i % 2:
                    celery_runs.append(await asyncio.to_thread(celery_chain_ms, n))
                for k, samples in (await floor_samples(probes, n, first=i % 2 == 0)).items():
                    floors[k] += samples
            per_node = [t / n for t in totals[n]]
            f = Figure.from_samples(f"workflow.chain.n{n}", f"workflow of {n} echo nodes: per node", per_node)
            durable, node, core = (percentile(floors[k], 50) for k in ("durable", "node", "core"))
            notes = [
                f"run {percentile(totals[n], 50):.2f} ms",
                f"p50 {ratio(f.value, durable)} / p99 {ratio(f.p99 or 0, durable)} durable floor",
                f"p50 {ratio(f.value, core)} core floor",
                f"p50 {ratio(f.value, node)} node floor (floors interleaved with these runs)",
            ]
            celery_node = percentile([t / n for t in celery_runs], 50) if celery_runs else None
            if celery_node is not None:
                notes.append(f"Celery chain beside it {celery_node:.2f} ms/node ({ratio(celery_node, f.value)} ours)")
            f.note = ", ".join(notes)
            nodes = n * reps[n]
            f.extra = {
                "n_nodes": n,
                "run_ms": totals[n],
                "cpu_s": cpu,
                "cpu_ms_per_node": {k: v * 1000 / nodes for k, v in cpu.items()},
                "floors_interleaved_ms": {"durable": durable, "node": node, "core": core},
                "ratio_p50_durable": f.value / durable,
                "ratio_p99_durable": (f.p99 or 0) / durable,
                "ratio_p50_core": f.value / core,
                "ratio_p99_core": (f.p99 or 0) / core,
                "ratio_p50_node": f.value / node,
                "celery_per_node_ms": celery_node,
            }
            figures.append(f)
            figures.append(
                Figure(
                    f"workflow.floors.n{n}",
                    f"  durable floor, interleaved with the N={n} runs",
                    durable,
                    "ms",
                    n=len(floors["durable"]),
                    note=f"node floor {node:.3f} ms ({ratio(node, durable)}), core floor {core:.3f} ms",
                    extra={"p99": {k: percentile(v, 99) for k, v in floors.items()}},
                )
            )
            if celery_node is not None:
                faster = (
                    f"a2amesh {ratio(celery_node, f.value)}"
                    if f.value < celery_node
                    else f"Celery {ratio(f.value, celery_node)}"
                )
                figures.append(
                    Figure.from_samples(
                        f"workflow.celery.n{n}",
                        f"  Celery chain of {n}, interleaved with these runs: per node",
                        [t / n for t in celery_runs],
                        note=f"{faster} faster",
                    )
                )
            figures.append(
                Figure(
                    f"workflow.cpu.n{n}",
                    f"  CPU per node, N={n} (all processes)",
                    sum(cpu.values()) * 1000 / nodes,
                    "ms",
                    n=nodes,
                    note=cpu_note(cpu, nodes),
                    extra={"cpu_s": cpu},
                )
            )
        lo, hi = min(SIZES), max(SIZES)
        slope = (percentile(totals[hi], 50) - percentile(totals[lo], 50)) / (hi - lo)
        figures.append(Figure("workflow.chain.marginal", f"workflow: marginal per node (N={lo}→{hi})", slope, "ms"))
    finally:
        await probes.close()
        await client.close()
        await executor.stop()
        await agent.stop()
        await drop_namespace(ctx, ns)
    return figures


SECTION = Section(
    "workflow", "workflow: per-node overhead of sequential workflows (1, 10, 50 echo nodes)", run, latency=True
)

if __name__ == "__main__":
    from bench import floors

    raise SystemExit(main([floors.SECTION, SECTION], "workflow", __doc__ or ""))
