"""Recovery: SIGKILL of the executor driving an execution → the next node dispatched by another replica.

Two executor replicas serve a two-node workflow: ``slow`` (an agent node that sleeps 0.3 s) then
``next`` (echo). The bench starts an execution, waits for ``slow``'s ``node.started`` event, reads
the lease owner from Redis (``{ns}:exec:{id}:lease`` = ``instance:epoch``), SIGKILLs that replica, and
times until ``next``'s ``node.started`` event (published by the adopting replica after it takes the
lease, reads ``slow``'s stored final from the replies stream, applies it and dispatches ``next``).
A fresh replica is started after each trial so two are always serving. Median of 10.

Settings: the production profile (lease 10 s). A dead replica is found by its presence key, which lives
4 s without renewal and is renewed every 4/3 s: the other replica then releases its leases and takes the
execution over, so recovery ≈ 2.7–4 s + up to one tick (0.25 s) + the pick-up, not the 10 s lease.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/recovery.py` from anywhere

import redis.asyncio as aioredis

from a2amesh.bus.nats import Bus, Received
from a2amesh.client import Client, make_message
from a2amesh.protocol import TaskState
from a2amesh.store.keys import Keys
from a2amesh.store.presence import presence_ttl
from bench.common import BenchContext, Child, Figure, Section, drop_namespace, main
from bench.wfkit import ECHO, prepare_namespace, start_agents, start_executor, write_agent, write_workflows

LEASE_TTL = 10.0
"""The production default (the section no longer shortens it)."""


def workflow() -> dict[str, object]:
    return {
        "name": "recover",
        "description": "a slow node then an echo node (benchmark)",
        "version": "1.0.0",
        "nodes": [
            {"id": "slow", "type": "agent", "agent_name": "sleeper", "input": {"sleep": 0.3}},
            {"id": "next", "type": "agent", "agent_name": "echo", "depends_on": ["slow"], "input": "{{slow.output}}"},
        ],
        "output_mapping": {"out": "{{next.output}}"},
    }


async def run(ctx: BenchContext) -> list[Figure]:
    trials = ctx.scale(10, 1)
    ns = ctx.new_namespace("rec")
    folder = write_workflows(ctx.tmp / f"wf-{ns}", [workflow()])
    sleeper = write_agent(ctx.tmp / f"agents-{ns}", "sleeper", "sleeper")
    env: dict[str, str] = {}
    await prepare_namespace(ctx, ns)
    await start_agents(ctx, sleeper, ns)
    await start_agents(ctx, ECHO, ns)
    replicas: dict[str, Child] = {}
    serial = 0

    async def add_replica() -> None:
        nonlocal serial
        serial += 1
        child, instance = await start_executor(ctx, folder, ns, label=f"executor{serial}", env=env)
        replicas[instance] = child

    await asyncio.gather(add_replica(), add_replica())
    settings = ctx.settings(ns)
    client = await Client.connect(settings, name="bench-recovery")
    bus = await Bus.connect(settings, name="bench-recovery-events")
    r = aioredis.from_url(ctx.srv.redis_url, decode_responses=True)
    keys = Keys(ns)
    started: dict[tuple[str, str], float] = {}
    arrived = asyncio.Event()

    async def on_event(msg: Received) -> None:
        payload = json.loads(msg.data)
        started[(payload["execution_id"], payload["path"])] = time.time()
        arrived.set()

    sub = await bus.subscribe(bus.subjects.node_event("recover", "started"), on_event)
    samples: list[float] = []
    try:
        await client.registry.wait_for("recover", 30)
        warm = await client.send("recover", {}, timeout=60)
        assert warm.status.state == TaskState.COMPLETED, warm.status
        for t in range(trials):
            call = await client.dispatch("recover", make_message(data={"trial": t}), timeout=120)
            execution_id = call.task_id
            while (execution_id, "slow") not in started:
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), 30)
            lease = await r.get(keys.lease(execution_id)) or ""
            owner = lease.rsplit(":", 1)[0]
            victim = replicas.pop(owner, None)
            if victim is None:
                raise RuntimeError(f"lease {lease!r} names no known replica ({sorted(replicas)})")
            killed = time.time()
            victim.proc.send_signal(signal.SIGKILL)
            await victim.proc.wait()
            while (execution_id, "next") not in started:
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), 60)
            samples.append((started[(execution_id, "next")] - killed) * 1000)
            task = await call.result()
            if task.status.state != TaskState.COMPLETED:
                raise RuntimeError(f"trial {t}: execution ended {task.status.state.value}")
            await add_replica()
    finally:
        await sub.unsubscribe()
        await r.aclose()
        await bus.close()
        await client.close()
        await drop_namespace(ctx, ns)
    f = Figure.from_samples(
        "recovery.takeover",
        "SIGKILL of the driving executor → next node dispatched by another replica",
        [s / 1000 for s in samples],
        "s",
        note=f"production settings: lease TTL {LEASE_TTL:g} s, presence TTL {presence_ttl(LEASE_TTL):g} s; "
        "the execution then completes",
    )
    f.extra = {"samples_ms": samples, "lease_ttl_s": LEASE_TTL, "presence_ttl_s": presence_ttl(LEASE_TTL)}
    return [f]


SECTION = Section("recovery", "recovery: SIGKILL of the driving executor → next node by another replica", run)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "recovery", __doc__ or ""))
