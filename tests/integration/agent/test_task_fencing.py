"""Fencing of an agent's task claim (docs/protocol.md §5): every claim of a task takes a new fencing token, and
the writes of a worker whose claim was taken over since (its process paused or starved past the claim's TTL)
are refused in the same script that would make them — record, final, checkpoint — and its reply is never sent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from a2amesh.agent.host import AgentHost
from a2amesh.bus.nats import Bus
from a2amesh.client import make_message
from a2amesh.config import Settings
from a2amesh.errors import TaskFenced
from a2amesh.ids import task_id_for
from a2amesh.protocol import SendMessageRequest, Task, TaskState, TaskStatus
from a2amesh.protocol.base import utc_timestamp
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.tasks import TaskStore
from tests.support.inbox import Inbox
from tests.support.waiting import eventually, within


def _task(task_id: str, state: TaskState = TaskState.WORKING) -> Task:
    return Task(id=task_id, context_id="c", status=TaskStatus(state=state, timestamp=utc_timestamp()))


async def test_a_later_claim_fences_the_earlier_claims_writes(redis: Redis, settings: Settings) -> None:
    """A claim taken over after the first one lapsed gets a new token; the first worker's final write,
    checkpoint and renewal are refused, and the second worker's claim, record and checkpoint stay."""
    keys = Keys(settings.namespace)
    tasks = TaskStore(redis, keys, retention=60, queued_ttl=60)
    try:
        first = await tasks.claim(_task("fenced-1"), "a", "replica-a", 5)
        assert (first.outcome, first.fence) == ("claimed", "1")
        assert await tasks.save_checkpoint("fenced-1", '{"round": 1}', fence=first.fence)
        await redis.delete(keys.claim("fenced-1"))  # replica-a was paused past its claim's TTL
        second = await tasks.claim(_task("fenced-1"), "a", "replica-b", 5)
        assert (second.outcome, second.fence) == ("claimed", "2")

        late = await tasks.write(_task("fenced-1", TaskState.COMPLETED), "a", "replica-a", release=True, fence="1")
        assert late.outcome == "fenced"
        assert late.subscribers == [], "a fenced writer is told of no one to answer"
        stored = await tasks.get("fenced-1")
        assert stored is not None
        assert stored.status.state == TaskState.WORKING, "the fenced final was stored"
        assert await tasks.owner("fenced-1") == "replica-b", "the fenced write released the new owner's claim"
        assert not await tasks.save_checkpoint("fenced-1", '{"round": 9}', fence="1")
        assert await tasks.checkpoint("fenced-1") == '{"round": 1}'
        assert not await tasks.still_owner("fenced-1", "replica-a", 5, "1")
        lost, _ = await tasks.renew(["fenced-1"], "replica-a", 5, {"fenced-1": "1"})
        assert lost == {"fenced-1"}

        done = await tasks.write(_task("fenced-1", TaskState.COMPLETED), "a", "replica-b", release=True, fence="2")
        assert done.outcome == "written"
    finally:
        await tasks.aclose()


async def test_a_lapsed_claim_nobody_took_is_taken_back(redis: Redis, settings: Settings) -> None:
    """A claim that lapsed while no other replica claimed the task is renewed (taken back) by its token;
    a write without a token (the executor's, a test's) is not fenced."""
    keys = Keys(settings.namespace)
    tasks = TaskStore(redis, keys, retention=60, queued_ttl=60)
    try:
        view = await tasks.claim(_task("fenced-2"), "a", "replica-a", 5)
        await redis.delete(keys.claim("fenced-2"))
        assert await tasks.still_owner("fenced-2", "replica-a", 5, view.fence)
        assert await tasks.owner("fenced-2") == "replica-a"
        assert 0 < await redis.pttl(keys.claim("fenced-2")) <= 5000
        busy = await tasks.claim(_task("fenced-2"), "a", "replica-b", 5)
        assert busy.outcome == "busy"
        assert busy.fence == ""
        plain = await tasks.write(_task("fenced-2", TaskState.COMPLETED), "a", "other", release=False)
        assert plain.outcome == "written"
    finally:
        await tasks.aclose()


async def _request(bus: Bus, agent: str, inbox: Inbox) -> str:
    message = make_message(data={"n": 1})
    params = SendMessageRequest(message=message).to_json_dict()
    body = json.dumps({"jsonrpc": "2.0", "id": "f1", "method": "SendMessage", "params": params}).encode()
    await bus.js_publish(bus.subjects.request(agent), body, {"A2A-Version": "1.0", "A2A-Reply-To": inbox.subject})
    return task_id_for(agent, message.message_id)


async def _take_over(host: AgentHost, task_id: str, agent: str) -> str:
    """What another replica does once this one's claim lapsed: claim the task (a new token)."""
    await host.tasks._r.delete(Keys(host.settings.namespace).claim(task_id))
    stored = await host.tasks.get(task_id)
    assert stored is not None
    view = await host.tasks.claim(stored, agent, "another-replica", 30)
    assert view.outcome == "claimed"
    return view.fence


async def test_a_worker_taken_over_stores_and_answers_nothing(agent_host: Any, bus: Bus) -> None:
    """The handler of a replica whose claim was taken over ends: its final is refused, not published, the
    refusal counted once; ``ctx.fence()`` tells the handler before an outside effect."""
    started, release = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    async def slow(input: Any, ctx: Any) -> Any:
        started.set()
        await release.wait()
        try:
            await ctx.fence()
        except TaskFenced:
            seen.append("fenced")
        return {"who": "us"}

    host = await agent_host("fenced", slow)
    inbox = await Inbox(bus).start()
    task_id = await _request(bus, "fenced", inbox)
    await within(started.wait(), 10, "the task to start")
    await _take_over(host, task_id, "fenced")
    release.set()
    await eventually(lambda: host.fenced == 1, timeout=10, what="the final write to be fenced")
    assert seen == ["fenced"], "ctx.fence() must raise once another replica holds the task"
    stored = await host.tasks.get(task_id)
    assert stored is not None
    assert stored.status.state == TaskState.WORKING, "a fenced final was stored"
    assert await host.tasks.owner(task_id) == "another-replica"
    await asyncio.sleep(0.3)  # a reply published by the fenced worker would be on the stream by now
    last = await bus.direct_get_last(bus.subjects.replies_stream, inbox.subject)
    assert last is None, "a fenced worker published a reply"


async def test_a_claim_lost_at_renewal_stops_the_handler(agent_host: Any, bus: Bus, settings: Settings) -> None:
    """The heartbeat that finds the claim taken over stops the handler at once (it is cancelled, not left to
    finish an effect the new owner repeats), and nothing of the run is stored."""
    started, stopped = asyncio.Event(), asyncio.Event()

    async def forever(input: Any, ctx: Any) -> Any:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return {"who": "us"}

    host = await agent_host("fenced-renew", forever)
    inbox = await Inbox(bus).start()
    task_id = await _request(bus, "fenced-renew", inbox)
    await within(started.wait(), 10, "the task to start")
    await _take_over(host, task_id, "fenced-renew")
    await within(stopped.wait(), settings.ack_wait * 2, "the heartbeat to stop the handler")
    await eventually(lambda: host.fenced == 1, timeout=5, what="the fence to be counted")
    stored = await host.tasks.get(task_id)
    assert stored is not None
    assert stored.status.state == TaskState.WORKING
    assert await bus.direct_get_last(bus.subjects.replies_stream, inbox.subject) is None
