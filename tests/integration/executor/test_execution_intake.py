"""Requests and schedules create executions through one path, with the same record fields and indexes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.executor.intake import ExecutionIntake, NewExecution
from a2amesh.executor.scheduler import ScheduledGraph
from a2amesh.executor.service import WorkflowExecutor
from a2amesh.protocol import TaskState
from a2amesh.schedules import parse_schedule, run_id
from a2amesh.store.executions import ExecutionRecord, ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.support.waiting import eventually, within

DAG = "name: once\nnodes:\n  - {id: a, type: agent, agent_name: echo}\n"
GRAPH = json.dumps(
    {
        "name": "talk",
        "entrypointNodeId": "A",
        "nodes": [{"id": "A", "nodeType": "AGENT", "nodeName": "A", "agentId": "ender"}],
        "edges": [
            {
                "id": "e0",
                "sourceNodeId": "A",
                "targetNodeId": None,
                "conditionType": "CONDITIONAL",
                "conditionValue": "END",
            }
        ],
    }
)
ORIGIN_FIELDS = {"schedule", "fire"}
"""Record fields only a scheduled run has."""


async def echo(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"echo": input}


async def ender(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"next": "END", "message": "done"}


async def _indexes(redis: Redis, keys: Keys, execution_id: str, workflow: str, status: str) -> dict[str, bool]:
    return {
        "executions": await redis.zscore(keys.executions_index(keys.shard(execution_id)), execution_id) is not None,
        "by_workflow": await redis.zscore(keys.executions_by_workflow(workflow, keys.shard(execution_id)), execution_id)
        is not None,
        "by_status": await redis.zscore(keys.executions_by_status(status, keys.shard(execution_id)), execution_id)
        is not None,
        "leases": await redis.zscore(keys.leases_index(keys.shard(execution_id)), execution_id) is not None,
    }


async def _finished(store: ExecutionStore, execution_id: str) -> dict[str, str]:
    async def published() -> dict[str, str] | None:
        raw = await store.record(execution_id)
        return raw if raw is not None and raw.get("final_published") == "1" else None

    return await eventually(published, timeout=10, what=f"execution {execution_id} to finish and answer")


async def test_a_request_and_a_schedule_share_the_create_path(
    agent_host: Any, executor: Any, client: Client, redis: Redis, settings: Settings, monkeypatch: Any
) -> None:
    """A request and a scheduled run of one DAG workflow go through ExecutionIntake.create and end with the
    same record fields (but a schedule's own) and the same index entries."""
    created: list[str] = []
    create = ExecutionIntake.create

    async def spy(self: ExecutionIntake, new: NewExecution) -> Any:
        created.append(new.args.execution_id)
        return await create(self, new)

    monkeypatch.setattr(ExecutionIntake, "create", spy)
    await agent_host("echo", echo)
    ex: WorkflowExecutor = await executor({"once": DAG})
    await client.registry.wait_for("once", 5)
    task = await within(client.send("once", make_message(data={"v": 1})), 10, "the requested run")
    assert task.status.state == TaskState.COMPLETED
    fire = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    graph = ScheduledGraph("once", None, parse_schedule("interval", "60"), {"v": 1})
    scheduled_id = run_id("once", None, fire)
    assert await ex.executions.start_scheduled(graph, scheduled_id, fire) is True
    assert await ex.executions.start_scheduled(graph, scheduled_id, fire) is False, "a schedule fire runs once"
    assert created == [task.id, scheduled_id], "both went through the one create path (the repeat never started)"

    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=settings.lease_ttl)
    requested, scheduled = await _finished(store, task.id), await _finished(store, scheduled_id)
    assert set(scheduled) - set(requested) == ORIGIN_FIELDS
    assert set(requested) == set(scheduled) - ORIGIN_FIELDS
    assert scheduled["schedule"] == graph.id
    assert scheduled["fire"] == str(int(fire.timestamp()))
    for field in ("workflow", "digest", "status", "input", "output", "call_depth", "reused_from"):
        assert requested[field] == scheduled[field], field
    keys = Keys(settings.namespace)
    assert await _indexes(redis, keys, task.id, "once", "completed") == await _indexes(
        redis, keys, scheduled_id, "once", "completed"
    )
    for raw in (requested, scheduled):
        assert ExecutionRecord.from_fields(raw).to_fields() == raw


async def test_graph_records_round_trip(
    agent_host: Any, executor: Any, client: Client, redis: Redis, settings: Settings
) -> None:
    """A graph run's stored record reads back as an ExecutionRecord and writes out unchanged."""
    await agent_host("ender", ender)
    await executor({"talk": GRAPH})
    await client.registry.wait_for("talk", 5)
    task = await within(client.send("talk", make_message("hi")), 10, "the graph run")
    assert task.status.state == TaskState.COMPLETED, task.status
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=settings.lease_ttl)
    raw = await _finished(store, task.id)
    assert ExecutionRecord.from_fields(raw).to_fields() == raw
