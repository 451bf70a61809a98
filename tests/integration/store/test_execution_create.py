"""An execution created with its workflow task's record: one script writes both, or neither."""

from __future__ import annotations

from typing import Any

from a2amesh.protocol import Task, TaskState, TaskStatus
from a2amesh.store.executions import ExecutionStore, Listed
from a2amesh.store.keys import Keys
from a2amesh.store.tasks import Subscriber, TaskStore


def _stores(redis: Any, settings: Any) -> tuple[ExecutionStore, TaskStore]:
    keys = Keys(settings.namespace)
    return (
        ExecutionStore(redis, keys, retention=60, lease_ttl=5),
        TaskStore(redis, keys, retention=60, queued_ttl=60),
    )


def _task(task_id: str, state: TaskState) -> Task:
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=state), metadata={"workflow": "wf"})


async def _create(store: ExecutionStore, execution_id: str, task: Task | None, listed: Listed | None = None) -> Any:
    return await store.create(
        execution_id,
        owner="me",
        state_json="{}",
        fields={"status": "running"},
        nodes={},
        events=[],
        timers={},
        task=task,
        listed=listed,
    )


async def test_the_task_record_is_written_with_the_execution(redis: Any, settings: Any) -> None:
    executions, tasks = _stores(redis, settings)
    created = await _create(executions, "wf-new", _task("wf-new", TaskState.WORKING))
    assert created.created
    stored = await tasks.get("wf-new")
    assert stored is not None
    assert stored.status.state == TaskState.WORKING
    assert stored.metadata == {"workflow": "wf"}
    ttl = await redis.ttl(Keys(settings.namespace).task("wf-new"))
    assert 0 < ttl <= 60, f"the task record must expire with the retention, TTL {ttl}"
    assert await redis.zscore(Keys(settings.namespace).agent_tasks("wf", Keys.shard("wf-new")), "wf-new") is None
    await executions.index_created("wf-new", workflow="wf", status="running", timers={})
    assert await redis.zscore(Keys(settings.namespace).agent_tasks("wf", Keys.shard("wf-new")), "wf-new") is not None


async def test_an_existing_execution_keeps_its_task_record(redis: Any, settings: Any) -> None:
    executions, tasks = _stores(redis, settings)
    assert (await _create(executions, "wf-twice", _task("wf-twice", TaskState.WORKING))).created
    await tasks.write(_task("wf-twice", TaskState.COMPLETED), "wf", "me", release=True)
    again = await _create(executions, "wf-twice", _task("wf-twice", TaskState.WORKING))
    assert not again.created
    stored = await tasks.get("wf-twice")
    assert stored is not None
    assert stored.status.state == TaskState.COMPLETED


async def test_an_earlier_final_task_record_stands(redis: Any, settings: Any) -> None:
    executions, tasks = _stores(redis, settings)
    await tasks.write(_task("wf-final", TaskState.FAILED), "wf", "me", release=True)
    assert (await _create(executions, "wf-final", _task("wf-final", TaskState.WORKING))).created
    stored = await tasks.get("wf-final")
    assert stored is not None
    assert stored.status.state == TaskState.FAILED


async def test_a_canceled_task_gets_neither(redis: Any, settings: Any) -> None:
    executions, tasks = _stores(redis, settings)
    marked = await tasks.mark_canceled("wf-canceled")
    assert marked.outcome == "marked"
    created = await _create(executions, "wf-canceled", _task("wf-canceled", TaskState.WORKING))
    assert created.canceled
    assert not created.created
    assert await tasks.get("wf-canceled") is None
    assert await executions.record("wf-canceled") is None


async def _lease_entry(redis: Any, settings: Any, execution_id: str) -> float | None:
    score: float | None = await redis.zscore(
        Keys(settings.namespace).leases_index(Keys.shard(execution_id)), execution_id
    )
    return score


async def test_the_lease_entry_goes_with_the_create(redis: Any, settings: Any) -> None:
    """Without it, an execution whose creator died before index_created would never be taken over."""
    executions, _ = _stores(redis, settings)
    assert (await _create(executions, "wf-leased", None)).created
    assert await _lease_entry(redis, settings, "wf-leased") is not None


async def test_no_lease_entry_is_left_for_an_execution_not_created(redis: Any, settings: Any) -> None:
    executions, tasks = _stores(redis, settings)
    await tasks.mark_canceled("wf-no-entry")
    assert (await _create(executions, "wf-no-entry", None)).canceled
    assert await _lease_entry(redis, settings, "wf-no-entry") is None

    assert (await _create(executions, "wf-done", None)).created
    await redis.hset(Keys(settings.namespace).execution("wf-done"), "status", "completed")
    await executions.mark_published("wf-done")
    assert await _lease_entry(redis, settings, "wf-done") is None
    assert not (await _create(executions, "wf-done", None)).created
    assert await _lease_entry(redis, settings, "wf-done") is None, "a finished execution got a takeover entry back"

    assert (await _create(executions, "wf-running", None)).created
    before = await _lease_entry(redis, settings, "wf-running")
    assert not (await _create(executions, "wf-running", None)).created
    assert await _lease_entry(redis, settings, "wf-running") == before, "a running execution's entry must be kept"


async def _listings(redis: Any, settings: Any, execution_id: str) -> dict[str, float | None]:
    keys, shard = Keys(settings.namespace), Keys.shard(execution_id)
    named = {
        "all": keys.executions_index(shard),
        "workflow": keys.executions_by_workflow("wf", shard),
        "tasks": keys.agent_tasks("wf", shard),
        "running": keys.executions_by_status("running", shard),
        "children": keys.execution_children("wf-parent"),
    }
    return {name: await redis.zscore(key, execution_id) for name, key in named.items()}


async def test_the_listing_entries_go_with_the_create_and_only_for_one_created(redis: Any, settings: Any) -> None:
    """Written in the create's round trip (NX); taken back for an execution not created there, whose own
    entries (a finished one's, out of the running listing) stay as they were."""
    executions, tasks = _stores(redis, settings)
    listed = Listed("wf", "running", "wf-parent")
    assert (await _create(executions, "wf-listed", None, listed)).created
    entries = await _listings(redis, settings, "wf-listed")
    assert None not in entries.values(), entries

    await redis.zrem(Keys(settings.namespace).executions_by_status("running", Keys.shard("wf-listed")), "wf-listed")
    assert not (await _create(executions, "wf-listed", None, listed)).created
    assert await _listings(redis, settings, "wf-listed") == {**entries, "running": None}, "an existing one's kept"

    await tasks.mark_canceled("wf-unlisted")
    assert (await _create(executions, "wf-unlisted", None, listed)).canceled
    assert set((await _listings(redis, settings, "wf-unlisted")).values()) == {None}


async def _finish(executions: ExecutionStore, execution_id: str, token: str, task: Task) -> Any:
    return await executions.commit(
        execution_id,
        token,
        state_json="{}",
        nodes={},
        events=[],
        applied=[f"{execution_id}:last"],
        set_timers={},
        clear_timers=[],
        fields={"status": "completed"},
        final_status="completed",
        final_task=(task, "me"),
    )


async def test_the_finishing_commit_stores_the_final_task(redis: Any, settings: Any) -> None:
    """The final record lands in the finishing step's own script, with the subscribers to answer."""
    executions, tasks = _stores(redis, settings)
    assert (await _create(executions, "wf-fin", _task("wf-fin", TaskState.WORKING))).created
    await tasks.add_subscriber("wf-fin", Subscriber("reply.someone.1", "its-id"))
    result = await _finish(executions, "wf-fin", "me:1", _task("wf-fin", TaskState.COMPLETED))
    assert result.ok
    assert result.final_task is not None
    assert result.final_task.outcome == "written"
    assert result.final_task.subscribers == [Subscriber("reply.someone.1", "its-id")]
    stored = await tasks.get("wf-fin")
    assert stored is not None
    assert stored.status.state == TaskState.COMPLETED


async def test_a_refused_finishing_commit_stores_no_final_task(redis: Any, settings: Any) -> None:
    executions, tasks = _stores(redis, settings)
    assert (await _create(executions, "wf-stale", _task("wf-stale", TaskState.WORKING))).created
    result = await _finish(executions, "wf-stale", "someone-else:1", _task("wf-stale", TaskState.COMPLETED))
    assert result.outcome == "stale"
    assert result.final_task is None
    stored = await tasks.get("wf-stale")
    assert stored is not None
    assert stored.status.state == TaskState.WORKING, "a replica that lost the lease must not store a final"


async def test_the_finishing_commit_keeps_an_earlier_final(redis: Any, settings: Any) -> None:
    executions, tasks = _stores(redis, settings)
    assert (await _create(executions, "wf-early", _task("wf-early", TaskState.WORKING))).created
    await tasks.write(_task("wf-early", TaskState.CANCELED), "wf", "me", release=True)
    result = await _finish(executions, "wf-early", "me:1", _task("wf-early", TaskState.COMPLETED))
    assert result.ok
    assert result.final_task is not None
    assert result.final_task.outcome == "terminal"
    assert result.final_task.state == TaskState.CANCELED
    stored = await tasks.get("wf-early")
    assert stored is not None
    assert stored.status.state == TaskState.CANCELED
