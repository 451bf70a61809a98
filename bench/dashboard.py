"""The dashboard's pages with 100,000 executions stored: time to answer each page (issue 23: ≤ 200 ms).

Seeds ``N`` execution records (as the executor writes them: the ``exec:{id}`` hash, its node records, the
listing indexes; one in 50 failed, one in 500 paused for a review), starts one gateway in this process, and
times sequential GETs of each page over loopback with httpx (the time includes the client's own, so it bounds
the server's from above). Then the live path: 50 runs/s of lifecycle events published for 10 s while a browser
page's SSE stream is read, counting the ``changed`` messages it gets (batched: about two a second).

    python bench/dashboard.py [--executions 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/dashboard.py` from anywhere

import httpx

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.config import Settings
from a2amesh.gateway import Gateway, GatewaySettings
from a2amesh.store.keys import Keys
from a2amesh.store.redis import connect_redis
from bench.common import servers

PIPELINE = {
    "name": "pipeline",
    "nodes": [
        {"id": "fetch", "type": "agent", "agent_name": "a", "input": {}},
        {"id": "work", "type": "agent", "agent_name": "a", "depends_on": ["fetch"], "input": {}},
        {"id": "store", "type": "agent", "agent_name": "a", "depends_on": ["work"], "input": {}},
    ],
}
PAGES = [
    "/",
    "/executions",
    "/executions?status=failed",
    "/executions?status=paused",
    "/executions?workflow=pipeline&since=1h",
    "/executions?status=failed&workflow=pipeline",
    "/reviews",
    "DETAIL",
]


def _record(i: int, now_ms: int) -> tuple[str, dict[str, str], dict[str, str]]:
    status = "paused" if i % 500 == 0 else "failed" if i % 50 == 0 else "completed"
    created = now_ms - i * 100
    fields = {
        "workflow": "pipeline",
        "digest": "d" * 64,
        "status": status,
        "task_id": "",
        "input": json.dumps({"n": i, "text": "x" * 200}),
        "output": json.dumps({"ok": True}) if status == "completed" else "",
        "error": "node work failed: boom" if status == "failed" else "",
        "usage": json.dumps({"total_tokens": 42}),
        "created": str(created),
        "finished": str(created + 80) if status != "paused" else "",
    }
    if status == "paused":
        fields["review"] = json.dumps({"type": "review_request", "path": "work", "prompt": "ok?", "data": {"n": i}})
    nodes = {
        node: json.dumps(
            {
                "path": node,
                "node_id": node,
                "type": "agent",
                "status": "completed",
                "attempt": 1,
                "started_at": created / 1000 + k * 0.02,
                "finished_at": created / 1000 + k * 0.02 + 0.015,
                "input": {"n": i},
                "output": {"ok": True},
            }
        )
        for k, node in enumerate(("fetch", "work", "store"))
    }
    return str(uuid.UUID(int=i)), {k: v for k, v in fields.items() if v}, nodes


async def _seed(settings: Settings, count: int) -> str:
    redis = await connect_redis(settings)
    keys = Keys(settings.namespace)
    now_ms = int(time.time() * 1000)
    await redis.set(keys.definition("d" * 64), json.dumps(PIPELINE))
    newest = ""
    for start in range(0, count, 2000):
        pipe = redis.pipeline(transaction=False)
        for i in range(start, min(start + 2000, count)):
            execution_id, fields, nodes = _record(i, now_ms)
            newest = newest or execution_id
            pipe.hset(keys.execution(execution_id), mapping=fields)
            pipe.hset(keys.execution_nodes(execution_id), mapping=nodes)
            pipe.zadd(keys.executions_index(keys.shard(execution_id)), {execution_id: int(fields["created"])})
            pipe.zadd(
                keys.executions_by_workflow("pipeline", keys.shard(execution_id)),
                {execution_id: int(fields["created"])},
            )
            pipe.zadd(
                keys.executions_by_status(fields["status"], keys.shard(execution_id)),
                {execution_id: int(fields["created"])},
            )
        await pipe.execute()
    await redis.aclose()
    return newest


async def _time_pages(url: str, detail: str, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Accept": "text/html"}) as http:
        for page in PAGES:
            path = f"/executions/{detail}" if page == "DETAIL" else page
            samples = []
            for _ in range(rounds + 1):
                t0 = time.perf_counter()
                r = await http.get(path)
                samples.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, (path, r.status_code, r.text[:300])
            out[path] = samples[1:]  # the first warms the templates
    return out


async def _live(url: str, bus: Bus, seconds: float, rate: int) -> tuple[int, int]:
    """Publish ``rate`` runs/s of events for ``seconds`` while reading one page's stream; (events, messages)."""
    received = 0
    sent = 0

    async def read() -> None:
        nonlocal received
        async with httpx.AsyncClient(base_url=url, timeout=None) as http, http.stream("GET", "/dashboard/events") as r:
            async for line in r.aiter_lines():
                if line.startswith("event: changed"):
                    received += 1

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.5)
    received = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for _ in range(rate // 10):
            sent += 1
            body = {"execution_id": str(uuid.uuid4()), "workflow": "pipeline", "event": "execution.started", "seq": 0}
            await bus.publish(bus.subjects.workflow_event("pipeline", "started"), json.dumps(body).encode())
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    reader.cancel()
    return sent, received


async def run(count: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with servers(Path(tmp)) as srv:
            settings = Settings.load(
                environ={}, nats_url=srv.nats_url, redis_url=srv.redis_url, namespace="bdash" + uuid.uuid4().hex[:6]
            )
            bus = await Bus.connect(settings, name="bench")
            await init_mesh(bus, settings)
            t0 = time.perf_counter()
            detail = await _seed(settings, count)
            print(f"seeded {count:,} executions in {time.perf_counter() - t0:.1f}s")
            gw = Gateway(settings, GatewaySettings(host="127.0.0.1", port=0), bus=bus)
            stop = asyncio.Event()
            task = asyncio.create_task(gw.run_until(stop))
            await asyncio.wait_for(gw.ready.wait(), 15)
            results = await _time_pages(gw.url, detail, rounds)
            print(f"{'page':44} {'p50 ms':>8} {'max ms':>8}")
            for path, samples in results.items():
                print(f"{path[:44]:44} {statistics.median(samples):8.1f} {max(samples):8.1f}")
            sent, messages = await _live(gw.url, bus, 10.0, 50)
            print(f"live: {sent} run events in 10 s reached one open page as {messages} 'changed' messages")
            stop.set()
            await asyncio.wait_for(task, 20)
            await bus.close()


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(run(args.executions, args.rounds))


if __name__ == "__main__":
    _main()
