"""The pure workflow engine (SPEC §5.4): scheduling, branching, joins, retries, timeouts, exit handlers."""

from __future__ import annotations

from typing import Any

import pytest

from a2amesh.errors import InvalidTransition
from a2amesh.ids import node_message_id, task_id_for
from a2amesh.workflow.dag.state import DispatchNode, ExecutionState, NodePaused
from a2amesh.workflow.events import NodeSucceeded, RequestReview, ReviewAnswered, TimerFired
from tests.support.enginesim import HANG, Error, Fail, FileResult, Sim, definition


def double(i: dict[str, Any]) -> dict[str, Any]:
    return {"value": i["value"] * 2}


def inc(i: dict[str, Any]) -> dict[str, Any]:
    return {"value": i["value"] + 1}


def echo(i: Any) -> Any:
    return i


SEQUENTIAL = """
input_schema: {type: object, properties: {value: {type: number}}, required: [value]}
nodes:
  - {id: a, type: agent, agent_name: double, input: {value: "{{workflow.input.value}}"}}
  - {id: b, type: agent, agent_name: inc, depends_on: [a], input: {value: "{{a.output.value}}"}}
output_mapping: {result: "{{b.output.value}}", first: "{{a.output.value}}"}
"""


def test_sequential_runs_in_order_and_maps_output() -> None:
    """Nodes run after their dependencies and output_mapping builds the final output."""
    sim = Sim(definition(SEQUENTIAL), {"double": double, "inc": inc})
    state = sim.run({"value": 5})
    assert state.status == "completed"
    assert state.output == {"result": 11, "first": 10}
    assert [d.node_id for d in sim.dispatched] == ["a", "b"]
    assert len(sim.finishes()) == 1


def test_dispatch_carries_deterministic_ids() -> None:
    """Each attempt's messageId comes from (execution, path, iteration, attempt) and the task id from it."""
    sim = Sim(definition(SEQUENTIAL), {"double": double, "inc": inc})
    sim.run({"value": 1})
    first = sim.dispatched[0]
    assert first.message_id == node_message_id("exec-1", "a", 0, 1)
    assert first.task_id == task_id_for("double", first.message_id)
    assert first.call_depth == 1
    assert first.call_chain == ["wf"]


def test_input_schema_rejects_before_any_node() -> None:
    """Input failing input_schema fails the execution with the JSON path, and no node is dispatched."""
    sim = Sim(definition(SEQUENTIAL), {"double": double, "inc": inc})
    state = sim.run({"value": "five"})
    assert state.status == "failed"
    assert "$.value" in (state.error or "")
    assert "input_schema" in (state.error or "")
    assert sim.dispatched == []


def test_output_schema_violation_fails() -> None:
    """An output that breaks output_schema fails the execution naming the path."""
    d = definition(
        SEQUENTIAL.replace("output_mapping", "output_schema: {type: object, required: [missing]}\noutput_mapping")
    )
    sim = Sim(d, {"double": double, "inc": inc})
    state = sim.run({"value": 1})
    assert state.status == "failed"
    assert "output_schema" in (state.error or "")
    assert "missing" in (state.error or "")


PARALLEL = """
nodes:
  - {id: start, type: agent, agent_name: echo, input: {value: 1}}
  - {id: left, type: agent, agent_name: echo, depends_on: [start], input: {side: left}}
  - {id: right, type: agent, agent_name: echo, depends_on: [start], input: {side: right}}
  - {id: end, type: agent, agent_name: echo, depends_on: [left, right],
     input: {l: "{{left.output.side}}", r: "{{right.output.side}}"}}
"""


def test_ready_nodes_dispatch_together() -> None:
    """Nodes whose dependencies are done are dispatched in the same step (in parallel)."""
    sim = Sim(definition(PARALLEL), {"echo": echo})
    sim.start({})
    sim.drive(max_steps=1)
    assert {d.node_id for d in sim.dispatched} == {"start", "left", "right"}
    state = sim.drive()
    assert state.output == {"end": {"l": "left", "r": "right"}}


SWITCH = """
nodes:
  - {id: classify, type: agent, agent_name: echo, input: {size: "{{workflow.input.size}}"}}
  - id: route
    type: switch
    depends_on: [classify]
    cases:
      - {condition: "'{{classify.output.size}}' == 'small'", node: small}
      - {when: "'{{classify.output.size}}' == 'big'", then: big}
    default: other
  - {id: small, type: agent, agent_name: echo, depends_on: [route], input: {r: small}}
  - {id: big, type: agent, agent_name: echo, depends_on: [route], input: {r: big}}
  - {id: other, type: agent, agent_name: echo, depends_on: [route], input: {r: other}}
  - {id: after_small, type: agent, agent_name: echo, depends_on: [small], input: {}}
  - {id: merge, type: agent, agent_name: echo, depends_on: [small, big, other], input: {}}
output_mapping:
  r: {coalesce: ["{{small.output.r}}", "{{big.output.r}}", "{{other.output.r}}"]}
"""


@pytest.mark.parametrize(("size", "taken"), [("small", "small"), ("big", "big"), ("huge", "other")])
def test_switch_takes_one_branch_and_skips_propagate(size: str, taken: str) -> None:
    """A switch runs the first matching case (else default); untaken branches and their descendants are skipped."""
    sim = Sim(definition(SWITCH), {"echo": echo})
    state = sim.run({"size": size})
    assert state.status == "completed"
    assert state.output == {"r": taken}
    for branch in ("small", "big", "other"):
        assert sim.status(branch) == ("completed" if branch == taken else "skipped")
    assert sim.status("after_small") == ("completed" if taken == "small" else "skipped")
    assert sim.status("merge") == "completed", "a join over a taken and untaken branches runs"
    assert state.nodes["route"].output == {"selected": taken, "case": {"small": 0, "big": 1}.get(taken, "default")}


def test_conditional_false_branch_and_when() -> None:
    """A conditional routes to its false branch; `when` false skips a node and its only dependent."""
    d = definition(
        """
nodes:
  - {id: check, type: conditional, condition: "{{workflow.input.n}} > 3", true_branch: hi, false_branch: lo}
  - {id: hi, type: agent, agent_name: echo, depends_on: [check], input: {v: hi}}
  - {id: lo, type: agent, agent_name: echo, depends_on: [check], input: {v: lo}}
  - {id: gated, type: agent, agent_name: echo, when: "{{workflow.input.n}} == 99", input: {}}
  - {id: after_gated, type: agent, agent_name: echo, depends_on: [gated], input: {}}
"""
    )
    sim = Sim(d, {"echo": echo})
    state = sim.run({"n": 1})
    assert state.status == "completed"
    assert [sim.status(n) for n in ("hi", "lo", "gated", "after_gated")] == [
        "skipped",
        "completed",
        "skipped",
        "skipped",
    ]
    assert state.nodes["gated"].reason == "when is false"


def test_condition_error_fails_node_not_silent_false() -> None:
    """A condition that cannot be evaluated fails its node (not a silent false)."""
    d = definition(
        """
nodes:
  - {id: a, type: agent, agent_name: echo, input: {}}
  - {id: b, type: agent, agent_name: echo, depends_on: [a], when: "{{a.output.missing}} > 1", input: {}}
"""
    )
    sim = Sim(d, {"echo": echo})
    state = sim.run({})
    assert state.status == "failed"
    assert state.nodes["b"].status == "failed"
    assert "missing" in (state.nodes["b"].error or "")


MAP = """
nodes:
  - id: each
    type: map
    items: "{{workflow.input.items}}"
    node: work
    concurrency_limit: 2
  - {id: work, type: agent, agent_name: slow, input: {n: "{{_map_item}}", i: "{{_map_index}}"}}
output_mapping: "{{each.output}}"
"""


def test_map_results_in_item_order_and_limit_respected() -> None:
    """Map results come in item order whatever the completion order, and concurrency_limit is never exceeded."""
    sim = Sim(definition(MAP), {"slow": lambda i: i["n"] * 10})
    latencies = iter([5, 1, 3, 1, 2, 1])
    original = sim._answer

    def answer(command: DispatchNode) -> None:
        sim.latency["slow"] = next(latencies)
        original(command)

    sim._answer = answer  # type: ignore[method-assign]
    state = sim.run({"items": [1, 2, 3, 4, 5, 6]})
    assert state.output == {"results": [10, 20, 30, 40, 50, 60]}
    assert sim.max_in_flight["slow"] == 2
    assert [e.data["completed"] for e in sim.events("map.progress")] == [1, 2, 3, 4, 5, 6]


def test_map_empty_list_completes_at_once() -> None:
    """An empty item list completes the map at once with {"results": []}."""
    sim = Sim(definition(MAP), {"slow": echo})
    state = sim.run({"items": []})
    assert state.output == {"results": []}
    assert sim.dispatched == []


def test_map_max_items_and_non_list_fail() -> None:
    """More items than max_items, or items that are not a list, fail the map node."""
    d = definition(MAP.replace("concurrency_limit: 2", "max_items: 3"))
    state = Sim(d, {"slow": echo}).run({"items": [1, 2, 3, 4]})
    assert state.status == "failed"
    assert "max_items 3" in (state.nodes["each"].error or "")
    state = Sim(d, {"slow": echo}).run({"items": "nope"})
    assert "must be a list" in (state.nodes["each"].error or "")


def test_map_with_items_and_with_param_json_text() -> None:
    """withItems takes a literal list; withParam accepts the JSON text of a list."""
    d = definition(
        """
nodes:
  - {id: m1, type: map, withItems: [a, b], node: t1}
  - {id: t1, type: agent, agent_name: echo, input: {x: "{{item}}"}}
  - {id: m2, type: map, withParam: "{{workflow.input.raw}}", node: t2}
  - {id: t2, type: agent, agent_name: echo, input: {x: "{{_map_item.k}}"}}
"""
    )
    state = Sim(d, {"echo": echo}).run({"raw": '[{"k": 1}, {"k": 2}]'})
    assert state.outputs["m1"] == {"results": [{"x": "a"}, {"x": "b"}]}
    assert state.outputs["m2"] == {"results": [{"x": 1}, {"x": 2}]}


def test_map_item_failure_fails_fast_and_cancels_others() -> None:
    """With fail_fast a failing item cancels running siblings and fails the map and the execution."""

    def work(i: dict[str, Any]) -> Any:
        if i["n"] == 2:
            raise Fail("bad item")
        return HANG

    sim = Sim(definition(MAP.replace("concurrency_limit: 2", "concurrency_limit: 3")), {"slow": work})
    state = sim.run({"items": [1, 2, 3, 4]})
    assert state.status == "failed"
    assert "item 1 failed: bad item" in (state.error or "")
    assert {c.path for c in sim.cancelled} == {"each[0]", "each[2]"}
    assert len(sim.dispatched) == 3, "no item is launched after the failure"


LOOP = """
nodes:
  - id: poll
    type: loop
    node: check
    condition: "{{check.output.ready}} == false"
    max_iterations: 5
    delay: 2s
  - {id: check, type: agent, agent_name: status, input: {iteration: "{{_loop_iteration}}"}}
output_mapping: {loop: "{{poll.output}}", last: "{{check.output.iteration}}"}
"""


def test_loop_until_condition_false_with_delay() -> None:
    """A do-while loop re-runs its target while the condition holds, waiting `delay` between iterations."""
    sim = Sim(definition(LOOP), {"status": lambda i: {"iteration": i["iteration"], "ready": i["iteration"] >= 2}})
    state = sim.run({})
    assert state.output == {"loop": {"iterations_completed": 3, "stopped_reason": "condition_false"}, "last": 2}
    starts = [d for d in sim.dispatched]
    assert [d.iteration for d in starts] == [0, 1, 2]
    assert [round(b.message_id != a.message_id) for a, b in zip(starts, starts[1:], strict=False)] == [1, 1]
    assert sim.now >= 1000 + 4, "two delays of 2 s passed"


def test_loop_stops_at_max_iterations() -> None:
    """A loop whose condition never turns false completes at max_iterations (never hangs)."""
    sim = Sim(definition(LOOP), {"status": lambda i: {"iteration": i["iteration"], "ready": False}})
    state = sim.run({})
    assert state.status == "completed"
    assert state.outputs["poll"] == {"iterations_completed": 5, "stopped_reason": "max_iterations"}


FORK_JOIN = """
fail_fast: {ff}
nodes:
  - id: gather
    type: fork
    branches:
      - {{id: a, agent_name: echo, input: {{v: 1}}, output_key: first}}
      - {{id: b, agent_name: echo, input: {{v: 2}}}}
  - {{id: x, type: agent, agent_name: fx, input: {{}}}}
  - {{id: y, type: agent, agent_name: fy, input: {{}}}}
  - {{id: z, type: agent, agent_name: fz, input: {{}}}}
  - {{id: j, type: join, wait_for: [x, y, z], strategy: {strategy}{n}}}
  - {{id: after, type: agent, agent_name: echo, depends_on: [j, gather], input: {{r: "{{{{j.output.completed}}}}"}}}}
"""


def fork_join(strategy: str, n: int | None = None, ff: bool = True) -> Any:
    return definition(FORK_JOIN.format(strategy=strategy, n=f", n: {n}" if n else "", ff=str(ff).lower()))


def test_fork_output_keys() -> None:
    """A fork runs its branches in parallel and outputs {output_key: branch output}."""
    sim = Sim(fork_join("all"), {"echo": echo, "fx": echo, "fy": echo, "fz": echo})
    state = sim.run({})
    assert state.outputs["gather"] == {"first": {"v": 1}, "b": {"v": 2}}


def test_join_any_completes_on_first_success_and_cancels_rest() -> None:
    """join any completes on the first success and cancels the other running members."""
    sim = Sim(fork_join("any"), {"echo": echo, "fx": lambda i: HANG, "fy": lambda i: {"y": 1}, "fz": lambda i: HANG})
    state = sim.run({})
    assert state.status == "completed"
    assert state.outputs["j"] == {"results": {"x": None, "y": {"y": 1}, "z": None}, "completed": ["y"]}
    assert {c.path for c in sim.cancelled} == {"x", "z"}
    assert sim.status("x") == "canceled"


def test_join_n_of_m_tolerates_failure_with_fail_fast() -> None:
    """With fail_fast, a member failure fails the execution only once the join's quorum is unreachable."""
    sim = Sim(
        fork_join("n_of_m", 2),
        {
            "echo": echo,
            "fx": lambda i: (_ for _ in ()).throw(Fail("x broke")),
            "fy": lambda i: {"y": 1},
            "fz": lambda i: {"z": 1},
        },
    )
    sim.latency.update({"fx": 0.01, "fy": 0.5, "fz": 0.6})
    state = sim.run({})
    assert state.status == "completed", state.error
    joined = state.outputs["j"]
    assert isinstance(joined, dict)
    assert joined["completed"] == ["y", "z"]
    assert state.nodes["x"].absorbed


def test_join_quorum_unreachable_fails() -> None:
    """When too many members fail the join fails and (fail_fast) the execution fails."""

    def broke(i: Any) -> Any:
        raise Fail("broke")

    sim = Sim(fork_join("n_of_m", 2), {"echo": echo, "fx": broke, "fy": broke, "fz": lambda i: HANG})
    state = sim.run({})
    assert state.status == "failed"
    assert sim.status("j") == "failed"
    assert "can no longer be satisfied" in (state.error or "")
    assert "z" in {c.path for c in sim.cancelled}


def test_join_all_fails_on_member_failure() -> None:
    """join all cannot tolerate a failed member."""

    def broke(i: Any) -> Any:
        raise Fail("broke")

    state = Sim(fork_join("all"), {"echo": echo, "fx": echo, "fy": broke, "fz": echo}).run({})
    assert state.status == "failed"


def test_fail_fast_cancels_running_siblings() -> None:
    """The first unrecoverable failure cancels running siblings and fails the execution once."""
    d = definition(
        """
nodes:
  - {id: a, type: agent, agent_name: boom, input: {}}
  - {id: b, type: agent, agent_name: hang, input: {}}
  - {id: c, type: agent, agent_name: echo, depends_on: [b], input: {}}
"""
    )

    def boom(i: Any) -> Any:
        raise Fail("kaput")

    sim = Sim(d, {"boom": boom, "hang": lambda i: HANG, "echo": echo})
    state = sim.run({})
    assert state.status == "failed"
    assert state.error == "node 'a' failed: kaput"
    assert [c.path for c in sim.cancelled] == ["b"]
    assert sim.status("c") == "skipped"
    assert len(sim.finishes()) == 1


def test_without_fail_fast_independent_branches_finish() -> None:
    """Without fail_fast, independent branches run to the end before the execution fails."""
    d = definition(
        """
fail_fast: false
nodes:
  - {id: a, type: agent, agent_name: boom, input: {}}
  - {id: after_a, type: agent, agent_name: echo, depends_on: [a], input: {}}
  - {id: b, type: agent, agent_name: echo, input: {}}
  - {id: c, type: agent, agent_name: echo, depends_on: [b], input: {}}
"""
    )

    def boom(i: Any) -> Any:
        raise Fail("kaput")

    sim = Sim(d, {"boom": boom, "echo": echo})
    sim.latency["boom"] = 0.001
    state = sim.run({})
    assert state.status == "failed"
    assert [sim.status(n) for n in ("a", "after_a", "b", "c")] == ["failed", "skipped", "completed", "completed"]
    assert sim.cancelled == []


RETRY = """
retry_strategy: {{limit: 2, retry_policy: {policy}, backoff: {{duration: 1s, factor: 3, max_duration: 2s}}}}
nodes:
  - {{id: a, type: agent, agent_name: flaky, input: {{}}}}
"""


@pytest.mark.parametrize(
    ("policy", "kind", "attempts"),
    [("OnFailure", Fail, 3), ("OnFailure", Error, 1), ("OnError", Error, 3), ("OnError", Fail, 1), ("Always", Fail, 3)],
)
def test_retry_policy_and_backoff(policy: str, kind: type[Exception], attempts: int) -> None:
    """retry_strategy retries per policy with exponential backoff capped at max_duration, each with a new messageId."""

    def flaky(i: Any) -> Any:
        raise kind("nope")

    sim = Sim(definition(RETRY.format(policy=policy)), {"flaky": flaky})
    state = sim.run({})
    assert state.status == "failed"
    assert len(sim.dispatched) == attempts
    assert len({d.message_id for d in sim.dispatched}) == attempts
    assert state.nodes["a"].attempt == attempts
    if attempts == 3:
        delays = [e.data["delay_s"] for e in sim.events("node.retrying")]
        assert delays == [1.0, 2.0]


def test_retry_then_success() -> None:
    """A node that fails once then succeeds completes the execution."""
    calls = []

    def flaky(i: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise Fail("first time")
        return {"ok": True}

    state = Sim(definition(RETRY.format(policy="OnFailure")), {"flaky": flaky}).run({})
    assert state.status == "completed"
    assert state.outputs["a"] == {"ok": True}


def test_node_level_retry_over_workflow_level() -> None:
    """A node's retry_strategy overrides the workflow's."""
    d = definition(
        """
retry_strategy: {limit: 5}
nodes:
  - {id: a, type: agent, agent_name: flaky, input: {}, retry_strategy: {limit: 1}}
"""
    )

    def flaky(i: Any) -> Any:
        raise Fail("nope")

    sim = Sim(d, {"flaky": flaky})
    sim.run({})
    assert len(sim.dispatched) == 2


def test_node_timeout_cancels_callee_and_fails() -> None:
    """A node timeout cancels the callee and fails the node as a call error (OnError retries apply)."""
    d = definition(
        """
nodes:
  - {id: a, type: agent, agent_name: hang, input: {}, timeout: 3s,
     retry_strategy: {limit: 1, retry_policy: OnError}}
"""
    )
    sim = Sim(d, {"hang": lambda i: HANG})
    state = sim.run({})
    assert state.status == "failed"
    assert "timed out after 3s (attempt 2)" in (state.error or "")
    assert [c.task_id for c in sim.cancelled] == [d.task_id for d in sim.dispatched]
    assert sim.now == pytest.approx(1006.0)
    assert all(
        d.deadline == pytest.approx(d_start + 3) for d, d_start in zip(sim.dispatched, (1000.0, 1003.0), strict=True)
    )


def test_workflow_timeout_fails_and_cancels() -> None:
    """The workflow timeout fails the execution and cancels running calls."""
    d = definition("timeout: 10s\nnodes:\n  - {id: a, type: agent, agent_name: hang, input: {}}\n")
    sim = Sim(d, {"hang": lambda i: HANG})
    state = sim.run({})
    assert state.status == "failed"
    assert state.error == "the workflow timed out after 10s"
    assert [c.path for c in sim.cancelled] == ["a"]


EXIT = """
on_exit: {on_success: ok, on_failure: bad, on_cancel: cancelled, always: cleanup}
nodes:
  - {id: work, type: agent, agent_name: work, input: {mode: "{{workflow.input.mode}}"}}
  - {id: ok, type: agent, agent_name: echo, input: {s: "{{workflow.status}}"}}
  - {id: bad, type: agent, agent_name: echo, input: {s: "{{workflow.status}}", e: "{{workflow.error}}"}}
  - {id: cancelled, type: agent, agent_name: echo, input: {s: "{{workflow.status}}"}}
  - {id: cleanup, type: agent, agent_name: echo, input: {s: "{{workflow.status}}"}}
output_mapping: {r: "{{work.output.r}}"}
"""


def work(i: dict[str, Any]) -> Any:
    if i["mode"] == "failure":
        raise Fail("simulated failure")
    if i["mode"] == "hang":
        return HANG
    return {"r": "done"}


def test_exit_handlers_on_success_then_always() -> None:
    """On success the on_success handler runs, then always, both before the single final answer."""
    sim = Sim(definition(EXIT), {"work": work, "echo": echo})
    state = sim.run({"mode": "success"})
    assert state.status == "completed"
    assert state.output == {"r": "done"}
    assert [d.node_id for d in sim.dispatched] == ["work", "ok", "cleanup"]
    assert state.nodes["ok"].output == {"s": "completed"}
    assert sim.events()[-1].event == "execution.completed"


def test_exit_handlers_on_failure_see_error() -> None:
    """On failure the on_failure handler sees workflow.status and workflow.error; the run stays failed."""
    sim = Sim(definition(EXIT), {"work": work, "echo": echo})
    state = sim.run({"mode": "failure"})
    assert state.status == "failed"
    assert [d.node_id for d in sim.dispatched] == ["work", "bad", "cleanup"]
    assert state.nodes["bad"].output == {"s": "failed", "e": "node 'work' failed: simulated failure"}


def test_cancel_cancels_callees_runs_on_cancel_and_finishes_once() -> None:
    """Cancelling cancels running callees, runs on_cancel then always, and finishes once as canceled."""
    sim = Sim(definition(EXIT), {"work": work, "echo": echo})
    sim.start({"mode": "hang"})
    sim.drive()
    state = sim.cancel()
    state = sim.drive()
    assert state.status == "canceled"
    assert [c.path for c in sim.cancelled] == ["work"]
    assert [d.node_id for d in sim.dispatched] == ["work", "cancelled", "cleanup"]
    sim.cancel()
    assert len(sim.finishes()) == 1


def test_exit_handler_failure_keeps_outcome() -> None:
    """A failing exit handler does not turn the execution's outcome around."""

    def echo_or_fail(i: Any) -> Any:
        raise Fail("handler broke")

    state = Sim(definition(EXIT), {"work": work, "echo": echo_or_fail}).run({"mode": "success"})
    assert state.status == "completed"
    assert state.nodes["ok"].status == "failed"


def test_results_applied_once() -> None:
    """A duplicate or stale result (wrong attempt, already applied) changes nothing."""
    sim = Sim(definition(SEQUENTIAL), {"double": lambda i: HANG, "inc": inc})
    sim.start({"value": 1})
    ev = NodeSucceeded(path="a", attempt=1, output={"value": 2})
    state = sim.feed(ev)
    dispatched = len(sim.dispatched)
    again = sim.feed(ev)
    assert again.nodes["a"].output == {"value": 2}
    assert len(sim.dispatched) == dispatched
    stale = sim.feed(NodeSucceeded(path="a", attempt=7, output={"value": 99}))
    assert stale.nodes["a"].output == {"value": 2}
    assert again.model_dump() == state.model_dump(), "a duplicate result changed the state"
    assert stale.model_dump() == state.model_dump(), "a stale result changed the state"


def test_step_does_not_mutate_input_state_and_is_json() -> None:
    """step() returns a new state; the state survives a JSON round trip unchanged."""
    sim = Sim(definition(SEQUENTIAL), {"double": lambda i: HANG, "inc": inc})
    before = sim.start({"value": 1})
    snapshot = before.model_dump_json()
    sim.feed(NodeSucceeded(path="a", attempt=1, output={"value": 2}))
    assert before.model_dump_json() == snapshot
    restored = ExecutionState.model_validate_json(sim.state.model_dump_json())  # type: ignore[union-attr]
    assert restored == sim.state


def test_stale_timer_is_ignored() -> None:
    """A timer that was disarmed (or fires twice) is ignored."""
    d = definition("nodes:\n  - {id: a, type: agent, agent_name: echo, input: {}, timeout: 5s}\n")
    sim = Sim(d, {"echo": echo})
    state = sim.run({})
    assert state.status == "completed"
    assert "timeout:a@1" in sim.cleared()
    assert sim.feed(TimerFired(timer_id="timeout:a@1")) is state


def test_sub_workflow_recursion_and_depth() -> None:
    """A workflow node refuses indirect recursion and calls deeper than max_call_depth."""
    d = definition(
        """
max_call_depth: 2
nodes:
  - {id: sub, type: workflow, workflow_name: parent_wf, input: {}}
""",
        name="child_wf",
    )
    sim = Sim(d, {"parent_wf": echo})
    state = sim.run({}, call_chain=["parent_wf"], call_depth=1)
    assert state.status == "failed"
    assert "recursive workflow call: parent_wf → child_wf → parent_wf" in (state.error or "")
    sim = Sim(d.model_copy(), {"parent_wf": echo})
    state = Sim(
        definition(
            d.to_data() | {"nodes": [{"id": "sub", "type": "workflow", "workflow_name": "other"}]}, name="child_wf"
        ),
        {"other": echo},
    ).run({}, call_depth=2)
    assert state.status == "failed"
    assert "max_call_depth 2" in (state.error or "")


def test_execution_refuses_being_in_its_own_chain() -> None:
    """An execution whose call chain already holds its workflow fails at once."""
    state = Sim(definition(SEQUENTIAL), {"double": double, "inc": inc}).run({"value": 1}, call_chain=["wf"])
    assert state.status == "failed"
    assert "recursive" in (state.error or "")


def test_template_error_fails_node() -> None:
    """A template reading a missing field of a completed node fails the reading node with the path."""
    d = definition(
        """
nodes:
  - {id: a, type: agent, agent_name: echo, input: {x: 1}}
  - {id: b, type: agent, agent_name: echo, depends_on: [a], input: {y: "{{a.output.nope}}"}}
"""
    )
    state = Sim(d, {"echo": echo}).run({})
    assert state.status == "failed"
    assert "a.output has no field 'nope'" in (state.nodes["b"].error or "")


REVIEW = """
timeout: 10
nodes:
  - {id: a, type: agent, agent_name: echo, input: {amount: 5}}
  - id: r
    type: human_review
    depends_on: [a]
    prompt: "Refund {{a.output.amount}}?"
    data: "{{a.output}}"
    edit_schema: {type: object, properties: {amount: {type: number, maximum: 10}}, required: [amount]}
    on_reject: sorry
  - {id: pay, type: agent, agent_name: echo, depends_on: [r], input: "{{r.output}}"}
  - {id: sorry, type: agent, agent_name: echo, depends_on: [r], input: {sorry: true}}
"""


def test_human_review_pauses_and_approve_continues() -> None:
    """A human_review node pauses the execution (timeout stopped) and approve continues with the data."""
    sim = Sim(definition(REVIEW), {"echo": echo})
    state = sim.run({})
    assert state.status == "paused"
    assert state.nodes["r"].status == "waiting_input"
    assert "execution_timeout" not in state.timers
    [review] = [c for c in sim.commands if isinstance(c, RequestReview)]
    assert review.review["prompt"] == "Refund 5?"
    assert review.review["data"] == {"amount": 5}
    sim.now += 100  # paused time does not count against the 10 s timeout
    state = sim.feed(ReviewAnswered(decision="approve"))
    assert "execution_timeout" in state.timers
    state = sim.drive()
    assert state.status == "completed"
    assert state.nodes["pay"].output == {"amount": 5}
    assert state.nodes["sorry"].status == "skipped"


def test_human_review_edit_is_validated() -> None:
    """An edit that breaks edit_schema is refused with its path and leaves the state paused; a valid one is used."""
    sim = Sim(definition(REVIEW), {"echo": echo})
    state = sim.run({})
    with pytest.raises(InvalidTransition, match=r"\$.amount: 50 is greater than the maximum of 10"):
        sim.engine.step(state, ReviewAnswered(decision="edit", data={"amount": 50}), sim.now)
    sim.feed(ReviewAnswered(decision="edit", data={"amount": 7}))
    state = sim.drive()
    assert state.nodes["pay"].output == {"amount": 7}


def test_human_review_reject_takes_on_reject() -> None:
    """Reject runs the on_reject node and skips the other dependents; without on_reject it fails."""
    sim = Sim(definition(REVIEW), {"echo": echo})
    sim.run({})
    sim.feed(ReviewAnswered(decision="reject", reason="too much"))
    state = sim.drive()
    assert state.status == "completed"
    assert state.nodes["sorry"].status == "completed"
    assert state.nodes["pay"].status == "skipped"
    plain = Sim(definition('nodes: [{id: r, type: human_review, prompt: "ok?"}]'), {})
    plain.run({})
    state = plain.feed(ReviewAnswered(decision="reject", reason="no"))
    assert state.status == "failed"
    assert "rejected by the reviewer: no" in (state.error or "")


def test_human_review_timeout_default_decision() -> None:
    """A review's own timeout applies on_timeout (approve here; fail by default)."""
    text = 'nodes: [{id: r, type: human_review, prompt: "ok?", data: {x: 1}, timeout: 5, on_timeout: approve}]'
    sim = Sim(definition(text), {})
    state = sim.run({})
    assert state.status == "completed"
    assert state.nodes["r"].output == {"x": 1}
    failing = Sim(definition('nodes: [{id: r, type: human_review, prompt: "ok?", timeout: 5}]'), {})
    state = failing.run({})
    assert state.status == "failed"
    assert "the review timed out after 5s" in (state.error or "")


def test_callee_pause_bubbles_and_resume_is_forwarded() -> None:
    """A callee asking for input pauses its node with the full path; a resume continues the callee's task."""
    sim = Sim(
        definition("nodes: [{id: sub, type: workflow, workflow_name: child, input: {}}]"), {"child": lambda i: HANG}
    )
    sim.start({})
    [call] = sim.calls("child")
    review = {"type": "review_request", "path": "check", "prompt": "ok?", "data": 1, "edit_schema": None}
    state = sim.feed(NodePaused(path="sub", attempt=1, review=review, task_id=call.task_id))
    assert state.status == "paused"
    [request] = [c for c in sim.commands if isinstance(c, RequestReview)]
    assert request.path == "sub/check"
    with pytest.raises(InvalidTransition, match="no review waits at path 'other'"):
        sim.engine.step(state, ReviewAnswered(decision="approve", path="other"), sim.now)
    state = sim.feed(ReviewAnswered(decision="approve", path="sub/check"))
    assert state.status == "running"
    forward = sim.dispatched[-1]
    assert forward.resume == {"decision": "approve", "data": None, "path": "check"}
    assert forward.task_id == call.task_id
    assert forward.message_id != call.message_id
    state = sim.feed(NodeSucceeded(path="sub", attempt=1, output={"ok": True}))
    assert state.status == "completed"


def test_retry_reuses_outputs() -> None:
    """A retry execution takes reused nodes as completed and runs only the rest."""
    sim = Sim(definition(SEQUENTIAL), {"double": double, "inc": inc})
    state = sim.run({"value": 5}, reuse={"a": {"value": 100}}, reused_from="old")
    assert state.output == {"result": 101, "first": 100}
    assert [d.node_id for d in sim.dispatched] == ["b"]


def test_default_output_is_leaf_outputs() -> None:
    """Without output_mapping the output is {id: output} of the DAG's leaves that completed."""
    state = Sim(definition(PARALLEL), {"echo": echo}).run({})
    assert state.output == {"end": {"l": "left", "r": "right"}}


def test_nested_map_of_loops_scopes_target_output_per_item() -> None:
    """A loop inside a map reads its own target's latest output, per item."""
    d = definition(
        """
nodes:
  - {id: each, type: map, items: "{{workflow.input.starts}}", node: count}
  - {id: count, type: loop, node: step, condition: "{{step.output.n}} < 3", max_iterations: 10}
  - {id: step, type: agent, agent_name: inc, input: {value: "{{_map_item}}", it: "{{_loop_iteration}}"}}
"""
    )
    sim = Sim(d, {"inc": lambda i: {"n": i["value"] + i["it"]}})
    state = sim.run({"starts": [0, 2, 5]})
    assert state.status == "completed"
    assert state.outputs["each"] == {
        "results": [
            {"iterations_completed": 4, "stopped_reason": "condition_false"},
            {"iterations_completed": 2, "stopped_reason": "condition_false"},
            {"iterations_completed": 1, "stopped_reason": "condition_false"},
        ]
    }


FILE_REF = {"raw": "AAEC", "filename": "a.bin", "mediaType": "application/octet-stream"}
FILE_FLOW = """
nodes:
  - {id: f, type: agent, agent_name: files}
  - {id: d, type: agent, agent_name: data}
output_mapping: OUTPUT
"""


@pytest.mark.parametrize(
    ("mapping", "is_file"),
    [
        ('"{{f.output}}"', True),  # the file result passed through
        ('"{{d.output}}"', False),  # data of the same shape: what the callee answered decides, not the shape
        ('{x: "{{f.output}}"}', False),  # data built around a file result
        ('"{{f.output.filename}}"', False),  # a template over a file's field is its value
    ],
)
def test_output_is_a_file_only_when_a_file_result_passes_through(mapping: str, is_file: bool) -> None:
    """``output_file`` is set when the output is a node's file result as it came, and never for data that merely
    looks like one."""
    agents = {"files": lambda _: FileResult(dict(FILE_REF)), "data": lambda _: dict(FILE_REF)}
    sim = Sim(definition(FILE_FLOW.replace("OUTPUT", mapping)), agents)
    state = sim.run({})
    assert state.status == "completed"
    assert state.output_file is is_file
    assert state.nodes["f"].file
    assert not state.nodes["d"].file
    assert ExecutionState.model_validate_json(state.model_dump_json()).output_file is is_file  # kept in checkpoints


def test_a_map_items_file_result_passes_through() -> None:
    """``{{each.output.results.1}}`` is the file result of the map's item 1: the output is a file."""
    files = [{"url": f"https://example.com/{n}.pdf", "filename": f"{n}.pdf"} for n in range(3)]
    mapping = MAP.replace('output_mapping: "{{each.output}}"', 'output_mapping: "{{each.output.results.1}}"')
    sim = Sim(definition(mapping), {"slow": lambda i: FileResult(files[i["i"]])})
    state = sim.run({"items": [0, 1, 2]})
    assert state.output == files[1]
    assert state.output_file
