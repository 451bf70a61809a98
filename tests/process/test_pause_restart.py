"""Paused executions with every process restarted, resumed or cancelled through the CLI (SPEC §7, §9)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.store.redis import Redis
from tests.process.test_executor_processes import (
    start_executor,
    tkey,
    write_behaviour_agent,
    write_definitions,
)
from tests.support.cli import mesh_cli
from tests.support.processes import Proc, ProcessFactory
from tests.support.waiting import eventually

REVIEWED = """
name: reviewed
nodes:
  - {id: first, type: agent, agent_name: tag, input: {x: "{{workflow.input.x}}"}}
  - id: review
    type: human_review
    depends_on: [first]
    prompt: "Use {{first.output.x}}?"
    data: "{{first.output}}"
    edit_schema: {type: object, required: [x], properties: {x: {type: integer, maximum: 100}}}
  - {id: second, type: agent, agent_name: tag, depends_on: [review], input: {y: "{{review.output.x}}"}}
  - {id: cleanup, type: agent, agent_name: tag, input: {canceled: true}}
on_exit: {on_cancel: cleanup}
output_mapping: {y: "{{second.output.y}}"}
"""


async def _mesh(processes: ProcessFactory, client: Client, tmp_path: Path) -> tuple[Proc, Proc]:
    """Start the tag agent and an executor serving ``reviewed`` as OS processes."""
    agent = await processes.start("agent", str(write_behaviour_agent(tmp_path, "tag", "tag")))
    await eventually(lambda: client.registry.get("tag") is not None, timeout=20, what="the agent card")
    folder = write_definitions(tmp_path / "wf", {"reviewed": REVIEWED})
    return agent, await start_executor(processes, folder, client, "reviewed")


async def _run_until_paused(settings: Settings) -> str:
    """``a2amesh run`` a reviewed execution; it stops at the review and exits 0. Returns the run id."""
    code, out, err = await mesh_cli(settings, "run", "reviewed", "--input", '{"x": 7}')
    assert code == 0, err
    assert "⏸ paused for a review at review" in err
    assert "a2amesh resume" in err
    assert json.loads(out) == {"x": 7}
    return err.split("→ run ", 1)[1].split()[0]


async def test_paused_run_survives_restart_of_every_process_and_resumes_by_cli(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """Pause, SIGTERM the executor and the agent, restart both; `a2amesh resume --edit` finishes the run."""
    agent, executor = await _mesh(processes, client, tmp_path)
    run_id = await _run_until_paused(settings)
    code, out, _ = await mesh_cli(settings, "show", run_id, "--json")
    assert json.loads(out)["status"] == "paused"

    for proc in (executor, agent):
        proc.signal(signal.SIGTERM)
    for proc in (executor, agent):
        await proc.wait(20)
    await eventually(
        lambda: client.registry.get("tag") is None and client.registry.get("reviewed") is None,
        timeout=15,
        what="the stopped processes' cards to go",
    )
    await _mesh(processes, client, tmp_path)

    code, _, err = await mesh_cli(settings, "resume", run_id, "--edit", '{"x": 500}')
    assert code == 2, err
    lines = err.strip().splitlines()
    assert "500 is greater than the maximum of 100" in lines[-1], err
    assert "Traceback" not in err
    code, _, err = await mesh_cli(settings, "resume", run_id, "--edit", "{not json")
    assert code == 2, err

    code, out, err = await mesh_cli(settings, "resume", run_id[:14], "--edit", '{"x": 9}')
    assert code == 0, err
    assert json.loads(out) == {"y": 9}
    assert "✓ second" in err
    assert await redis.hgetall(tkey(settings, "runs")) == {"first": "1", "second": "1"}

    code, _, err = await mesh_cli(settings, "resume", run_id, "--approve")
    assert code == 2
    assert "is completed, not paused for a review" in err


async def test_cancel_of_a_paused_run_after_restart_runs_on_cancel(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """`a2amesh cancel` of a paused run (executor killed and restarted meanwhile) cancels it; on_cancel runs."""
    _, executor = await _mesh(processes, client, tmp_path)
    run_id = await _run_until_paused(settings)
    executor.signal(signal.SIGKILL)
    await executor.wait(10)
    folder = tmp_path / "wf"
    await start_executor(processes, folder, client, "reviewed")

    code, out, err = await mesh_cli(settings, "cancel", run_id)
    assert code == 0, err
    assert out.strip() == f"{run_id}: cancelled"
    assert await redis.hgetall(tkey(settings, "runs")) == {"first": "1", "cleanup": "1"}
    code, out, _ = await mesh_cli(settings, "show", run_id, "--json")
    assert json.loads(out)["status"] == "cancelled"
    code, _, err = await mesh_cli(settings, "resume", run_id, "--reject")
    assert code == 2
    assert "is cancelled, not paused" in err
