"""A call's answer is never lost with its live delivery: what ``{NS}_REPLIES`` keeps is read back
(``a2amesh.inbox``), and a SubscribeToTask nobody heard is sent again."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.ids import nuid, task_id_for
from a2amesh.lifecycle import side_task
from a2amesh.protocol import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
    codes,
)
from a2amesh.registry import CardPublisher
from a2amesh.rpc import encode_result, encode_task_result
from a2amesh.worker.replies import reply_headers
from tests.support.waiting import eventually, within

Silent = Callable[[str], Awaitable[None]]
QUIET = 0.3
"""The tests' quiet interval before a call's first read back (10 s by default)."""


@pytest.fixture
async def silent(bus: Bus, settings: Settings) -> AsyncIterator[Silent]:
    """Gives a name a live card with nobody serving it: its requests are stored and never answered live."""
    async with contextlib.AsyncExitStack() as stack:

        async def live_card(name: str) -> None:
            extension = AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": "agent"})
            card = AgentCard(name=name, capabilities=AgentCapabilities(extensions=[extension]))
            publisher = CardPublisher(bus, card, instance="silent", card_ttl=settings.card_ttl)
            await publisher.publish()
            await stack.enter_async_context(side_task(publisher.heartbeat()))

        yield live_card


def finished(task_id: str, text: str) -> Task:
    status = TaskStatus(
        state=TaskState.COMPLETED,
        message=Message(message_id=nuid(), role=Role.AGENT, parts=[Part.of_text(text)], task_id=task_id),
    )
    return Task(id=task_id, context_id="ctx", status=status)


async def answer(bus: Bus, settings: Settings, subject: str, agent: str, request_id: str, task: Task) -> None:
    """Publish ``task`` as the final answer on ``subject``, as an agent does (stored in the replies stream)."""
    hdrs = reply_headers(settings, agent=agent, attempt=1, seq=1, final=True, durable=True, msg_id=f"{task.id}:final")
    await bus.js_publish(subject, encode_task_result(request_id, task), hdrs)


@pytest.fixture
def quick(client: Client) -> Client:
    client.inbox.quiet_first = QUIET
    return client


async def test_a_final_stored_while_nobody_listened_is_read_back(
    quick: Client, bus: Bus, settings: Settings, silent: Silent
) -> None:
    """A final that reached the replies stream but not the caller (published while the caller's interest was
    not on the publisher's server: a reconnect, a new cluster route, a slow consumer) answers the call as soon
    as the call has been quiet for a while, not at its deadline."""
    await silent("mute")
    call_id = nuid()
    message = make_message("hello")
    task_id = task_id_for("mute", message.message_id)
    subject = bus.subjects.reply(quick.instance, "mute", call_id)
    await answer(bus, settings, subject, "mute", call_id, finished(task_id, "answered while nobody listened"))
    call = await quick.dispatch("mute", message, call_id=call_id, timeout=120)
    task = await within(call.result(), 10, "the stored final to be read back")
    assert task.status.state == TaskState.COMPLETED
    assert task.status.message is not None
    assert task.status.message.text() == "answered while nobody listened"
    assert len(quick.inbox) == 0, "a finished call is forgotten"


async def test_a_subscription_nobody_answered_is_sent_again(
    quick: Client, bus: Bus, settings: Settings, silent: Silent
) -> None:
    """A SubscribeToTask is one core NATS message: one sent while the callee's control plane was not listening is
    gone. The caller sends it again while it hears nothing, so the callee answers once it listens."""
    await silent("late")
    task_id = "task-of-late"
    heard: list[str] = []
    listening = False

    async def control(msg: Received) -> None:  # the callee's control plane, answering only once it listens
        heard.append(msg.headers.get(h.REPLY_TO, ""))
        if listening:
            await answer(bus, settings, heard[-1], "late", "sub", finished(task_id, "done before you asked"))

    subscription = await bus.subscribe(bus.subjects.control("late"), control)
    events = quick.subscribe("late", task_id, timeout=120)
    first = asyncio.ensure_future(anext(events))
    try:
        await eventually(lambda: heard, timeout=10, what="the first SubscribeToTask")
        listening = True
        event = await within(first, 10, "the subscription to be sent again and answered")
    finally:
        first.cancel()
        await events.aclose()
        await subscription.unsubscribe()
    assert event.task is not None
    assert event.task.status.state == TaskState.COMPLETED
    assert len(heard) >= 2, "sent again"
    assert len(set(heard)) == 1, "to the same reply subject"


async def test_a_final_the_replies_stream_never_took_is_read_from_the_task(
    quick: Client, bus: Bus, settings: Settings, silent: Silent
) -> None:
    """A callee stores its final before it publishes it; when the replies stream never takes it (an outage longer
    than the callee's publish retries), the call asks for the task once it has waited long enough, and a terminal
    task answers it. A task still running does not."""
    await silent("unstored")
    quick.inbox.ask_task_after = QUIET
    message = make_message("hello")
    task_id = task_id_for("unstored", message.message_id)
    asked: list[str] = []
    done = False

    async def control(msg: Received) -> None:  # GetTask, answered from the callee's store
        request = json.loads(msg.data)
        asked.append(request["method"])
        task = finished(task_id, "stored, never published") if done else working(task_id)
        await bus.publish(msg.reply, encode_result(request["id"], task), {h.AGENT: "unstored"})

    subscription = await bus.subscribe(bus.subjects.control("unstored"), control)
    try:
        call = await quick.dispatch("unstored", message, timeout=120)
        result = asyncio.ensure_future(call.result())
        await eventually(lambda: len(asked) >= 2, timeout=10, what="the call to ask for its task twice")
        assert not result.done(), "a task still working is no answer"
        done = True
        task = await within(result, 10, "the terminal task to answer the call")
    finally:
        await subscription.unsubscribe()
    assert set(asked) == {codes.GET_TASK}
    assert task.status.state == TaskState.COMPLETED
    assert task.status.message is not None
    assert task.status.message.text() == "stored, never published"


def working(task_id: str) -> Task:
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=TaskState.WORKING))
