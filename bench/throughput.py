"""Throughput: node executions per second, 1 executor and 1, 2, 4 echo agent replicas; 2 executors and 2 replicas.

100 executions of a 10-node sequential workflow (``chain10``, echo nodes) are kept in flight by the
bench process (closed loop: each finished execution is replaced at once) for a fixed time; node
executions per second = completed executions × 10 / elapsed. Production settings; every process is
separate (executor, agent replicas, nats-server, valkey, the caller) and they share this machine's
cores, so CPU per node of each process is printed beside the rate. The last row runs two executor
replicas on the same workflow (its requests shared by their consumer), to show whether executors scale out.
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
SETUPS = tuple((1, r) for r in REPLICAS) + ((2, 2),)
"""(executor replicas, agent replicas) of each row."""


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
    setups = ((1, 2),) if ctx.quick else SETUPS
    in_flight = 20 if ctx.quick else IN_FLIGHT
    for executors, replicas in setups:
        ns = ctx.new_namespace("tp")
        folder = write_workflows(ctx.tmp / f"wf-{ns}", [chain_workflow(f"chain{NODES}", NODES)])
        await prepare_namespace(ctx, ns)
        agents = await start_agents(ctx, ECHO, ns, replicas)
        started = [await start_executor(ctx, folder, ns, label=f"executor{i}") for i in range(executors)]
        execs = [child for child, _ in started]
        client = await Client.connect(ctx.settings(ns), name="bench-throughput")
        try:
            await client.registry.wait_for(f"chain{NODES}", 30)
            await closed_loop(client, f"chain{NODES}", in_flight, seconds / 4)  # warm-up under load
            names = ["executor"] if executors == 1 else [f"executor{i}" for i in range(executors)]
            pids = {
                **{name: e.pid for name, e in zip(names, execs, strict=True)},
                **{f"agent{i}": a.pid for i, a in enumerate(agents)},
                **ctx.srv.pids(),
            }
            meter = CpuMeter(pids)
            meter.start()
            done, elapsed, lat = await closed_loop(client, f"chain{NODES}", in_flight, seconds)
            cpu = meter.stop()
            nodes = done * NODES
            rate = nodes / elapsed
            lat_fig = Figure.from_samples("", "", lat)
            executor_cpu = sum(v for k, v in cpu.items() if k.startswith("executor"))
            key = f"throughput.r{replicas}" if executors == 1 else f"throughput.e{executors}r{replicas}"
            label = f"{replicas} agent replica(s), {in_flight} executions of {NODES} nodes in flight"
            if executors > 1:
                label = f"{executors} executors, " + label
            figures.append(
                Figure(
                    key,
                    label,
                    rate,
                    "nodes/s",
                    n=nodes,
                    note=f"execution p50 {lat_fig.value:.0f} ms; "
                    + (f"executors {executor_cpu * 1000 / nodes:.2f} together; " if executors > 1 else "")
                    + cpu_note(cpu, nodes),
                    extra={
                        "executions": done,
                        "seconds": elapsed,
                        "latency_ms": lat_fig.stats,
                        "cpu_s": cpu,
                        "cpu_ms_per_node": {k: v * 1000 / nodes for k, v in cpu.items()},
                        "executor_cpu_share": executor_cpu / elapsed,
                        "executors": executors,
                    },
                )
            )
        finally:
            await client.close()
            await asyncio.gather(*(e.stop() for e in execs))
            await asyncio.gather(*(a.stop() for a in agents))
            await drop_namespace(ctx, ns)
    return figures


SECTION = Section("throughput", "throughput: node executions/s, 1 executor, 1/2/4 echo replicas", run)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "throughput", __doc__ or ""))
