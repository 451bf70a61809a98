"""Human review over real NATS + Valkey: pause to INPUT_REQUIRED, resume by SendMessage on the task."""

from __future__ import annotations

from typing import Any

import pytest

from a2amesh.client import Client, make_message
from a2amesh.errors import RpcError
from a2amesh.protocol import TaskState
from tests.support.waiting import within


async def propose(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"amount": input["amount"]}


async def pay(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"paid": input["amount"]}


REFUND = """
name: refund
nodes:
  - {id: propose, type: agent, agent_name: propose, input: {amount: "{{workflow.input.amount}}"}}
  - id: review
    type: human_review
    depends_on: [propose]
    prompt: "Refund {{propose.output.amount}}?"
    data: "{{propose.output}}"
    edit_schema: {type: object, properties: {amount: {type: number, maximum: 100}}, required: [amount]}
  - {id: pay, type: agent, agent_name: pay, depends_on: [review], input: "{{review.output}}"}
output_mapping: {paid: "{{pay.output.paid}}"}
"""


def _review(task: Any) -> dict[str, Any]:
    message = task.status.message
    return next(p.data for p in message.parts if isinstance(p.data, dict) and p.data.get("type") == "review_request")


async def test_review_pauses_then_edit_is_validated_and_applied(agent_host: Any, executor: Any, client: Client) -> None:
    """A review pauses the task (INPUT_REQUIRED + review_request); a bad edit is refused, a good one continues."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({"refund": REFUND})
    await client.registry.wait_for("refund", 5)
    task = await within(client.send("refund", {"amount": 30}), 10, "the paused task")
    assert task.status.state == TaskState.INPUT_REQUIRED, task.status
    review = _review(task)
    assert review["path"] == "review"
    assert review["prompt"] == "Refund 30?"
    assert review["data"] == {"amount": 30}
    bad = make_message(data={"decision": "edit", "data": {"amount": 500}}, task_id=task.id)
    with pytest.raises(RpcError, match=r"\$\.amount: 500 is greater than the maximum of 100"):
        await within(client.send("refund", bad), 10, "the refused edit")
    good = make_message(data={"decision": "edit", "data": {"amount": 20}}, task_id=task.id)
    done = await within(client.send("refund", good), 10, "the resumed run")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == {"paid": 20}


async def test_review_reject_fails_without_on_reject(agent_host: Any, executor: Any, client: Client) -> None:
    """Reject without on_reject fails the execution with the reviewer's reason."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({"refund": REFUND})
    await client.registry.wait_for("refund", 5)
    task = await within(client.send("refund", {"amount": 30}), 10, "the paused task")
    no = make_message(data={"decision": "reject", "reason": "not eligible"}, task_id=task.id)
    done = await within(client.send("refund", no), 10, "the rejected run")
    assert done.status.state == TaskState.FAILED
    assert "not eligible" in (done.status.message.text() if done.status.message else "")


FIRST_REVIEW = """
name: first_review
nodes:
  - {id: check, type: human_review, prompt: "Go on with {{workflow.input.n}}?", data: "{{workflow.input}}"}
output_mapping: "{{check.output}}"
"""


async def test_a_review_as_first_node_pauses_and_answers_the_caller(executor: Any, client: Client) -> None:
    """A workflow whose first step only waits for a human pauses at once and answers its caller INPUT_REQUIRED
    (before, its first step never paused and the caller waited out its deadline); the answer continues it."""
    await executor({"first_review": FIRST_REVIEW})
    await client.registry.wait_for("first_review", 5)
    task = await within(client.send("first_review", {"n": 1}), 10, "the paused answer")
    assert task.status.state == TaskState.INPUT_REQUIRED, task.status
    assert _review(task)["prompt"] == "Go on with 1?"
    resumed = make_message(data={"decision": "approve", "data": None}, task_id=task.id)
    done = await within(client.send("first_review", resumed), 10, "the approved run")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == {"n": 1}
