"""Workflow semantics end to end over real NATS + Valkey (in-process executor and agents)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from a2amesh.client import Client, make_message
from a2amesh.protocol import TaskState
from tests.support.cancelling import check_get_task_answered_while_cancelling
from tests.support.waiting import eventually, within


async def echo(input: Any, ctx: Any) -> Any:
    return input


def message_of(task: Any) -> str:
    return task.status.message.text() if task.status.message else ""


@pytest.mark.alone  # asserts a wall-clock bound
async def test_map_limit_gauge_order_and_empty(agent_host: Any, executor: Any, client: Client) -> None:
    """A map never exceeds concurrency_limit (agent-side gauge), keeps item order, and completes empty at once."""
    gauge = {"now": 0, "max": 0}

    async def work(input: dict[str, Any], ctx: Any) -> Any:
        gauge["now"] += 1
        gauge["max"] = max(gauge["max"], gauge["now"])
        try:
            await asyncio.sleep(0.05 * (5 - input["n"] % 5))
            return {"n": input["n"] * 10}
        finally:
            gauge["now"] -= 1

    await agent_host("work", work, max_concurrency=16)
    await executor(
        {
            "m": """
name: m
nodes:
  - {id: each, type: map, items: "{{workflow.input.items}}", node: one, concurrency_limit: 3}
  - {id: one, type: agent, agent_name: work, input: {n: "{{_map_item}}"}}
output_mapping: "{{each.output.results}}"
"""
        }
    )
    await client.registry.wait_for("m", 5)
    task = await within(client.send("m", {"items": list(range(10))}), 20, "the map")
    assert task.status.state == TaskState.COMPLETED, message_of(task)
    assert task.output() == [{"n": n * 10} for n in range(10)]
    assert gauge["max"] == 3
    started = time.monotonic()
    task = await within(client.send("m", {"items": []}), 5, "the empty map")
    assert task.output() == []
    assert time.monotonic() - started < 1


async def test_switch_after_map_and_skips(agent_host: Any, executor: Any, client: Client) -> None:
    """A map feeding a switch routes on the map's results; untaken branches are skipped."""
    await agent_host("echo", echo)
    await executor(
        {
            "ms": """
name: ms
nodes:
  - {id: each, type: map, withItems: [1, 2, 3], node: one}
  - {id: one, type: agent, agent_name: echo, input: {v: "{{_map_item}}"}}
  - id: route
    type: switch
    depends_on: [each]
    cases:
      - {condition: "len({{each.output.results}}) > 2", node: many}
    default: few
  - {id: many, type: agent, agent_name: echo, depends_on: [route], input: {r: many}}
  - {id: few, type: agent, agent_name: echo, depends_on: [route], input: {r: few}}
output_mapping: {r: {coalesce: ["{{many.output.r}}", "{{few.output.r}}"]}}
"""
        }
    )
    await client.registry.wait_for("ms", 5)
    task = await within(client.send("ms", {}), 10, "the answer")
    assert task.output() == {"r": "many"}


async def test_join_any_cancels_losers_on_the_agent(agent_host: Any, executor: Any, client: Client) -> None:
    """join any completes on the first success and the losers' tasks end TASK_STATE_CANCELED at their agent.

    A loser whose cancel reaches the agent before its task is pulled never runs its handler; one that was
    running has its handler cancelled. Either way no handler is left sleeping and both tasks end canceled.
    """
    started: list[str] = []
    cancelled: list[str] = []

    async def fast(input: Any, ctx: Any) -> Any:
        return {"who": "fast"}

    async def slow(input: Any, ctx: Any) -> Any:
        started.append(ctx.task_id)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(ctx.task_id)
            raise
        return {}

    await agent_host("fast", fast)
    await agent_host("slow", slow)
    await executor(
        {
            "j": """
name: j
nodes:
  - {id: a, type: agent, agent_name: slow}
  - {id: b, type: agent, agent_name: fast}
  - {id: c, type: agent, agent_name: slow}
  - {id: first, type: join, wait_for: [a, b, c], strategy: any}
output_mapping: "{{first.output}}"
"""
        }
    )
    await client.registry.wait_for("j", 5)
    task = await within(client.send("j", {}), 10, "the join")
    assert task.output() == {"results": {"a": None, "b": {"who": "fast"}, "c": None}, "completed": ["b"]}

    async def losers_canceled() -> bool:
        tasks = (await client.list_tasks("slow")).tasks
        return len(tasks) == 2 and all(t.status.state == TaskState.CANCELED for t in tasks)

    await eventually(losers_canceled, timeout=5, what="both slow tasks to end TASK_STATE_CANCELED at the agent")
    await eventually(
        lambda: sorted(cancelled) == sorted(started), timeout=3, what="every started slow handler to be cancelled"
    )
    for task_id in started:
        got = await client.get_task("slow", task_id)
        assert got.status.state == TaskState.CANCELED


@pytest.mark.alone  # asserts a wall-clock bound
async def test_retry_then_success_and_node_timeout(agent_host: Any, executor: Any, client: Client) -> None:
    """A flaky node is retried with backoff until it succeeds; a node timeout cancels its callee and fails."""
    attempts: list[int] = []

    async def flaky(input: Any, ctx: Any) -> Any:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("not yet")
        return {"ok": len(attempts)}

    cancelled = asyncio.Event()

    async def stuck(input: Any, ctx: Any) -> Any:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    await agent_host("flaky", flaky)
    await agent_host("stuck", stuck)
    await executor(
        {
            "r": """
name: r
nodes:
  - {id: a, type: agent, agent_name: flaky,
     retry_strategy: {limit: 3, retry_policy: OnFailure, backoff: {duration: 0.1, factor: 2}}}
output_mapping: "{{a.output}}"
""",
            "t": "name: t\nnodes:\n  - {id: a, type: agent, agent_name: stuck, timeout: 1s}\n",
        }
    )
    await client.registry.wait_for("t", 5)
    task = await within(client.send("r", {}), 10, "the retried node")
    assert task.output() == {"ok": 3}
    started = time.monotonic()
    task = await within(client.send("t", {}), 5, "the timed out node")
    assert task.status.state == TaskState.FAILED
    assert "timed out after 1s" in message_of(task)
    assert time.monotonic() - started < 2.5
    await within(cancelled.wait(), 3, "the callee to be cancelled")


async def test_loop_polls_until_ready(agent_host: Any, executor: Any, client: Client) -> None:
    """A loop re-runs its target with delay until the condition is false, and stops at max_iterations."""

    async def status(input: dict[str, Any], ctx: Any) -> Any:
        return {"iteration": input["iteration"], "ready": input["iteration"] >= input["target"]}

    await agent_host("status", status)
    loop = """
name: {name}
nodes:
  - {{id: poll, type: loop, node: check, condition: "{{{{check.output.ready}}}} == false",
     max_iterations: 4, delay: 0.1s}}
  - {{id: check, type: agent, agent_name: status,
     input: {{iteration: "{{{{_loop_iteration}}}}", target: "{{{{workflow.input.target}}}}"}}}}
output_mapping: {{loop: "{{{{poll.output}}}}", last: "{{{{check.output.iteration}}}}"}}
"""
    await executor({"loop": loop.format(name="loop")})
    await client.registry.wait_for("loop", 5)
    task = await within(client.send("loop", {"target": 2}), 10, "the loop")
    assert task.output() == {"loop": {"iterations_completed": 3, "stopped_reason": "condition_false"}, "last": 2}
    task = await within(client.send("loop", {"target": 99}), 10, "the capped loop")
    assert task.output() == {"loop": {"iterations_completed": 4, "stopped_reason": "max_iterations"}, "last": 3}


async def test_exit_handlers_run_before_answer(agent_host: Any, executor: Any, client: Client) -> None:
    """on_failure and always handlers run (and finish) before the single final answer of a failed run."""
    seen: list[str] = []

    async def boom(input: Any, ctx: Any) -> Any:
        raise RuntimeError("simulated failure")

    async def note(input: dict[str, Any], ctx: Any) -> Any:
        await asyncio.sleep(0.1)
        seen.append(input["s"])
        return {}

    await agent_host("boom", boom)
    await agent_host("note", note)
    await executor(
        {
            "x": """
name: x
on_exit: {on_failure: bad, always: cleanup}
nodes:
  - {id: work, type: agent, agent_name: boom}
  - {id: bad, type: agent, agent_name: note, input: {s: "failure:{{workflow.status}}"}}
  - {id: cleanup, type: agent, agent_name: note, input: {s: "cleanup"}}
"""
        }
    )
    await client.registry.wait_for("x", 5)
    task = await within(client.send("x", {}), 10, "the answer")
    assert task.status.state == TaskState.FAILED
    assert "simulated failure" in message_of(task)
    assert seen == ["failure:failed", "cleanup"]


async def test_sub_workflow_composition_and_recursion(agent_host: Any, executor: Any, client: Client) -> None:
    """A workflow node calls another workflow over the mesh; indirect recursion fails clearly."""

    async def plus10(input: dict[str, Any], ctx: Any) -> Any:
        return {"value": input["value"] + 10}

    await agent_host("plus10", plus10)
    await executor(
        {
            "child": """
name: child
nodes:
  - {id: t, type: agent, agent_name: plus10, input: {value: "{{workflow.input.value}}"}}
output_mapping: {value: "{{t.output.value}}"}
""",
            "parent": """
name: parent
nodes:
  - {id: sub, type: workflow, workflow_name: child, input: {value: "{{workflow.input.value}}"}}
  - {id: again, type: workflow, workflow_name: child, depends_on: [sub], input: {value: "{{sub.output.value}}"}}
output_mapping: {value: "{{again.output.value}}"}
""",
            "ping": "name: ping\nnodes:\n  - {id: p, type: workflow, workflow_name: pong}\n",
            "pong": "name: pong\nnodes:\n  - {id: p, type: workflow, workflow_name: ping}\n",
        }
    )
    await client.registry.wait_for("parent", 5)
    task = await within(client.send("parent", {"value": 1}), 10, "the composed workflow")
    assert task.output() == {"value": 21}
    task = await within(client.send("ping", {}), 10, "the recursion failure")
    assert task.status.state == TaskState.FAILED
    assert "recursive workflow call: ping → pong → ping" in message_of(task)


@pytest.mark.alone  # asserts a wall-clock bound
async def test_cancel_reaches_callees_through_sub_workflow(agent_host: Any, executor: Any, client: Client) -> None:
    """Cancelling a parent execution cancels the sub-workflow's running callee (TASK_STATE_CANCELED) within 2 s."""
    running: dict[str, str] = {}
    stopped = asyncio.Event()

    async def slow(input: Any, ctx: Any) -> Any:
        running["task"] = ctx.task_id
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return {}

    await agent_host("slow", slow)
    await executor(
        {
            "inner": "name: inner\nnodes:\n  - {id: s, type: agent, agent_name: slow}\n",
            "outer": "name: outer\nnodes:\n  - {id: w, type: workflow, workflow_name: inner}\n",
        }
    )
    await client.registry.wait_for("outer", 5)
    call = await client.dispatch("outer", make_message(data={}))
    await eventually(lambda: "task" in running, timeout=10, what="the leaf callee to start")
    started = time.monotonic()
    await client.cancel_task("outer", call.task_id)
    await within(stopped.wait(), 2, "the leaf callee to stop")
    leaf = await eventually(
        lambda: _state(client, "slow", running["task"]), timeout=2, what="the leaf task to be CANCELED"
    )
    assert leaf == TaskState.CANCELED
    assert time.monotonic() - started < 2
    final = await within(call.result(), 5, "the parent's answer")
    assert final.status.state == TaskState.CANCELED


async def _state(client: Client, agent: str, task_id: str) -> TaskState | None:
    task = await client.get_task(agent, task_id)
    return task.status.state if task.status.state == TaskState.CANCELED else None


@pytest.mark.alone  # asserts a wall-clock bound
async def test_agent_down_fails_within_timeout_and_runs_nothing_later(
    agent_host: Any, executor: Any, client: Client, bus: Any
) -> None:
    """A node whose agent is not consuming fails within timeout + 1 s; the agent started later runs nothing."""
    from a2amesh.bus.setup import ensure_consumer
    from a2amesh.protocol import AgentCapabilities, AgentCard, AgentExtension, codes
    from a2amesh.registry import CardPublisher

    card = AgentCard(
        name="late",
        capabilities=AgentCapabilities(extensions=[AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": "agent"})]),
    )
    await CardPublisher(bus, card, instance="ghost", card_ttl=client.settings.card_ttl).publish()
    await ensure_consumer(bus, client.settings, "late", max_ack_pending=10)
    await executor({"w": "name: w\nnodes:\n  - {id: a, type: agent, agent_name: late, timeout: 1s}\n"})
    await client.registry.wait_for("w", 5)
    started = time.monotonic()
    task = await within(client.send("w", {}), 5, "the failure")
    assert task.status.state == TaskState.FAILED
    assert time.monotonic() - started < 2.0
    ran: list[Any] = []

    async def late(input: Any, ctx: Any) -> Any:
        ran.append(input)
        return {}

    await asyncio.sleep(1.5)  # let the request's A2A-Deadline pass beyond the tolerated clock skew
    host = await agent_host("late", late)
    info = await bus.jsm.consumer_info(bus.subjects.tasks_stream, "late")
    await eventually(lambda: _drained(bus), timeout=10, what="the late agent to take the stale request off the queue")
    assert ran == []
    del host, info


async def _drained(bus: Any) -> bool:
    info = await bus.jsm.consumer_info(bus.subjects.tasks_stream, "late")
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)


async def test_hot_reload_keeps_running_execution_on_old_version(
    agent_host: Any, executor: Any, client: Client, tmp_path: Any
) -> None:
    """A definition changed while an execution runs: it finishes on its version; new executions use the new one."""
    gate = asyncio.Event()

    async def wait_gate(input: Any, ctx: Any) -> Any:
        await gate.wait()
        return {"v": input["v"]}

    await agent_host("gate", wait_gate)
    folder = tmp_path / "reload"
    folder.mkdir()
    path = folder / "rl.yaml"
    path.write_text("name: rl\nnodes:\n  - {id: a, type: agent, agent_name: gate, input: {v: old}}\n")
    ex = await executor(folder, reload_interval=0.1)
    await client.registry.wait_for("rl", 5)
    first = await client.dispatch("rl", make_message(data={}))
    await eventually(lambda: ex.runners, timeout=5, what="the first execution to run")
    old_digest = ex.catalog.workflows["rl"].digest
    path.write_text("name: rl\nnodes:\n  - {id: b, type: agent, agent_name: gate, input: {v: new}}\n")
    await eventually(
        lambda: ex.catalog.workflows["rl"].digest != old_digest, timeout=5, what="the definition to reload"
    )
    second = await client.dispatch("rl", make_message(data={}))
    gate.set()
    assert (await within(first.result(), 10, "the first run")).output() == {"a": {"v": "old"}}
    assert (await within(second.result(), 10, "the second run")).output() == {"b": {"v": "new"}}
    card = client.registry.get("rl")
    assert card is not None
    assert card.workflow_definition is not None
    assert card.workflow_definition["nodes"][0]["id"] == "b"


async def test_takeover_after_lease_loss_resumes_in_flight_call(agent_host: Any, executor: Any, client: Client) -> None:
    """A replica that stops renewing loses its execution; another takes over the in-flight call and finishes once."""
    gate = asyncio.Event()
    runs: list[str] = []

    async def held(input: Any, ctx: Any) -> Any:
        runs.append(ctx.task_id)
        await gate.wait()
        return {"done": True}

    await agent_host("held", held)
    definitions = {
        "tk": "name: tk\nnodes:\n  - {id: a, type: agent, agent_name: held}\n"
        "  - {id: b, type: agent, agent_name: held, depends_on: [a]}\n"
    }
    first = await executor(definitions)
    await client.registry.wait_for("tk", 5)
    call = await client.dispatch("tk", make_message(data={}), stream=True)
    await eventually(lambda: runs, timeout=5, what="node a to start")
    execution_id = call.task_id
    runner = first.runners[execution_id]
    # simulate a frozen owner: stop its lease renewals and its runner without releasing the lease
    first.background.cancel()
    first.drivers.tasks[execution_id].cancel()
    second = await executor(definitions)
    await eventually(lambda: execution_id in second.runners, timeout=8, what="the takeover")
    assert second.runners[execution_id].epoch == runner.epoch + 1
    gate.set()
    final = await within(call.result(), 10, "the final answer after the takeover")
    assert final.status.state == TaskState.COMPLETED
    assert len(runs) == 2, "node a ran once (the re-dispatch found the running task), then node b"


async def test_get_task_is_answered_while_a_cancel_waits_for_on_cancel(
    agent_host: Any, executor: Any, client: Client
) -> None:
    """A CancelTask waiting for the execution's on_cancel handler holds up no other control request."""
    started = asyncio.Event()
    cleaning = asyncio.Event()
    release = asyncio.Event()

    async def slow(input: Any, ctx: Any) -> Any:
        started.set()
        await asyncio.sleep(60)
        return {}

    async def cleanup(input: Any, ctx: Any) -> Any:
        cleaning.set()
        await release.wait()
        return {"cleaned": True}

    await agent_host("slow", slow)
    await agent_host("cleanup", cleanup)
    await executor(
        {
            "guarded": """
name: guarded
nodes:
  - {id: work, type: agent, agent_name: slow}
  - {id: tidy, type: agent, agent_name: cleanup}
on_exit: {on_cancel: tidy}
"""
        }
    )
    await client.registry.wait_for("guarded", 5)
    call = await client.dispatch("guarded", make_message(data={}))
    await within(started.wait(), 10, "the work node to start")
    await check_get_task_answered_while_cancelling(client, "guarded", call, stopping=cleaning, release=release)
