"""An agent round trip over the mesh beside the raw NATS operations it is built from, measured in the same run.

Mesh round trip = ``Client.send("echo", {...})``: the client publishes a SendMessage to the echo
agent's work queue (JetStream, awaited PubAck), the agent process (``agent_cards/echo.yaml``, a no-op
Python agent, production settings) pulls it, claims the task in Redis, runs the handler, writes the
final task to Redis, publishes the final reply to the replies stream (awaited PubAck) and acks; the
client receives the reply on its reply subject. References, interleaved call by call with the mesh
calls: a raw nats-py request-reply to a responder process, and a raw JetStream publish-ack.

Also: CPU per call of every process (client, agent, nats-server, valkey) in a mesh-only phase, and
throughput with 64 calls in flight (mesh, and raw request-reply for scale).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/roundtrip.py` from anywhere

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from bench.common import REPO, BenchContext, Figure, Section, cpu_seconds, drop_namespace, main, ms_since, ratio, rss_mb
from bench.floors import Probes

ECHO = REPO / "agent_cards" / "echo.yaml"
AGENT = "echo"
IN_FLIGHT = 64


async def mesh_call(client: Client, i: int) -> float:
    """One ``Client.send`` to the echo agent; milliseconds. Raises when the answer is wrong."""
    t0 = time.perf_counter()
    task = await client.send(AGENT, {"n": i}, timeout=30)
    elapsed = ms_since(t0)
    if task.status.state != TaskState.COMPLETED or task.output() != {"n": i}:
        raise RuntimeError(f"echo answered {task.status.state.value} with {task.output()!r} for {{'n': {i}}}")
    return elapsed


async def flood(op: Callable[[int], Awaitable[float]], in_flight: int, seconds: float) -> tuple[float, list[float]]:
    """Keep ``in_flight`` calls of ``op`` running for ``seconds``; returns (calls per second, latencies)."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    counter = iter(range(10**9))

    async def worker() -> None:
        while time.perf_counter() < stop:
            latencies.append(await op(next(counter)))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return len(latencies) / (time.perf_counter() - t0), latencies


def _cpu(pids: dict[str, int]) -> dict[str, float | None]:
    out: dict[str, float | None] = {name: cpu_seconds(pid) for name, pid in pids.items()}
    out["client (bench process)"] = time.process_time()
    return out


def _cpu_ms_per_call(before: dict[str, float | None], after: dict[str, float | None], calls: int) -> dict[str, float]:
    """CPU milliseconds per call of each process between two ``_cpu`` readings."""
    out = {}
    for name, b in before.items():
        a = after.get(name)
        if a is not None and b is not None and calls:
            out[name] = (a - b) * 1000 / calls
    return out


async def run(ctx: BenchContext) -> list[Figure]:
    """Sequential round trips (interleaved with the raw references), CPU per call, then 64-in-flight throughput."""
    ns = ctx.new_namespace("rt")
    agent, boot_s = await ctx.spawn_agent(ECHO, ns)
    client = await Client.connect(ctx.settings(ns), name="bench-roundtrip")
    probes = await Probes.open(ctx, ctx.new_namespace("rtraw"))
    figures: list[Figure] = []
    try:
        n = ctx.scale(1000, 60)
        for i in range(ctx.scale(100, 10)):
            await mesh_call(client, i)
            await probes.request_reply()
            await probes.js_publish()

        # sequential, interleaved: each round runs the three in a rotating order
        mesh: list[float] = []
        rr: list[float] = []
        js: list[float] = []
        ops: list[tuple[list[float], Callable[[int], Awaitable[float]]]] = [
            (mesh, lambda i: mesh_call(client, i)),
            (rr, lambda i: probes.request_reply()),
            (js, lambda i: probes.js_publish()),
        ]
        for i in range(n):
            for k in range(3):
                samples, op = ops[(i + k) % 3]
                samples.append(await op(i))

        core, durable = ctx.figure("floors.core"), ctx.figure("floors.durable")
        m = Figure.from_samples("roundtrip.mesh", "mesh round trip: Client.send → echo agent → client", mesh)
        r = Figure.from_samples("roundtrip.request_reply", "raw nats-py request-reply (same run)", rr)
        j = Figure.from_samples("roundtrip.js_publish", "raw JetStream publish, await PubAck (same run)", js)
        notes = [f"{ratio(m.value, r.value)} req-reply", f"{ratio(m.value, j.value)} JS pub-ack"]
        if core is not None and durable is not None:
            notes += [f"{ratio(m.value, core.value)} core floor", f"{ratio(m.value, durable.value)} durable floor"]
        m.note = ", ".join(notes)
        m.extra = {
            "ratio_request_reply": m.value / r.value,
            "ratio_js_publish": m.value / j.value,
            "ratio_core_floor": m.value / core.value if core else None,
            "ratio_durable_floor": m.value / durable.value if durable else None,
        }
        figures += [m, r, j]

        # CPU per call: a mesh-only sequential phase
        pids = {"agent": agent.pid, **ctx.srv.pids()}
        calls = ctx.scale(500, 30)
        before = _cpu(pids)
        t0 = time.perf_counter()
        for i in range(calls):
            await mesh_call(client, i)
        wall = time.perf_counter() - t0
        after = _cpu(pids)
        cpu_ms = _cpu_ms_per_call(before, after, calls)
        total_cpu = sum(cpu_ms.values())
        detail = ", ".join(f"{k.split(' ')[0]} {v:.2f}" for k, v in cpu_ms.items())
        figures.append(
            Figure(
                "roundtrip.cpu_per_call",
                "CPU per mesh call, all processes (sequential)",
                total_cpu,
                "ms",
                n=calls,
                note=detail,
                extra={"per_process_ms": cpu_ms, "wall_ms_per_call": wall * 1000 / calls},
            )
        )

        # throughput with 64 calls in flight
        seconds = 1.0 if ctx.quick else 10.0
        await flood(lambda i: mesh_call(client, i), IN_FLIGHT, seconds / 5)  # warm-up under load
        before = _cpu(pids)
        rate, lat = await flood(lambda i: mesh_call(client, i), IN_FLIGHT, seconds)
        after = _cpu(pids)
        done = len(lat)
        load_cpu = _cpu_ms_per_call(before, after, done)
        figures.append(
            Figure(
                "roundtrip.mesh_throughput",
                f"mesh throughput, {IN_FLIGHT} calls in flight",
                rate,
                "calls/s",
                n=done,
                note=f"latency p50 {Figure.from_samples('', '', lat).value:.1f} ms, "
                f"CPU {sum(load_cpu.values()):.2f} ms/call",
                extra={"latency": Figure.from_samples("", "", lat).stats, "cpu_ms_per_call": load_cpu},
            )
        )
        rate_rr, lat_rr = await flood(lambda i: probes.request_reply(), IN_FLIGHT, seconds)
        figures.append(
            Figure(
                "roundtrip.request_reply_throughput",
                f"raw request-reply throughput, {IN_FLIGHT} in flight",
                rate_rr,
                "calls/s",
                n=len(lat_rr),
                note=f"latency p50 {Figure.from_samples('', '', lat_rr).value:.1f} ms",
            )
        )
        figures.append(Figure("roundtrip.agent_boot", "echo agent boot: spawn → card in KV", boot_s, "s", n=1))
        rss = rss_mb(agent.pid)
        if rss is not None:
            figures.append(Figure("roundtrip.agent_rss", "echo agent RSS after the run", rss, "MiB", n=1))
    finally:
        await probes.close()
        await client.close()
        await agent.stop()
        await drop_namespace(ctx, ns)
    return figures


SECTION = Section("roundtrip", "roundtrip: Client.send to a no-op agent process vs raw NATS", run, latency=True)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "roundtrip", __doc__ or ""))
