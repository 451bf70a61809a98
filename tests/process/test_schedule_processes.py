"""Schedules with executor replicas as separate OS processes: one run per tick across a SIGKILL, and the CLI."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import textwrap
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.schedules import ScheduleState, parse_schedule
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.schedules import ScheduleStore
from tests.support.cli import mesh_cli
from tests.support.processes import Proc, ProcessFactory
from tests.support.waiting import eventually

INTERVAL = 2


def write_workflow(folder: Path, name: str, schedule: str, agent: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = f"""
    name: {name}
    execution_mode: interval
    schedule: "{schedule}"
    schedule_input: {{n: 1}}
    nodes:
      - {{id: beat, type: agent, agent_name: {agent}, input: {{n: "{{{{workflow.input.n}}}}"}}}}
    """
    (folder / f"{name}.yaml").write_text(textwrap.dedent(text))
    return folder


def ready_instance(proc: Proc) -> bool:
    return any('"executor.ready"' in line for line in proc.output().splitlines())


async def start_executor(processes: ProcessFactory, folder: Path, client: Client, workflow: str) -> Proc:
    proc = await processes.start("executor", str(folder), "--reload-interval", "0.2")

    async def ready() -> bool:
        assert proc.returncode is None, f"executor exited: {proc.output()[-3000:]}"
        return ready_instance(proc) and client.registry.get(workflow) is not None

    await eventually(ready, timeout=20, what="the executor to serve its workflows")
    return proc


async def sleep_until(at: float) -> None:
    await asyncio.sleep(max(0.0, at - time.time()))


def counting_beat(calls: Counter[str]) -> Any:
    """An agent handler that counts its runs per execution and echoes ``n``."""

    async def beat(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        calls[str(ctx.execution_id)] += 1
        return {"n": input["n"]}

    return beat


async def crash_at_first_fire(processes: ProcessFactory, folder: Path, fault: str) -> None:
    """An executor replica armed with the fault hook ``fault``: it fires its first tick and dies there."""
    doomed = await processes.start(
        "executor", str(folder), "--reload-interval", "0.2", env={"A2AMESH_FAULT": f"crash:{fault}"}
    )
    await doomed.wait(20)
    assert f"fault hook crash:{fault}" in doomed.output()


async def test_two_replicas_one_run_per_tick_across_a_sigkill(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, agent_host: Any, tmp_path: Path
) -> None:
    """Five ticks, two executor processes, one SIGKILLed just before a tick: each tick makes exactly one run."""
    calls: Counter[str] = Counter()
    await agent_host("pbeat", counting_beat(calls))
    folder = write_workflow(tmp_path / "wf", "ptick", str(INTERVAL), "pbeat")
    first = await start_executor(processes, folder, client, "ptick")
    await start_executor(processes, folder, client, "ptick")
    start = math.ceil(time.time() / INTERVAL) * INTERVAL + INTERVAL  # skip a tick that may be imminent
    ticks = [start + INTERVAL * k for k in range(5)]
    await sleep_until(ticks[2] - 0.1)
    first.signal(signal.SIGKILL)
    await first.wait(10)
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=settings.lease_ttl)
    expected = [f"sched:ptick:main:{t}" for t in ticks]

    async def all_completed() -> bool:
        records = [await store.record(i) for i in expected]
        return all(r is not None and r.get("status") == "completed" for r in records)

    await sleep_until(ticks[-1])
    await eventually(all_completed, timeout=20, what="a completed run for each of the five ticks")
    for execution_id in expected:
        assert calls[execution_id] == 1, f"{execution_id}: node ran {calls[execution_id]} times"
    made = {r["execution_id"] for r in await store.list(workflow="ptick", limit=100)}
    in_window = {i for i in made if ticks[0] <= int(i.rsplit(":", 1)[1]) <= ticks[-1]}
    assert in_window == set(expected), f"runs in the window: {sorted(in_window)}"
    assert all(int(i.rsplit(":", 1)[1]) % INTERVAL == 0 for i in made), f"a run off the tick grid: {sorted(made)}"


async def test_crash_between_run_creation_and_advance(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, agent_host: Any, tmp_path: Path
) -> None:
    """A replica dying after it created a tick's run but before advancing the schedule: the run is made once,
    finished by the other replica, and the following ticks go on."""
    calls: Counter[str] = Counter()
    await agent_host("kbeat", counting_beat(calls))
    folder = write_workflow(tmp_path / "wf", "ktick", "1", "kbeat")
    await crash_at_first_fire(processes, folder, "after_schedule_fire_before_advance")
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=settings.lease_ttl)
    (crashed,) = [r["execution_id"] for r in await store.list(workflow="ktick")]
    await start_executor(processes, folder, client, "ktick")

    async def later_runs_done() -> bool:
        records = await store.list(workflow="ktick", limit=100)
        done = [r for r in records if r.get("status") == "completed"]
        return len(done) >= 3 and any(r["execution_id"] == crashed for r in done)

    await eventually(later_runs_done, timeout=20, what="the crashed replica's run and later ones to complete")
    made = [r["execution_id"] for r in await store.list(workflow="ktick", limit=100)]
    assert len(made) == len(set(made))
    assert calls[crashed] == 1, f"the run of the crashed replica ran its node {calls[crashed]} times"
    assert all(count == 1 for count in calls.values()), calls


async def test_crash_right_after_run_creation(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, agent_host: Any, tmp_path: Path
) -> None:
    """A replica dying right after it created a tick's run, before dispatching its first node: the run's listing
    and takeover entries went with the create, so it is listed at once and the other replica takes it over;
    the node runs once."""
    calls: Counter[str] = Counter()
    await agent_host("ibeat", counting_beat(calls))
    folder = write_workflow(tmp_path / "wf", "itick", "1", "ibeat")
    await crash_at_first_fire(processes, folder, "after_execution_create")
    keys = Keys(settings.namespace)
    store = ExecutionStore(redis, keys, retention=60, lease_ttl=settings.lease_ttl)
    listed = await store.list(workflow="itick")
    assert [r.get("status") for r in listed] == ["running"], f"the crashed replica's run, listed: {listed}"
    crashed = listed[0]["execution_id"]
    created = [k async for k in redis.scan_iter(match=keys.execution("*"), count=1000) if ":itick:" in str(k)]
    assert len(created) == 1, f"expected the crashed replica's one run, found {created}"
    await start_executor(processes, folder, client, "itick")

    async def crashed_run_done() -> bool:
        record = await store.record(crashed)
        return record is not None and record.get("status") == "completed"

    await eventually(crashed_run_done, timeout=20, what="the crashed replica's run to be taken over")
    assert calls[crashed] == 1, f"the run of the crashed replica ran its node {calls[crashed]} times"
    assert crashed in {r["execution_id"] for r in await store.list(workflow="itick", status="completed", limit=100)}


async def test_cli_schedules_runs_show_pause_resume(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, agent_host: Any, tmp_path: Path
) -> None:
    """`a2amesh schedules` lists the next fire, pause/resume change it; runs/show list the scheduled runs."""

    async def beat(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"n": input["n"]}

    await agent_host("cbeat", beat)
    folder = write_workflow(tmp_path / "wf", "cron", "1", "cbeat")
    await start_executor(processes, folder, client, "cron")

    async def a_run() -> list[dict[str, Any]] | None:
        code, out, err = await mesh_cli(settings, "runs", "--workflow", "cron", "--json")
        assert code == 0, err
        rows = [r for r in json.loads(out) if r["status"] == "completed"]
        return rows or None

    rows = await eventually(a_run, timeout=15, what="a completed scheduled run listed by `a2amesh runs`")
    run = rows[0]["execution_id"]
    assert run.startswith("sched:cron:main:")
    code, out, err = await mesh_cli(settings, "show", run, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["input"] == {"n": 1}
    assert [(n["path"], n["input"], n["output"]) for n in shown["nodes"]] == [("beat", {"n": 1}, {"n": 1})]

    code, out, err = await mesh_cli(settings, "schedules", "--json")
    assert code == 0, err
    (listed,) = json.loads(out)
    assert listed["id"] == "cron/main"
    assert listed["mode"] == "interval"
    assert listed["describe"] == "every 1 s"
    assert listed["next_fire"] is not None
    assert not listed["paused"]
    code, out, err = await mesh_cli(settings, "schedules")
    assert code == 0, err
    assert "cron/main" in out
    assert "NEXT FIRE" in out

    code, out, err = await mesh_cli(settings, "schedules", "pause", "cron")
    assert code == 0, err
    assert "cron/main: paused" in out
    code, out, err = await mesh_cli(settings, "schedules", "--json")
    (listed,) = json.loads(out)
    assert listed["paused"]
    assert listed["next_fire"] is None
    code, out, err = await mesh_cli(settings, "schedules", "resume", "cron/main", "--json")
    assert code == 0, err
    (resumed,) = json.loads(out)
    assert not resumed["paused"]
    assert resumed["next_fire"] is not None

    code, _, err = await mesh_cli(settings, "schedules", "pause", "nope")
    assert code == 2
    assert "no schedule 'nope'" in err
    code, _, err = await mesh_cli(settings, "schedules", "pause")
    assert code == 2
    assert "NAME or NAME/BRANCH" in err

    code, _, err = await mesh_cli(settings, "schedules", "delete", "cron")
    assert code == 2, err
    assert "'cron' is served by a live executor" in err
    ghost = ScheduleState.new("ghost", parse_schedule("interval", "3600"), now=datetime.now(UTC))
    assert await ScheduleStore(redis, Keys(settings.namespace)).write("ghost/main", None, ghost)
    code, out, err = await mesh_cli(settings, "schedules", "delete", "ghost/main")
    assert code == 0, err
    assert out.strip() == "ghost/main: deleted"
    code, _, err = await mesh_cli(settings, "schedules", "delete", "ghost")
    assert code == 2
    assert "no schedule 'ghost'" in err
