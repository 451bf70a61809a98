"""A resent SendMessage (same messageId, same task) is one request, followed by every caller; a messageId used
both to continue a task and to start one is two requests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from a2amesh.client import Client, EncodedMessage, make_message, request_msg_id
from a2amesh.errors import RpcError
from a2amesh.ids import task_id_for
from a2amesh.protocol import TaskState, codes
from tests.support.waiting import within


class Held:
    """An agent whose calls with ``hold`` wait for ``gate``; it counts the runs."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.runs = 0

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.runs += 1
        if input.get("hold"):
            self.started.set()
            await self.gate.wait()
        return {"n": input.get("n")}


@pytest.fixture
async def held(agent_host: Any, client: Client) -> Held:
    agent = Held()
    await agent_host("held", agent, max_concurrency=1)
    await client.registry.wait_for("held", 5)
    return agent


async def test_resend_of_a_running_request_follows_it(held: Held, client: Client) -> None:
    """The same message sent again while its task runs: both callers get the one task's answer, run once."""
    msg = make_message(data={"n": 1, "hold": True})
    first = await client.dispatch("held", msg)
    await within(held.started.wait(), 10, "the first call to start")
    second = await client.dispatch("held", msg)
    held.gate.set()
    a = await within(first.result(), 15, "the first caller's answer")
    b = await within(second.result(), 15, "the second caller's answer")
    assert a.id == b.id
    assert b.status.state == TaskState.COMPLETED
    assert held.runs == 1


async def test_resend_of_a_queued_request_follows_it(held: Held, client: Client) -> None:
    """A resend while the first is still queued (the one slot busy) follows it: one run, both answered."""
    busy = await client.dispatch("held", make_message(data={"n": 0, "hold": True}))
    await within(held.started.wait(), 10, "the slot to be taken")
    msg = make_message(data={"n": 2})
    first = await client.dispatch("held", msg)
    second = await client.dispatch("held", msg)
    held.gate.set()
    a = await within(first.result(), 15, "the first caller's answer")
    b = await within(second.result(), 15, "the resend's answer")
    await within(busy.result(), 15, "the busy call")
    assert a.id == b.id
    assert b.output() == {"n": 2}
    assert held.runs == 2


async def test_message_id_used_to_continue_and_to_start_is_two_requests(held: Held, client: Client) -> None:
    """A messageId first used to continue a finished task (refused: -32004), then to start a task: the second is
    its own request and runs at once, instead of being dropped by JetStream as a duplicate of the first."""
    done = await within(client.send("held", make_message(data={"n": 3})), 15, "a finished task")
    reused = make_message(data={"n": 4})
    continuation = reused.model_copy(update={"task_id": done.id})
    with pytest.raises(RpcError) as refused:
        await within(client.send("held", continuation), 15, "the continuation's refusal")
    assert refused.value.code == codes.UNSUPPORTED_OPERATION
    started = await within(client.send("held", reused), 10, "the new task started with the same messageId")
    assert started.status.state == TaskState.COMPLETED
    assert started.id == task_id_for("held", reused.message_id)
    assert started.output() == {"n": 4}


def test_request_msg_ids() -> None:
    """Starting a task: ``{agent}:{messageId}`` (SPEC §3); continuing one: the task id is added."""
    msg = make_message(data={})
    assert request_msg_id("a", msg) == f"a:{msg.message_id}"
    assert request_msg_id("a", msg.model_copy(update={"task_id": "t1"})) == f"a:{msg.message_id}:t1"


async def test_encoded_resend_follows_and_reused_id_is_sent_again(held: Held, client: Client) -> None:
    """A request the caller encoded (the executor's node requests) behaves as its model: a resend follows the one
    run; its messageId used for another message (the model built only then) is sent again under its own id."""
    msg = make_message(data={"n": 5})
    encoded = EncodedMessage(msg.message_id, msg.to_json_bytes(), lambda: msg)
    first = await client.dispatch("held", encoded, history_length=0)
    second = await client.dispatch("held", encoded, history_length=0)
    a = await within(first.result(), 15, "the first caller's answer")
    b = await within(second.result(), 15, "the resend's answer")
    assert a.id == b.id == task_id_for("held", msg.message_id)
    assert held.runs == 1
    other = make_message(data={"n": 6}, message_id=msg.message_id)
    reused = EncodedMessage(other.message_id, other.to_json_bytes(), lambda: other)
    c = await within((await client.dispatch("held", reused, history_length=0)).result(), 15, "the new request")
    assert c.id != a.id
    assert c.output() == {"n": 6}
    assert held.runs == 2
