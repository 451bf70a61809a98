"""The management API's execution listing: ``GET /api/executions`` page of 50 with 100,000 executions stored.

The executions are written straight into Redis (records and listing indexes, pipelined, in the layout the
executor writes: :mod:`a2amesh.store.executions`, :mod:`a2amesh.store.listing`), spread over 20 workflows
and three statuses with distinct start times. A gateway process serves the API; a bare keep-alive HTTP
client (``bench/gateway.py``'s ``RawHttp``) reads the first page, pages deep into the listing with the
cursor, and filters by workflow and by status. Target (issue 21): p50 ≤ 20 ms for a page of 50.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/api.py` from anywhere

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.store.keys import Keys
from a2amesh.store.redis import connect_redis
from bench.common import BenchContext, Figure, Section, drop_namespace, main, ms_since
from bench.gateway import RawHttp, _free_port, _wait_http

STORED = 100_000
WORKFLOWS = 20
BATCH = 2_000
STATUSES = ("completed", "completed", "completed", "failed", "running")


def _record(i: int, workflow: str, status: str, created: int) -> dict[str, str]:
    return {
        "workflow": workflow,
        "digest": "d" * 16,
        "status": status,
        "task_id": f"e{i:07d}",
        "context_id": f"c{i}",
        "input": json.dumps({"order": i, "items": [1, 2, 3]}),
        "output": json.dumps({"ok": True, "n": i}) if status == "completed" else "",
        "error": "node b failed: timeout" if status == "failed" else "",
        "usage": json.dumps({"prompt_tokens": 120, "completion_tokens": 40}),
        "created": str(created),
        **({"finished": str(created + 900)} if status != "running" else {}),
    }


async def _store(ctx: BenchContext, ns: str, count: int) -> float:
    """Write ``count`` executions with their listing entries; seconds taken."""
    settings = ctx.settings(ns)
    redis = await connect_redis(settings)
    keys = Keys(ns)
    t0 = time.monotonic()
    start = int(time.time() * 1000) - count * 10
    try:
        for first in range(0, count, BATCH):
            pipe = redis.pipeline(transaction=False)
            for i in range(first, min(first + BATCH, count)):
                execution_id = f"e{i:07d}"
                workflow = f"wf{i % WORKFLOWS:02d}"
                status = STATUSES[i % len(STATUSES)]
                created = start + i * 10
                pipe.hset(keys.execution(execution_id), mapping=_record(i, workflow, status, created))
                pipe.zadd(keys.executions_index(keys.shard(execution_id)), {execution_id: created})
                pipe.zadd(keys.executions_by_workflow(workflow, keys.shard(execution_id)), {execution_id: created})
                pipe.zadd(keys.executions_by_status(status, keys.shard(execution_id)), {execution_id: created})
            await pipe.execute()
    finally:
        await redis.aclose()
    return time.monotonic() - t0


async def _get(http: RawHttp, query: str) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    status, body = await http.get(query)
    elapsed = ms_since(t0)
    if status != 200:
        raise RuntimeError(f"GET {query} answered {status}: {body[:300]!r}")
    return elapsed, json.loads(body)


async def run(ctx: BenchContext) -> list[Figure]:
    """Store the executions, start a gateway, time pages of 50 (first, deep by cursor, filtered)."""
    ns = ctx.new_namespace("api")
    bus = await Bus.connect(ctx.settings(ns), name="bench-api")
    try:
        await init_mesh(bus, ctx.settings(ns))  # what `a2amesh up` does before it starts the gateway
    finally:
        await bus.close()
    count = ctx.scale(STORED, 10_000)
    wrote = await _store(ctx, ns, count)
    port = _free_port()
    gateway = await ctx.spawn(
        f"gateway-{ns}",
        [sys.executable, "-m", "a2amesh", "gateway", "--port", str(port)],
        ctx.child_env(ns, A2AMESH_LOG_LEVEL="WARNING"),
    )
    base = f"http://127.0.0.1:{port}"
    http = RawHttp(f"{base}/api/executions")
    figures: list[Figure] = []
    try:
        await _wait_http(gateway, f"{base}/readyz")
        for _ in range(ctx.scale(50, 10)):
            await _get(http, "?limit=50")
        n = ctx.scale(400, 40)
        first = [(await _get(http, "?limit=50"))[0] for _ in range(n)]
        deep: list[float] = []
        cursor = ""
        for _ in range(n):
            elapsed, page = await _get(http, f"?limit=50{'&cursor=' + cursor if cursor else ''}")
            deep.append(elapsed)
            cursor = page["next_cursor"] or ""
        by_workflow = [(await _get(http, "?limit=50&workflow=wf07"))[0] for _ in range(n)]
        by_status = [(await _get(http, "?limit=50&status=failed"))[0] for _ in range(n)]
        both = [(await _get(http, "?limit=50&status=failed&workflow=wf03"))[0] for _ in range(n)]
        stored = f"{count:,} executions stored (written in {wrote:.1f} s)"
        figures += [
            Figure.from_samples("api.executions_page", "GET /api/executions?limit=50 (newest)", first, note=stored),
            Figure.from_samples(
                "api.executions_deep_page", "… page after page with next_cursor", deep, note=f"{n} pages deep"
            ),
            Figure.from_samples("api.executions_by_workflow", "… &workflow= (one of 20)", by_workflow),
            Figure.from_samples("api.executions_by_status", "… &status=failed (1 in 5)", by_status),
            Figure.from_samples("api.executions_by_both", "… &status=failed&workflow= (index + filter)", both),
        ]
    finally:
        await http.aclose()
        await gateway.stop()
        await drop_namespace(ctx, ns)
    return figures


SECTION = Section("api", "management API: execution listing with 100,000 executions stored", run, latency=True)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "api", __doc__ or ""))
