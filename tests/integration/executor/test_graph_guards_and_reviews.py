"""Graph guards, HUMAN_HANDOFF, conversations, tool routing and nested reviews over real NATS + Valkey."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import RpcError
from a2amesh.executor.starts import TURN_START_GRACE
from a2amesh.protocol import Task, TaskState
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.support.refund import pay, propose, refund_workflow
from tests.support.waiting import eventually, within


def _graph(
    name: str, nodes: list[tuple[str, str, str | None]], edges: list[tuple[str, str | None, str]], **top: Any
) -> str:
    """A graph definition (seed 000 format) as JSON text: nodes ``(id, type, agent)``, edges ``(src, dst, cond)``."""
    return json.dumps(
        {
            "name": name,
            "entrypointNodeId": nodes[0][0],
            "nodes": [
                {"id": i, "nodeType": t, "nodeName": i, **({"agentId": a} if a else {}), **top.pop(f"node_{i}", {})}
                for i, t, a in nodes
            ],
            "edges": [
                {
                    "id": f"e{n}",
                    "sourceNodeId": src,
                    "targetNodeId": dst,
                    "conditionType": "ALWAYS" if cond == "*" else "CONDITIONAL",
                    **({} if cond == "*" else {"conditionValue": cond}),
                }
                for n, (src, dst, cond) in enumerate(edges)
            ],
            **top,
        }
    )


def _text(task: Task) -> str:
    return task.status.message.text() if task.status.message else ""


def _review(task: Task) -> dict[str, Any]:
    message = task.status.message
    assert message is not None, task.status
    return next(p.data for p in message.parts if isinstance(p.data, dict) and p.data.get("type") == "review_request")


def _resume(task_id: str, decision: str, **body: Any) -> Any:
    return make_message(data={"decision": decision, **body}, task_id=task_id)


# --- guards, HUMAN_HANDOFF -------------------------------------------------------------------


async def again(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"next": "again", "message": "once more"}


async def wrap(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    last = input["messages"][-1]
    return {"next": "END", "message": {"wrapped": last.get("content")}}


async def test_step_limit_without_handoff_fails_naming_the_guard(
    agent_host: Any, executor: Any, client: Client
) -> None:
    """An agent that loops forever trips stepLimit; with no HUMAN_HANDOFF the run fails naming the guard."""
    await agent_host("again", again)
    await executor({"looping": _graph("looping", [("A", "AGENT", "again")], [("A", "A", "again")], stepLimit=3)})
    await client.registry.wait_for("looping", 5)
    task = await within(client.send("looping", make_message("go")), 15, "the failed run")
    assert task.status.state == TaskState.FAILED, task.status
    assert "stepLimit 3 reached" in _text(task)


HANDOFF_ON_TIMEOUT = _graph(
    "slow_graph",
    [("A", "AGENT", "stuck"), ("H", "HUMAN_HANDOFF", None), ("W", "AGENT", "wrap")],
    [("A", None, "END"), ("H", "W", "*"), ("W", None, "END")],
    timeout=0.5,
    onLimit={"timeout": "H"},
    node_H={"prompt": "the graph is slow; carry on?"},
)


async def test_timeout_routes_to_human_handoff_and_resume_continues(
    agent_host: Any, executor: Any, client: Client
) -> None:
    """The timeout guard pauses at the HUMAN_HANDOFF (review_request naming the guard); approve continues to END."""
    never = asyncio.Event()

    async def stuck(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        await never.wait()
        return {"next": "END", "message": "late"}

    await agent_host("stuck", stuck)
    await agent_host("wrap", wrap)
    await executor({"slow_graph": HANDOFF_ON_TIMEOUT})
    await client.registry.wait_for("slow_graph", 5)
    task = await within(client.send("slow_graph", make_message("hi")), 15, "the paused run")
    assert task.status.state == TaskState.INPUT_REQUIRED, task.status
    review = _review(task)
    assert review["prompt"] == "the graph is slow; carry on?"
    assert review["data"]["guard"] == "timeout", review
    assert "timeout 0.5s reached" in review["data"]["reason"]
    done = await within(client.send("slow_graph", _resume(task.id, "approve")), 15, "the resumed run")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert isinstance(done.output(), dict)
    assert "wrapped" in done.output()


async def ask_human(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"next": "human", "message": "please check"}


HANDOFF = _graph(
    "handoff",
    [("A", "AGENT", "ask_human"), ("H", "HUMAN_HANDOFF", None), ("W", "AGENT", "wrap")],
    [("A", "H", "human"), ("H", "W", "*"), ("W", None, "END")],
    node_H={
        "prompt": "what should we say?",
        "editSchema": {"type": "object", "required": ["say"], "properties": {"say": {"type": "string"}}},
    },
)


async def test_human_handoff_edit_is_validated_then_continues(agent_host: Any, executor: Any, client: Client) -> None:
    """An agent routes to HUMAN_HANDOFF; a bad edit is refused (state unchanged), a good one reaches the next agent."""
    await agent_host("ask_human", ask_human)
    await agent_host("wrap", wrap)
    await executor({"handoff": HANDOFF})
    await client.registry.wait_for("handoff", 5)
    task = await within(client.send("handoff", make_message("hi")), 15, "the paused run")
    assert task.status.state == TaskState.INPUT_REQUIRED, task.status
    assert _review(task)["prompt"] == "what should we say?"
    with pytest.raises(RpcError, match="editSchema"):
        await within(client.send("handoff", _resume(task.id, "edit", data={"say": 5})), 10, "the refused edit")
    done = await within(client.send("handoff", _resume(task.id, "edit", data={"say": "hello"})), 15, "the resumed run")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == {"wrapped": {"say": "hello"}}


async def test_human_handoff_reject_without_edge_fails_with_reason(
    agent_host: Any, executor: Any, client: Client
) -> None:
    """Reject at a HUMAN_HANDOFF with no 'reject' edge fails the run with the reviewer's reason."""
    await agent_host("ask_human", ask_human)
    await agent_host("wrap", wrap)
    await executor({"handoff": HANDOFF})
    await client.registry.wait_for("handoff", 5)
    task = await within(client.send("handoff", make_message("hi")), 15, "the paused run")
    done = await within(client.send("handoff", _resume(task.id, "reject", reason="off topic")), 15, "the rejection")
    assert done.status.state == TaskState.FAILED
    assert "off topic" in _text(done)


# --- conversations ---------------------------------------------------------------------------


async def counter(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    users = [m.get("content") for m in input["messages"] if m.get("role") == "user"]
    return {"next": "END", "message": {"turns": len(users), "heard": users}}


async def test_conversational_graph_keeps_state_across_three_turns(
    agent_host: Any, executor: Any, client: Client
) -> None:
    """Three SendMessages on one contextId are three turns of one conversation: each sees all earlier ones."""
    await agent_host("counter", counter)
    chat = _graph("chat", [("A", "AGENT", "counter")], [("A", None, "END")], isConversational=True)
    await executor({"chat": chat})
    await client.registry.wait_for("chat", 5)
    outputs = []
    for n, text in enumerate(["one", "two", "three"], start=1):
        task = await within(client.send("chat", make_message(text, context_id="ctx-1")), 15, f"turn {n}")
        assert task.status.state == TaskState.COMPLETED, task.status
        outputs.append(task.output())
    assert [o["turns"] for o in outputs] == [1, 2, 3]
    assert json.dumps(outputs[2]["heard"]).count("one") == 1
    other = await within(client.send("chat", make_message("alone", context_id="ctx-2")), 15, "another context")
    assert other.output()["turns"] == 1


async def slow_counter(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    await asyncio.sleep(0.3)  # the turns overlap in time unless the context serialises them
    return await counter(input, ctx)


async def test_concurrent_turns_on_one_context_are_serialised(agent_host: Any, executor: Any, client: Client) -> None:
    """Four turns sent at once on one contextId run one after another, each seeing every earlier turn."""
    await agent_host("counter", slow_counter)
    chat = _graph("chat", [("A", "AGENT", "counter")], [("A", None, "END")], isConversational=True)
    await executor({"chat": chat})
    await client.registry.wait_for("chat", 5)
    calls = [await client.dispatch("chat", make_message(f"m{i}", context_id="ctx-c")) for i in range(4)]
    tasks = await within(asyncio.gather(*(c.result() for c in calls)), 30, "four serialised turns")
    assert all(t.status.state == TaskState.COMPLETED for t in tasks), [t.status for t in tasks]
    assert sorted(t.output()["turns"] for t in tasks) == [1, 2, 3, 4], "two turns started from the same state"


async def test_turn_pointer_left_by_a_turn_that_never_started(
    agent_host: Any, executor: Any, client: Client, redis: Redis, settings: Settings
) -> None:
    """A turn pointer naming a task that never wrote its state is taken over once it is older than the grace."""
    await agent_host("counter", counter)
    chat = _graph("chat", [("A", "AGENT", "counter")], [("A", None, "END")], isConversational=True)
    await executor({"chat": chat})
    await client.registry.wait_for("chat", 5)
    key = Keys(settings.namespace).conversation_turn("chat", "ctx-ghost")
    taken = int((time.time() - TURN_START_GRACE - 1) * 1000)
    await redis.set(key, f"ghost-task  {taken}")
    task = await within(client.send("chat", make_message("hi", context_id="ctx-ghost")), 15, "the turn after a ghost")
    assert task.status.state == TaskState.COMPLETED
    assert task.output()["turns"] == 1
    assert str(await redis.get(key)).startswith(f"{task.id} ghost-task ")


# --- tool routing ----------------------------------------------------------------------------


def py_tool(**arguments: Any) -> dict[str, Any]:
    """A Python tool handler (plain function, run in a thread)."""
    return {"python": arguments}


async def asker(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    tool_messages = [m for m in input["messages"] if m.get("role") == "tool"]
    if not tool_messages:
        calls = [
            {"id": "c1", "name": "py_tool", "arguments": {"n": 1}},
            {"id": "c2", "name": "missing", "arguments": {}},
        ]
        return {"next": "tools", "message": "first tools", "tool_calls": calls}
    return {"next": "tools", "message": "to the live agent", "tool_calls": [{"id": "c3", "name": "special"}]}


async def bee(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"next": "tools", "message": "mapped", "tool_calls": [{"id": "c4", "name": "mapped", "arguments": {"m": 2}}]}


async def sea(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    tools = {m["tool_call_id"]: m["content"] for m in input["messages"] if m.get("role") == "tool"}
    return {"next": "END", "message": tools}


async def test_tool_executor_three_tier_routing_and_tool_lookup(agent_host: Any, executor: Any, client: Client) -> None:
    """Tools run via the tools table's agent, a live agent, or a Python handler; routes: tool edge, ALWAYS, caller."""
    await agent_host("asker", asker)
    await agent_host("bee", bee)
    await agent_host("sea", sea)
    await agent_host("special", lambda input, ctx: _async({"special": input}))
    await agent_host("tool_agent", lambda input, ctx: _async({"tool_agent": input}))
    handler = f"{__name__}:py_tool"
    graph = _graph(
        "tooling",
        [
            ("A", "AGENT", "asker"),
            ("T1", "TOOL_EXECUTOR", None),
            ("B", "AGENT", "bee"),
            ("T2", "TOOL_EXECUTOR", None),
            ("C", "AGENT", "sea"),
        ],
        [("A", "T1", "tools"), ("T1", "B", "special"), ("B", "T2", "tools"), ("T2", "C", "*"), ("C", None, "END")],
        tools={
            "py_tool": {"handler": handler},
            "missing": {},
            "special": {"handler": handler},
            "mapped": {"agent": "tool_agent", "handler": handler},
        },
        node_A={"tools": ["py_tool", "missing", "special"]},
        node_B={"tools": ["mapped"]},
    )
    await executor({"tooling": graph})
    await client.registry.wait_for("tooling", 5)
    task = await within(client.send("tooling", make_message("go")), 20, "the tool run")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert out["c1"] == {"python": {"n": 1}}  # no live agent named py_tool: the Python handler (T1 → caller A)
    assert "no tool 'missing'" in out["c2"]["error"]
    assert out["c3"] == {"special": {}}  # a live agent named like the tool wins over the handler; T1 → B by name
    assert out["c4"] == {"tool_agent": {"m": 2}}  # the tools table's agent wins; T2 → C by ALWAYS


async def _async(value: Any) -> Any:
    return value


# --- DAG reviews: timeout default, nested -----------------------------------------------------


TIMED_REVIEW = """
name: timed
nodes:
  - {id: propose, type: agent, agent_name: propose, input: {amount: "{{workflow.input.amount}}"}}
  - {id: review, type: human_review, depends_on: [propose], prompt: "ok?", data: "{{propose.output}}",
     timeout: 0.5, on_timeout: approve}
  - {id: pay, type: agent, agent_name: pay, depends_on: [review], input: "{{review.output}}"}
output_mapping: {paid: "{{pay.output.paid}}"}
"""


async def test_review_timeout_applies_on_timeout_decision(agent_host: Any, executor: Any, client: Client) -> None:
    """A review nobody answers takes its on_timeout decision (approve) when its timer fires; the run completes."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({"timed": TIMED_REVIEW})
    await client.registry.wait_for("timed", 5)
    task = await within(client.send("timed", {"amount": 12}), 10, "the paused task")
    assert task.status.state == TaskState.INPUT_REQUIRED, task.status

    async def finished() -> Task | None:
        got = await client.get_task("timed", task.id)
        return got if got.status.state == TaskState.COMPLETED else None

    done = await eventually(finished, timeout=15, what="the review timeout to approve and the run to finish")
    assert done.output() == {"paid": 12}


INNER = refund_workflow("inner")

OUTER = """
name: outer
nodes:
  - {id: sub, type: workflow, workflow_name: inner, input: {amount: "{{workflow.input.amount}}"}}
  - {id: after, type: agent, agent_name: pay, depends_on: [sub], input: {amount: "{{sub.output.paid}}"}}
output_mapping: {total: "{{after.output.paid}}"}
"""


async def test_review_in_sub_workflow_pauses_root_with_full_path_and_resumes_from_root(
    agent_host: Any, executor: Any, client: Client
) -> None:
    """The leaf's review bubbles up (path sub/review); an edit sent to the root is routed down and both finish."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({"inner": INNER, "outer": OUTER})
    await client.registry.wait_for("outer", 5)
    await client.registry.wait_for("inner", 5)
    task = await within(client.send("outer", {"amount": 30}), 15, "the paused root")
    assert task.status.state == TaskState.INPUT_REQUIRED, task.status
    review = _review(task)
    assert review["path"] == "sub/review"
    assert review["prompt"] == "Refund 30?"
    with pytest.raises(RpcError, match="greater than the maximum of 100"):
        await within(client.send("outer", _resume(task.id, "edit", data={"amount": 500})), 10, "the refused edit")
    done = await within(client.send("outer", _resume(task.id, "edit", data={"amount": 20})), 15, "the root's answer")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == {"total": 20}
    leaves = (await client.list_tasks("inner")).tasks
    assert [t.status.state for t in leaves] == [TaskState.COMPLETED]
    assert (await client.get_task("inner", leaves[0].id)).output() == {"paid": 20}


async def test_resume_at_the_leaf_goes_through_the_root_and_both_finish(
    agent_host: Any, executor: Any, client: Client
) -> None:
    """A resume sent to the sub-workflow's own task is routed via the paused root, so the root carries on too."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({"inner": INNER, "outer": OUTER})
    await client.registry.wait_for("outer", 5)
    await client.registry.wait_for("inner", 5)
    root = await within(client.send("outer", {"amount": 30}), 15, "the paused root")
    assert root.status.state == TaskState.INPUT_REQUIRED, root.status
    [leaf] = (await client.list_tasks("inner")).tasks
    assert leaf.status.state == TaskState.INPUT_REQUIRED
    with pytest.raises(RpcError, match="greater than the maximum of 100"):
        await within(client.send("inner", _resume(leaf.id, "edit", data={"amount": 500})), 10, "the refused edit")
    done = await within(client.send("inner", _resume(leaf.id, "edit", data={"amount": 20})), 15, "the leaf's answer")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == {"paid": 20}

    async def root_finished() -> Task | None:
        got = await client.get_task("outer", root.id)
        return got if got.status.state == TaskState.COMPLETED else None

    finished = await eventually(root_finished, timeout=15, what="the root to finish after the leaf's resume")
    assert finished.output() == {"total": 20}
