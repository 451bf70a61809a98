"""Schedules at run time over real NATS + Valkey: interval ticks, continuous runs, pause/resume, catch-up."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from a2amesh.config import Settings
from a2amesh.executor.service import WorkflowExecutor
from a2amesh.schedules import ScheduleState, parse_schedule, previous_fire, run_id
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.schedules import ScheduleStore
from tests.support.waiting import eventually


def interval_workflow(name: str, schedule: str, agent: str = "beat", mode: str = "interval") -> str:
    return f"""
name: {name}
execution_mode: {mode}
schedule: "{schedule}"
schedule_input: {{who: {name}}}
nodes:
  - {{id: beat, type: agent, agent_name: {agent}, input: {{who: "{{{{workflow.input.who}}}}"}}}}
"""


class Beats:
    """An agent handler that records each call (and can take its time)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: list[tuple[str, float]] = []

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.calls.append((str(ctx.task_id), time.time()))
        if self.delay:
            await asyncio.sleep(self.delay)
        return {"seen": input.get("who")}


def stores(redis: Redis, settings: Settings) -> tuple[ExecutionStore, ScheduleStore]:
    keys = Keys(settings.namespace)
    return ExecutionStore(redis, keys, retention=60, lease_ttl=settings.lease_ttl), ScheduleStore(redis, keys)


async def runs_of(store: ExecutionStore, workflow: str) -> list[dict[str, str]]:
    records = await store.list(workflow=workflow, limit=200)
    return sorted(records, key=lambda r: r["execution_id"])


def fire_ts(record: dict[str, str]) -> int:
    return int(record["execution_id"].rsplit(":", 1)[1])


async def test_interval_two_replicas_one_run_per_tick(
    agent_host: Any, executor: Any, redis: Redis, settings: Settings
) -> None:
    """Two executors over one folder make exactly one run per tick, each with a trail and a sched: id."""
    beats = Beats()
    await agent_host("beat", beats)
    folder_files = {"every": interval_workflow("every", "1")}
    first: WorkflowExecutor = await executor(folder_files)
    await executor(first.folder)
    execs, _ = stores(redis, settings)

    async def four_done() -> list[dict[str, str]] | None:
        runs = [r for r in await runs_of(execs, "every") if r.get("status") == "completed"]
        return runs if len(runs) >= 4 else None

    runs = await eventually(four_done, timeout=15, what="four completed scheduled runs")
    ticks = [fire_ts(r) for r in runs]
    assert len(ticks) == len(set(ticks))
    assert all(r["execution_id"] == f"sched:every:main:{fire_ts(r)}" for r in runs)
    assert ticks[-1] - ticks[0] == len(ticks) - 1, f"a tick was skipped or doubled: {ticks}"
    called = [task for task, _ in beats.calls]
    assert len(called) == len(set(called)), "a node ran twice"
    nodes = await execs.nodes(runs[0]["execution_id"])
    assert nodes["beat"]["input"] == {"who": "every"}
    assert nodes["beat"]["output"] == {"seen": "every"}
    assert runs[0]["schedule"] == "every/main"


async def test_continuous_runs_follow_each_other_with_the_delay(
    agent_host: Any, executor: Any, redis: Redis, settings: Settings
) -> None:
    """Continuous mode starts the next run `delay` s after the previous ended, never while one is running."""
    beats = Beats(delay=0.6)
    await agent_host("slow", beats)
    await executor({"loop": interval_workflow("loop", "1", agent="slow", mode="continuous")})
    execs, _ = stores(redis, settings)

    async def three_done() -> list[dict[str, str]] | None:
        runs = [r for r in await runs_of(execs, "loop") if r.get("status") == "completed"]
        return runs if len(runs) >= 3 else None

    runs = await eventually(three_done, timeout=20, what="three completed continuous runs")
    runs.sort(key=lambda r: int(r["created"]))
    for previous, following in zip(runs, runs[1:], strict=False):
        gap = (int(following["created"]) - int(previous["finished"])) / 1000
        assert gap >= 0.95, f"the next run started {gap:.3f}s after the previous ended (delay 1s)"
        assert gap < 2.5, f"the next run waited {gap:.3f}s (delay 1s)"
    starts = sorted(t for _, t in beats.calls)
    assert all(b - a >= 1.5 for a, b in zip(starts, starts[1:], strict=False)), "two runs overlapped"


async def test_pause_and_resume(agent_host: Any, executor: Any, redis: Redis, settings: Settings) -> None:
    """A paused schedule does not fire; resumed, it fires again without catching up the paused ticks."""
    await agent_host("beat", Beats())
    await executor({"paused": interval_workflow("paused", "1")})
    execs, schedules = stores(redis, settings)
    await eventually(lambda: runs_of(execs, "paused"), timeout=10, what="a first scheduled run")
    state = await schedules.pause("paused/main")
    assert state is not None
    assert state.paused
    assert state.next_fire is None
    paused_at = time.time()
    before = len(await runs_of(execs, "paused"))
    await asyncio.sleep(2.5)  # a negative check: ticks pass, nothing may fire
    after = await runs_of(execs, "paused")
    assert len(after) <= before + 1  # at most a fire already under way when the pause landed
    assert all(fire_ts(r) <= paused_at + 0.5 for r in after)
    resumed_at = time.time()
    state = await schedules.resume("paused/main", datetime.now(UTC))
    assert state is not None
    assert not state.paused
    assert state.next_fire is not None

    async def fired_again() -> bool:
        return any(fire_ts(r) >= int(resumed_at) for r in await runs_of(execs, "paused"))

    await eventually(fired_again, timeout=10, what="a run after resume")
    missed = [r for r in await runs_of(execs, "paused") if paused_at + 0.5 < fire_ts(r) < int(resumed_at)]
    assert missed == [], "ticks missed while paused were caught up"


async def test_catch_up_after_downtime_fires_once(
    agent_host: Any, executor: Any, redis: Redis, settings: Settings
) -> None:
    """After the executor was down for several ticks, exactly one catch-up run is made, for the latest tick."""
    await agent_host("beat", Beats())
    first: WorkflowExecutor = await executor({"down": interval_workflow("down", "1")})
    execs, _ = stores(redis, settings)
    await eventually(lambda: runs_of(execs, "down"), timeout=10, what="a first scheduled run")
    await first.shutdown()
    stopped = time.time()
    known = {r["execution_id"] for r in await runs_of(execs, "down")}
    await asyncio.sleep(3.5)  # downtime: three or four ticks pass with no executor
    restarted = time.time()
    await executor(first.folder)

    async def caught_up() -> list[dict[str, str]]:
        return [r for r in await runs_of(execs, "down") if r["execution_id"] not in known]

    await eventually(caught_up, timeout=10, what="the catch-up run")
    new = await caught_up()
    ids = [r["execution_id"] for r in new]
    # No burst: no run for the older missed ticks, and at most one for a tick before the restart
    # (the catch-up; when the scheduler first ran after the next tick, that tick is the catch-up).
    assert all(fire_ts(r) >= int(restarted) - 1 for r in new), f"older missed ticks were fired: {ids}"
    assert len([r for r in new if fire_ts(r) <= int(restarted)]) <= 1, f"more than one catch-up: {ids}"
    assert all(fire_ts(r) > int(stopped) for r in new), ids


async def test_daily_catch_up_after_days_down(agent_host: Any, executor: Any, redis: Redis, settings: Settings) -> None:
    """A daily schedule whose last fire was three days ago runs once, for today's time, not three times."""
    await agent_host("beat", Beats())
    now = datetime.now(UTC)
    at = (now - timedelta(minutes=5)).strftime("%H:%M")
    spec = parse_schedule("interval", f"daily@{at}")
    long_ago = now - timedelta(days=3, minutes=10)
    execs, schedules = stores(redis, settings)
    old = ScheduleState.new("report", spec, now=long_ago).fired(previous_fire(spec, long_ago) or long_ago)
    assert await schedules.write("report/main", None, old)
    await executor({"report": interval_workflow("report", f"daily@{at}")})
    expected = previous_fire(spec, datetime.now(UTC))
    assert expected is not None

    async def fired() -> list[dict[str, str]]:
        return await runs_of(execs, "report")

    runs = await eventually(fired, timeout=10, what="the catch-up run")
    await asyncio.sleep(1.0)  # a negative check: no second catch-up follows
    runs = await runs_of(execs, "report")
    assert [r["execution_id"] for r in runs] == [run_id("report", None, expected)]
    stored = await schedules.get("report/main")
    assert stored is not None
    assert stored.state is not None
    assert stored.state.next_fire == expected + timedelta(days=1)


async def test_removed_and_changed_schedules(agent_host: Any, executor: Any, redis: Redis, settings: Settings) -> None:
    """Hot reload: a changed schedule is re-registered (keeping its pause), a one_time one is removed."""
    await agent_host("beat", Beats())
    ex: WorkflowExecutor = await executor({"flex": interval_workflow("flex", "60")})
    _, schedules = stores(redis, settings)

    async def registered(text: str) -> bool:
        stored = await schedules.get("flex/main")
        return stored is not None and stored.state is not None and stored.state.schedule == text

    await eventually(lambda: registered("60"), timeout=5, what="the schedule to be registered")
    await schedules.pause("flex/main")
    (ex.folder / "flex.yaml").write_text(interval_workflow("flex", "daily@09:00"))
    await eventually(lambda: registered("daily@09:00"), timeout=5, what="the changed schedule")
    stored = await schedules.get("flex/main")
    assert stored is not None
    assert stored.state is not None
    assert stored.state.paused
    (ex.folder / "flex.yaml").write_text(interval_workflow("flex", "60", mode="one_time"))

    async def removed() -> bool:
        return await schedules.get("flex/main") is None

    await eventually(removed, timeout=5, what="the schedule to be removed")


GRAPH_BRANCHES = """
name: multi
nodes:
  - {id: m, type: agent, config: {agentId: gbeat}}
edges: []
branches:
  - id: tick
    nodes: [{id: t, type: agent, config: {agentId: gbeat}}]
    edges: []
    executionMode: interval
    schedule: "1"
  - id: once
    nodes: [{id: o, type: agent, config: {agentId: gbeat}}]
    edges: []
"""


async def test_graph_branch_schedule(agent_host: Any, executor: Any, redis: Redis, settings: Settings) -> None:
    """An interval branch of a graph workflow runs on its own, as sched:{workflow}:{branch}:{ts}; others do not."""
    await agent_host("gbeat", Beats())
    await executor({"multi": GRAPH_BRANCHES})
    execs, schedules = stores(redis, settings)

    async def branch_runs() -> list[dict[str, str]] | None:
        runs = [r for r in await runs_of(execs, "multi") if r.get("status") == "completed"]
        return runs if len(runs) >= 2 else None

    runs = await eventually(branch_runs, timeout=15, what="two completed runs of the scheduled branch")
    assert all(r["execution_id"].startswith("sched:multi:tick:") for r in runs)
    assert [s.id for s in await schedules.all()] == ["multi/tick"]
    nodes = await execs.nodes(runs[0]["execution_id"])
    assert [n["node_id"] for n in nodes.values()] == ["t"]
