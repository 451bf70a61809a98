"""Human review over real NATS + Valkey: pause to INPUT_REQUIRED, resume by SendMessage on the task."""

from __future__ import annotations

from typing import Any

import pytest

from a2amesh.client import Client, make_message
from a2amesh.errors import RpcError
from a2amesh.protocol import TaskState
from tests.support.refund import REFUND, pay, propose
from tests.support.waiting import within


def _review(task: Any) -> dict[str, Any]:
    message = task.status.message
    return next(p.data for p in message.parts if isinstance(p.data, dict) and p.data.get("type") == "review_request")


@pytest.fixture
async def refund(agent_host: Any, executor: Any, client: Client) -> None:
    """The refund workflow (a review between its two agents) served, and known to ``client``."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({"refund": REFUND})
    await client.registry.wait_for("refund", 5)


@pytest.mark.usefixtures("refund")
async def test_review_pauses_then_edit_is_validated_and_applied(client: Client) -> None:
    """A review pauses the task (INPUT_REQUIRED + review_request); a bad edit is refused, a good one continues."""
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


@pytest.mark.usefixtures("refund")
async def test_review_reject_fails_without_on_reject(client: Client) -> None:
    """Reject without on_reject fails the execution with the reviewer's reason."""
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


@pytest.mark.usefixtures("refund")
async def test_a_text_only_client_answers_a_review_in_text(client: Client) -> None:
    """A client that sends text parts alone (other frameworks' A2A clients) answers with ``approve``,
    ``reject: reason`` or the answer's JSON as text; any other text is refused, saying which forms are taken,
    and the task stays paused for a good answer."""

    async def paused() -> Any:
        task = await within(client.send("refund", {"amount": 30}), 10, "the paused task")
        assert task.status.state == TaskState.INPUT_REQUIRED, task.status
        return task

    task = await paused()
    for text, why in (("maybe", 'or the text "approve" or "reject'), ('{"decision": "perhaps"}', "decision")):
        with pytest.raises(RpcError, match=why):
            await within(client.send("refund", make_message(text=text, task_id=task.id)), 10, f"{text!r} refused")
    still = await within(client.get_task("refund", task.id), 10, "the task after the refusals")
    assert still.status.state == TaskState.INPUT_REQUIRED
    done = await within(client.send("refund", make_message(text=" Approve. ", task_id=task.id)), 10, "approved")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == {"paid": 30}

    task = await paused()
    no = make_message(text="reject: not eligible", task_id=task.id)
    done = await within(client.send("refund", no), 10, "the rejected run")
    assert done.status.state == TaskState.FAILED
    assert "not eligible" in (done.status.message.text() if done.status.message else "")

    task = await paused()
    edit = make_message(text='{"decision": "edit", "data": {"amount": 20}}', task_id=task.id)
    done = await within(client.send("refund", edit), 10, "the edited run")
    assert done.status.state == TaskState.COMPLETED, done.status
    assert done.output() == {"paid": 20}
