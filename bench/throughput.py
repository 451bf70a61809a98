"""Throughput: node executions per second, 1 executor and 1, 2, 4 echo agent replicas.

100 executions of a 10-node sequential workflow (``chain10``, echo nodes) are kept in flight by the
bench process (closed loop: each finished execution is replaced at once) for a fixed time; node
executions per second = completed executions × 10 / elapsed. Production settings; every process is
separate (executor, agent replicas, nats-server, valkey, the caller) and they share this machine's
cores, so CPU per node of each process is printed beside the rate.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/throughput.py` from anywhere

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from bench.common import BenchContext, Figure, Section, drop_namespace, main
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

NODES = 10
IN_FLIGHT = 100
REPLICAS = (1, 2, 4)


async def closed_loop(client: Client, name: str, in_flight: int, seconds: float) -> tuple[int, float, list[float]]:
    """Keep ``in_flight`` executions running for ``seconds``; returns (completed, elapsed s, latencies ms)."""
    stop = time.perf_counter() + seconds
    latencies: list[float] = []
    failures: list[str] = []

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            task = await client.send(name, {"w": w, "i": i}, timeout=120)
            if task.status.state != TaskState.COMPLETED:
                failures.append(
                    f"{task.status.state.value}: {task.status.message.text() if task.status.message else ''}"
                )
            latencies.append((time.perf_counter() - t0) * 1000)
            i += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(in_flight)))
    elapsed = time.perf_counter() - t0
    if failures:
        raise RuntimeError(f"{len(failures)} executions did not complete, e.g. {failures[0]}")
    return len(latencies), elapsed, latencies


async def run(ctx: BenchContext) -> list[Figure]:
    figures: list[Figure] = []
    seconds = 1.5 if ctx.quick else 10.0
    replica_counts = (2,) if ctx.quick else REPLICAS
    in_flight = 20 if ctx.quick else IN_FLIGHT
    for replicas in replica_counts:
        ns = ctx.new_namespace("tp")
        folder = write_workflows(ctx.tmp / f"wf-{ns}", [chain_workflow(f"chain{NODES}", NODES)])
        await prepare_namespace(ctx, ns)
        agents = await start_agents(ctx, ECHO, ns, replicas)
        executor, _ = await start_executor(ctx, folder, ns)
        client = await Client.connect(ctx.settings(ns), name="bench-throughput")
        try:
            await client.registry.wait_for(f"chain{NODES}", 30)
            await closed_loop(client, f"chain{NODES}", in_flight, seconds / 4)  # warm-up under load
            pids = {"executor": executor.pid, **{f"agent{i}": a.pid for i, a in enumerate(agents)}, **ctx.srv.pids()}
            meter = CpuMeter(pids)
            meter.start()
            done, elapsed, lat = await closed_loop(client, f"chain{NODES}", in_flight, seconds)
            cpu = meter.stop()
            nodes = done * NODES
            rate = nodes / elapsed
            lat_fig = Figure.from_samples("", "", lat)
            figures.append(
                Figure(
                    f"throughput.r{replicas}",
                    f"{replicas} agent replica(s), {in_flight} executions of {NODES} nodes in flight",
                    rate,
                    "nodes/s",
                    n=nodes,
                    note=f"execution p50 {lat_fig.value:.0f} ms; " + cpu_note(cpu, nodes),
                    extra={
                        "executions": done,
                        "seconds": elapsed,
                        "latency_ms": lat_fig.stats,
                        "cpu_s": cpu,
                        "cpu_ms_per_node": {k: v * 1000 / nodes for k, v in cpu.items()},
                        "executor_cpu_share": cpu.get("executor", 0) / elapsed,
                    },
                )
            )
        finally:
            await client.close()
            await executor.stop()
            await asyncio.gather(*(a.stop() for a in agents))
            await drop_namespace(ctx, ns)
    return figures


SECTION = Section("throughput", "throughput: node executions/s, 1 executor, 1/2/4 echo replicas", run)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "throughput", __doc__ or ""))
