"""A cancel that takes its time: the other control requests of the agent must be answered meanwhile."""

from __future__ import annotations

import asyncio

from a2amesh.client import Call, Client
from a2amesh.errors import RpcError
from a2amesh.protocol import TaskState, codes
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


async def cancel_at_once(client: Client, agent: str, task_id: str, times: int, *, within_s: float) -> list[str]:
    """``times`` CancelTasks of one task sent at once, each answered within ``within_s``: the state each was
    answered, or ``"not cancelable: CANCELED"`` for a ``-32002`` naming a CANCELED task (the answer of a cancel
    that finds the task canceled by an earlier one)."""

    async def one() -> str:
        try:
            return (await client.cancel_task(agent, task_id, timeout=within_s + 5)).status.state.value
        except RpcError as e:
            if e.code == codes.TASK_NOT_CANCELABLE and TaskState.CANCELED.value in str(e):
                return "not cancelable: CANCELED"
            raise

    return await within(asyncio.gather(*(one() for _ in range(times))), within_s, f"the answers of {times} cancels")


def canceled_once_at_least(answers: list[str]) -> bool:
    """Every answer says the task is canceled, and one at least is the cancel that did it."""
    return TaskState.CANCELED.value in answers and set(answers) <= {
        TaskState.CANCELED.value,
        "not cancelable: CANCELED",
    }
