"""A cancel that takes its time: the other control requests of the agent must be answered meanwhile."""

from __future__ import annotations

import asyncio

from a2amesh.client import Call, Client
from a2amesh.protocol import TaskState
from tests.support.waiting import within


async def check_get_task_answered_while_cancelling(
    client: Client, agent: str, call: Call, *, stopping: asyncio.Event, release: asyncio.Event
) -> None:
    """Cancel ``call``'s task; once ``stopping`` is set (its clean-up runs until ``release``), GetTask must
    answer WORKING at once while the CancelTask still waits; after ``release`` both end CANCELED."""
    cancel = asyncio.create_task(client.cancel_task(agent, call.task_id, timeout=15))
    await within(stopping.wait(), 10, "the clean-up to start")
    meanwhile = await within(client.get_task(agent, call.task_id, timeout=5), 2, "GetTask during the cancel")
    assert meanwhile.status.state == TaskState.WORKING
    assert not cancel.done(), "CancelTask answered before the clean-up ended"
    release.set()
    assert (await within(cancel, 10, "CancelTask to answer")).status.state == TaskState.CANCELED
    assert (await within(call.result(), 5, "the caller's final answer")).status.state == TaskState.CANCELED
