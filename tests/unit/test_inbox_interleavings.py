"""A call's replies in every interleaving of live delivery, loss, duplicates and reads back from the stream
(``a2amesh.inbox.ReplyInbox``): the call sees its events in order, each once, and ends exactly once, with its
final, as soon as the final was heard live or read back after it was stored."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Received, StoredMsg
from a2amesh.inbox import CallEvent, PendingCall, ReplyInbox
from a2amesh.protocol import (
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2amesh.rpc import encode_result, encode_task_result

SUBJECT = "ns.a2a.v1.reply.inst.echo.call1"
TASK_ID = "task-1"


@dataclass
class Stream:
    """The replies stream as a direct get sees it: the last message on the subject, or None."""

    last: StoredMsg | None = None
    subjects: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(replies_stream="NS_REPLIES"))

    async def direct_get_last(self, stream: str, subject: str) -> StoredMsg | None:
        assert subject == SUBJECT
        return self.last


def replies(progress: int) -> list[tuple[bytes, dict[str, str]]]:
    """``progress`` status updates, then the final Task: the bodies and headers a callee publishes."""
    out = []
    for seq in range(1, progress + 1):
        status = TaskStatus(
            state=TaskState.WORKING,
            message=Message(message_id=f"m{seq}", role=Role.AGENT, parts=[Part.of_text(f"step {seq}")]),
        )
        event = TaskStatusUpdateEvent(task_id=TASK_ID, context_id="c", status=status)
        out.append((encode_result("r", StreamResponse(status_update=event)), headers(seq, final=False)))
    task = Task(id=TASK_ID, context_id="c", status=TaskStatus(state=TaskState.COMPLETED))
    out.append((encode_task_result("r", task), headers(progress + 1, final=True)))
    return out


def headers(seq: int, *, final: bool) -> dict[str, str]:
    hdrs = {h.AGENT: "echo", h.ATTEMPT: "1", h.SEQ: str(seq)}
    if final:
        hdrs[h.FINAL] = "true"
    return hdrs


# what happens to each reply, in publish order: heard live (maybe twice), or lost; reads back between them
fates = st.lists(st.sampled_from(["live", "lost", "twice"]), min_size=1, max_size=5)
reads = st.lists(st.integers(min_value=0, max_value=5), max_size=4)


@settings(max_examples=300, deadline=None)
@given(fates=fates, reads=reads, late_duplicate=st.booleans())
def test_every_interleaving_ends_the_call_once_with_its_events_in_order(
    fates: list[str], reads: list[int], late_duplicate: bool
) -> None:
    asyncio.run(interleave(fates, reads, late_duplicate))


async def interleave(fates: list[str], reads: list[int], late_duplicate: bool) -> None:
    stream = Stream()

    async def no_task(agent: str, task_id: str, hdrs: object) -> Task:
        raise AssertionError("a non-streamed final is never completed from the task")

    inbox = ReplyInbox(stream, "inst", no_task)  # type: ignore[arg-type]
    call = PendingCall("echo", SUBJECT, task_id=TASK_ID)
    inbox.add("call1", call)
    sent = replies(len(fates) - 1)
    heard_final = False
    for i, ((body, hdrs), fate) in enumerate(zip(sent, fates, strict=True)):
        stream.last = StoredMsg(SUBJECT, i + 1, body, hdrs, None)  # stored before (or as) it is heard
        for _ in range({"live": 1, "lost": 0, "twice": 2}[fate]):
            await inbox._on_reply(Received(SUBJECT, body, hdrs, ""))
        for _ in range(reads.count(i)):
            await inbox._read_back("call1", call)
        heard_final = heard_final or (i == len(sent) - 1 and (fate != "lost" or i in reads))
        assert call.finished == heard_final, "the call ends as soon as its final is heard or read back, not before"
    if late_duplicate:  # a redelivery's copy of the final, heard after the call ended
        await inbox._on_reply(Received(SUBJECT, *sent[-1], ""))
    if not call.finished:
        await inbox._read_back("call1", call)  # the safety net's next read
    assert call.finished
    events: list[CallEvent] = call.queue.take_all()
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)), f"in order, each once: {seqs}"
    assert [e.final for e in events].count(True) == 1, "one final"
    assert events[-1].final, "the final is the last event"
    assert events[-1].response is not None
    assert events[-1].response.task is not None
    assert events[-1].response.task.status.state == TaskState.COMPLETED
