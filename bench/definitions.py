"""Definitions store: memory per stored version, and create → first answer of a new workflow.

- ``definitions.version_bytes.{dag,graph}``: Redis memory one more version of a workflow costs
  (``MEMORY USAGE`` of the id's versions hash after 1 and after N versions, divided by N − 1), for the
  repository's ``order_pipeline.yaml`` (DAG) and seed 000's ``2nchat.json`` (graph); the note gives the
  document's JSON size. Each version differs (its description carries the version number).
- ``definitions.create_to_answer``: a workflow created through ``DefinitionService.create`` (the code
  behind ``POST /api/workflows``, without the HTTP hop) → the executor process hears the ``created``
  event, loads it and publishes its card → the bench's registry sees it → ``Client.send`` answers
  (one echo node). One executor process (empty folder) and one echo agent process; a new workflow id per
  trial.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/definitions.py` from anywhere

import yaml

from a2amesh.client import Client
from a2amesh.jsontext import content_digest, dumps_text
from a2amesh.manage.definitions import DefinitionService
from a2amesh.protocol import TaskState
from a2amesh.store.definitions import DefinitionStore, NewVersion
from a2amesh.store.keys import Keys
from a2amesh.store.redis import connect_redis
from bench.common import REPO, BenchContext, Figure, Section, drop_namespace, main
from bench.wfkit import ECHO, prepare_namespace, start_agents, start_executor


async def _version_bytes(store: DefinitionStore, workflow_id: str, document: dict[str, Any], n: int) -> float:
    redis = store.redis
    key = store.keys.definition_versions(store.kind, workflow_id)
    first = 0
    for v in range(1, n + 1):
        doc = {**document, "description": f"version {v}"}
        meta = NewVersion(name=workflow_id, description=None, format="dag", digest=content_digest(doc), author="bench")
        await store.write(workflow_id, doc, meta)
        if v == 1:
            first = int(await redis.memory_usage(key, samples=0) or 0)
    last = int(await redis.memory_usage(key, samples=0) or 0)
    return (last - first) / (n - 1)


async def _memory(ctx: BenchContext) -> list[Figure]:
    ns = ctx.new_namespace("benchdef")
    settings = ctx.settings(ns)
    redis = await connect_redis(settings)
    store = DefinitionStore(redis, Keys(ns))
    n = ctx.scale(200, 20)
    figures = []
    try:
        sources = {
            "dag": yaml.safe_load((REPO / "workflows" / "order_pipeline.yaml").read_text()),
            "graph": json.loads((REPO / "workflows" / "2nchat.json").read_text()),
        }
        for kind, document in sources.items():
            per = await _version_bytes(store, f"mem_{kind}", document, n)
            size = len(dumps_text(document).encode())
            figures.append(
                Figure(
                    key=f"definitions.version_bytes.{kind}",
                    label=f"Redis memory per stored version ({kind})",
                    value=per,
                    unit="B",
                    n=n,
                    note=f"document {size} B as JSON; {n} versions",
                )
            )
    finally:
        await redis.aclose()
        await drop_namespace(ctx, ns)
    return figures


def _one_node(name: str) -> dict[str, Any]:
    return {"name": name, "nodes": [{"id": "a", "type": "agent", "agent_name": "echo", "input": {"n": 1}}]}


async def _create_to_answer(ctx: BenchContext) -> list[Figure]:
    ns = ctx.new_namespace("benchdef")
    await prepare_namespace(ctx, ns)
    await start_agents(ctx, ECHO, ns)
    folder = ctx.tmp / f"defs-{ns}"
    folder.mkdir()
    await start_executor(ctx, folder, ns)
    settings = ctx.settings(ns)
    client = await Client.connect(settings, name="bench-definitions")
    redis = await connect_redis(settings)
    service = DefinitionService(DefinitionStore(redis, Keys(ns)), bus=client.bus)
    samples: list[float] = []
    try:
        for trial in range(ctx.scale(10, 3)):
            name = f"fresh{trial}"
            t0 = time.perf_counter()
            await service.create(_one_node(name), author="bench")
            await client.registry.wait_for(name, 30)
            task = await client.send(name, {"trial": trial}, timeout=30)
            samples.append((time.perf_counter() - t0) * 1000)
            if task.status.state != TaskState.COMPLETED:
                raise RuntimeError(f"trial {trial}: the new workflow answered {task.status.state.value}")
    finally:
        await redis.aclose()
        await client.close()
        await drop_namespace(ctx, ns)
    return [
        Figure.from_samples(
            "definitions.create_to_answer",
            "workflow created in the store → first answer (card, call, one echo node)",
            samples,
            "ms",
            note="event → executor load → card → registry → call; no HTTP hop",
        )
    ]


async def run(ctx: BenchContext) -> list[Figure]:
    return [*await _memory(ctx), *await _create_to_answer(ctx)]


SECTION = Section("definitions", "definitions: memory per version, create → first answer", run)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "definitions", __doc__ or ""))
