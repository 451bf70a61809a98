"""How an agent answers (docs/protocol.md §5 step 10): the final is stored, then published, then the
request is acked; a final that another replica already stored stands and is sent instead."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.js.api import ConsumerInfo

from a2amesh.agent.host import AgentHost, result_artifact
from a2amesh.bus.nats import Bus
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.ids import task_id_for
from a2amesh.protocol import SendMessageRequest, TaskState, TaskStatus
from a2amesh.protocol.base import utc_timestamp
from tests.support.inbox import Inbox
from tests.support.waiting import eventually, within


async def _request(bus: Bus, agent: str, inbox: Inbox) -> str:
    """Send a SendMessage whose replies go to ``inbox``; the task id the agent derives for it."""
    message = make_message(data={"n": 1})
    params = SendMessageRequest(message=message).to_json_dict()
    body = json.dumps({"jsonrpc": "2.0", "id": "f1", "method": "SendMessage", "params": params}).encode()
    await bus.js_publish(bus.subjects.request(agent), body, {"A2A-Version": "1.0", "A2A-Reply-To": inbox.subject})
    return task_id_for(agent, message.message_id)


async def _store_their_final(host: AgentHost, task_id: str, agent: str) -> None:
    """What a replica that took the task over would store once it finished: a final of its own."""
    record = await host.tasks.get(task_id)
    assert record is not None, "the task should be stored while it runs"
    theirs = record.model_copy(
        update={
            "status": TaskStatus(state=TaskState.COMPLETED, timestamp=utc_timestamp()),
            "artifacts": [result_artifact({"who": "them"})],
        }
    )
    await host.tasks.write(theirs, agent, "another-replica", release=False)


def _output(body: dict[str, Any]) -> Any:
    return body["result"]["task"]["artifacts"][0]["parts"][0]["data"]


async def test_the_final_is_stored_and_acked_when_the_caller_has_it(
    agent_host: Any, client: Client, bus: Bus, settings: Settings
) -> None:
    """GetTask right after the answer finds the final stored (it is stored before it is published); the
    request is acked (nothing left pending)."""

    async def echo(input: Any, ctx: Any) -> Any:
        return input

    await agent_host("finals", echo)
    for n in range(20):
        task = await within(client.send("finals", {"n": n}), 10, f"answer {n}")
        assert task.status.state == TaskState.COMPLETED
        stored = await within(client.get_task("finals", task.id), 5, f"GetTask {n}")
        assert stored.status.state == TaskState.COMPLETED, f"call {n}: the caller got a final that was not stored"
        assert stored.output() == {"n": n}

    async def nothing_pending() -> bool:
        info: ConsumerInfo = await bus.jsm.consumer_info(bus.subjects.tasks_stream, bus.subjects.consumer("finals"))
        return info.num_ack_pending == 0 and info.num_pending == 0

    await eventually(nothing_pending, timeout=10, what="every request acked")


async def test_a_final_stored_by_another_replica_stands_and_is_sent_instead(
    agent_host: Any, bus: Bus, settings: Settings
) -> None:
    """A replica whose final write finds one already stored (another replica took the task over and
    finished it) answers with that one, and only that one; its own result is dropped."""
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(input: Any, ctx: Any) -> Any:
        started.set()
        await release.wait()
        return {"who": "us"}

    host = await agent_host("racer", slow)
    inbox = await Inbox(bus).start()
    task_id = await _request(bus, "racer", inbox)
    await within(started.wait(), 10, "the task to start")
    await _store_their_final(host, task_id, "racer")
    release.set()

    replies = await inbox.until_final("the final")
    assert len(replies) == 1, "a SendMessage caller gets exactly one reply"
    body, headers = replies[0]
    assert headers["A2A-Final"] == "true"
    assert _output(body) == {"who": "them"}, "the final that stands must be the answer"
    stored = await host.tasks.get(task_id)
    assert stored is not None
    assert stored.output() == {"who": "them"}, "our write must not replace a stored final"

    async def acked() -> bool:
        info: ConsumerInfo = await bus.jsm.consumer_info(bus.subjects.tasks_stream, bus.subjects.consumer("racer"))
        return info.num_ack_pending == 0 and info.num_pending == 0

    await eventually(acked, timeout=10, what="the request acked")
    last = await bus.direct_get_last(bus.subjects.replies_stream, inbox.subject)
    assert last is not None
    assert _output(json.loads(last.data)) == {"who": "them"}, "our own result must not follow the final that stands"
