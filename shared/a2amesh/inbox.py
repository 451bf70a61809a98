"""A client's calls in flight and the replies that reach them.

A callee answers on the call's reply subject: core NATS to the caller, and kept in ``{NS}_REPLIES``. A reply
published while the caller's connection was down, before the caller's interest reached the publisher's server
again after a reconnect, or dropped for a slow consumer, never arrives live. So the stream is read back (the last
message on the call's subject, a direct get), and a call waits for its answer as long as the stream keeps it,
never for its deadline:

- every call in flight at once after a reconnect, then again 0.5, 1, 2 … s apart (a replica answering a direct get
  may not hold the newest message yet, and the callee's own publish may still be riding out an election);
- any call quiet for :data:`QUIET_FIRST` seconds, then 10, 20, 40 … s apart up to :data:`QUIET_MAX`: the safety
  net for a loss nobody saw. A call still without a stored answer :data:`ASK_TASK_AFTER` seconds after it was sent
  asks for its task as well (GetTask, answered from the callee's store): a task already terminal is the call's
  answer, for a final the replies stream never took (an outage longer than the callee's publish retries).

A call that follows a task another request started (SubscribeToTask, itself one core NATS message) sends its
subscription again at the same times: the task keeps one subscriber per reply subject, so a repeat only makes the
callee answer again with a final the call may have missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received, Subscription
from a2amesh.errors import A2AMeshError, RpcError, TransportError, from_rpc_error
from a2amesh.lifecycle import Background
from a2amesh.logs import get_logger
from a2amesh.mailbox import Mailbox
from a2amesh.protocol import StreamResponse, Task, TaskStatusUpdateEvent, codes
from a2amesh.rpc import decode_stream_reply

__all__ = [
    "AFTER_RECONNECT",
    "ASK_TASK_AFTER",
    "QUIET_FIRST",
    "QUIET_MAX",
    "REREAD_TIMEOUT",
    "CallEvent",
    "PendingCall",
    "ReplyInbox",
    "TokenDelta",
    "reread_soon",
    "take_due",
]

log = get_logger("client")

REREAD_TIMEOUT = 15.0
"""Seconds a call's last stored reply, or its task, is read again for before the attempt is left to the next."""
QUIET_FIRST = 10.0
"""Seconds without a reply after which a call in flight reads its stored reply (and follows its task) again."""
QUIET_MAX = 120.0
"""The longest interval between two such reads of a call still quiet."""
AFTER_RECONNECT = 0.5
"""The first interval after a reconnect's read (then doubling): the reads that catch what a lagging replica or
a callee's late publish held back."""
ASK_TASK_AFTER = 60.0
"""Seconds after which a call with nothing stored on its reply subject reads its task too, at each read back."""
TICK = 1.0
"""Seconds between two looks for calls due a read."""
READS_AT_ONCE = 32


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """A token delta of a streaming call (SPEC §3.5: its delta subject, best effort, never persisted).

    Attributes:
        task_id: the task the text belongs to; context_id: its context.
        index: 0, 1, 2 … over the task's deltas.
        text: the text generated since the previous delta.
    """

    task_id: str
    context_id: str | None
    index: int
    text: str


@dataclass
class CallEvent:
    """One accepted reply of a call (or, for a call that asked for them, a token delta)."""

    attempt: int
    seq: int
    final: bool
    response: StreamResponse | None = None
    error: A2AMeshError | None = None
    delta: TokenDelta | None = None


@dataclass(slots=True)
class PendingCall:
    """A call in flight, as its replies find it."""

    agent: str
    subject: str
    """Its reply subject."""
    task_id: str = ""
    """The callee's task it waits for."""
    queue: Mailbox[CallEvent] = field(default_factory=Mailbox)
    attempt: int = 0
    seq: int = 0
    finished: bool = False
    deltas: bool = False
    headers: Mapping[str, str] | None = None
    gap: bool = False
    """Replies may have been lost (the connection dropped, or one was taken from the stream, missed live): a
    streamed final is completed from the task."""
    follow: Callable[[], Awaitable[None]] | None = None
    """Sends the call's SubscribeToTask again, when it follows a task another request started."""
    quiet: float = QUIET_FIRST
    """Seconds from its next read back to the one after."""
    read_at: float = 0.0
    """``time.monotonic()`` of its next read back."""
    since: float = 0.0
    """``time.monotonic()`` when it was sent."""


def take_due(calls: Mapping[str, PendingCall], now: float) -> list[tuple[str, PendingCall]]:
    """The calls due a read back at ``now``, each given its next read (the interval doubling up to
    :data:`QUIET_MAX`)."""
    due = [(call_id, call) for call_id, call in calls.items() if call.read_at <= now]
    for _, call in due:
        call.read_at = now + call.quiet
        call.quiet = min(call.quiet * 2, QUIET_MAX)
    return due


def reread_soon(calls: Iterable[PendingCall], now: float) -> None:
    """After a reconnect: every call due a read back at once, then after :data:`AFTER_RECONNECT` s, doubling."""
    for call in calls:
        call.quiet, call.read_at = AFTER_RECONNECT, now


class ReplyInbox:
    """Every call in flight of one client: their replies, live and read back from ``{NS}_REPLIES``.

    Args:
        bus: the client's bus.
        instance: the client's instance (its reply subjects' token).
        get_task: reads a task from its agent (GetTask), to complete a streamed final after a gap.
    """

    def __init__(
        self, bus: Bus, instance: str, get_task: Callable[[str, str, Mapping[str, str] | None], Awaitable[Task]]
    ) -> None:
        self.bus = bus
        self.instance = instance
        self._get_task = get_task
        self._calls: dict[str, PendingCall] = {}
        self._background = Background()
        self._due = asyncio.Event()
        self._delta_subscription: Subscription | None = None
        self._delta_listening: asyncio.Lock | None = None
        self.quiet_first = QUIET_FIRST
        """Seconds a call waits quiet before its first read back."""
        self.ask_task_after = ASK_TASK_AFTER
        """Seconds after which a call with no stored answer reads its task too."""

    async def start(self) -> None:
        """Subscribe to the instance's reply subjects and start reading quiet calls back."""
        await self.bus.subscribe(self.bus.subjects.reply_inbox(self.instance), self._on_reply)
        self.bus.on_disconnect(self._on_disconnected)
        self.bus.on_reconnect(self._on_reconnected)
        self._background.spawn(self._read_quiet_calls(), name="client-reread")

    async def close(self) -> None:
        """Stop reading back and hearing deltas."""
        self._background.cancel()
        if self._delta_subscription is not None:
            subscription, self._delta_subscription = self._delta_subscription, None
            with contextlib.suppress(Exception):  # the bus may be closed already
                await subscription.unsubscribe()

    def add(self, call_id: str, call: PendingCall) -> None:
        """Take replies for ``call_id`` from now on (and read it back once it has been quiet for a while)."""
        call.since = time.monotonic()
        call.quiet = self.quiet_first
        call.read_at = call.since + self.quiet_first
        self._calls[call_id] = call

    def forget(self, call_id: str) -> None:
        """Take no more replies for ``call_id``."""
        self._calls.pop(call_id, None)

    def __len__(self) -> int:
        return len(self._calls)

    # deltas
    async def listen_for_deltas(self) -> None:
        """Subscribe to this instance's delta subjects (once, at the first call that asks for deltas)."""
        if self._delta_subscription is not None:
            return
        if self._delta_listening is None:
            self._delta_listening = asyncio.Lock()
        async with self._delta_listening:
            if self._delta_subscription is None:
                subject = self.bus.subjects.delta(self.instance, "*", "*")
                self._delta_subscription = await self.bus.subscribe(subject, self._on_delta)

    async def _on_delta(self, msg: Received) -> None:
        call = self._calls.get(msg.subject.rsplit(".", 1)[-1])
        if call is None or call.finished or not call.deltas or msg.headers.get(h.AGENT) != call.agent:
            return
        try:
            body = json.loads(msg.data)
            delta = TokenDelta(
                task_id=str(body["taskId"]),
                context_id=body.get("contextId"),
                index=int(body["index"]),
                text=str(body["text"]),
            )
        except (ValueError, KeyError, TypeError) as e:  # best effort: a bad delta is dropped, the final holds all
            log.debug("delta.dropped", error=str(e) or type(e).__name__)
            return
        call.queue.put_nowait(CallEvent(call.attempt, call.seq, False, delta=delta))

    # replies
    async def _on_reply(self, msg: Received) -> None:
        call_id = msg.subject.rsplit(".", 1)[-1]
        call = self._calls.get(call_id)
        if call is None or call.finished:
            return
        self._accept(call_id, call, msg)

    def _accept(self, call_id: str, call: PendingCall, msg: Received, *, stored: bool = False) -> None:
        """Take one reply of a call in order (a stale or duplicate one is dropped). A streamed final after a gap
        (replies lost, artifacts among them) is completed from the stored task first (:meth:`_complete`).
        ``stored``: read back from the stream; taken, it was missed live, so the replies before it may have been
        too (A2A-Seq has gaps of its own, so no count tells)."""
        if msg.subject != call.subject:
            log.warning("reply.foreign_subject", call_id=call_id, subject=msg.subject[:200], want=call.agent)
            return
        if msg.headers.get(h.AGENT) != call.agent:
            log.warning("reply.foreign_agent", call_id=call_id, got=msg.headers.get(h.AGENT), want=call.agent)
            return
        try:
            attempt = int(msg.headers.get(h.ATTEMPT, "1"))
            seq = int(msg.headers.get(h.SEQ, "0"))
        except ValueError:
            return
        if attempt < call.attempt or (attempt == call.attempt and seq <= call.seq):
            return  # stale attempt or duplicate
        if stored:
            call.gap = True
        final = msg.headers.get(h.FINAL) == "true"
        event = CallEvent(attempt, seq, final)
        try:
            resp = decode_stream_reply(msg.data)
            if resp.error is not None:
                event.error = from_rpc_error(resp.error.code, resp.error.message, resp.error.data)
                event.final = True
            else:
                event.response = resp.result
        except RpcError as e:
            event.error = e
            event.final = True
        call.attempt, call.seq = attempt, seq
        if event.final:
            call.finished = True
            status = event.response.status_update if event.response is not None else None
            if call.gap and status is not None:
                self._background.spawn(self._complete(call, event, status.task_id), name="client-complete")
                return
        call.queue.put_nowait(event)

    async def _complete(self, call: PendingCall, final: CallEvent, task_id: str) -> None:
        """A streamed final after a gap: the task as stored (GetTask: status, artifacts) goes before the final
        status, so the call ends as it would have without the replies it missed; a task that cannot be read is
        ``UNAVAILABLE`` rather than a result without its artifacts."""
        try:
            task = await self._get_task(call.agent, task_id, call.headers)
        except A2AMeshError as e:
            log.warning("reply.complete_failed", agent=call.agent, task_id=task_id, error=str(e))
            error = TransportError(
                codes.UNAVAILABLE,
                f"the final of {call.agent!r} (task {task_id}) came after replies this caller missed (a lost "
                f"connection), and the task could not be read to complete it: {e}",
                metadata={"agent": call.agent, "task_id": task_id},
            )
            call.queue.put_nowait(CallEvent(final.attempt, final.seq, True, error=error))
            return
        call.queue.put_nowait(CallEvent(final.attempt, final.seq, False, response=StreamResponse(task=task)))
        call.queue.put_nowait(final)

    # reading back
    def _on_disconnected(self) -> None:
        for call in self._calls.values():
            call.gap = True  # replies published until the reconnect reach only {NS}_REPLIES

    def _on_reconnected(self) -> None:
        reread_soon(self._calls.values(), time.monotonic())
        self._due.set()

    async def _read_quiet_calls(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK):
                    await self._due.wait()
            self._due.clear()
            due = take_due(self._calls, time.monotonic())
            for i in range(0, len(due), READS_AT_ONCE):
                await asyncio.gather(*(self._read_back(call_id, call) for call_id, call in due[i : i + READS_AT_ONCE]))

    async def _read_back(self, call_id: str, call: PendingCall) -> None:
        """Take the call's last stored reply as if it had arrived (a duplicate or stale one is dropped); send its
        subscription again when it follows a task and is still unanswered. Never raises: the next read covers a
        failed one."""
        if call.finished or self._calls.get(call_id) is not call:
            return  # answered or forgotten since it was found due
        try:
            async with asyncio.timeout(REREAD_TIMEOUT):
                stored = await self.bus.direct_get_last(self.bus.subjects.replies_stream, call.subject)
                if stored is not None and not call.finished:
                    self._accept(call_id, call, Received(call.subject, stored.data, stored.headers, ""), stored=True)
                if not call.finished and call.task_id and time.monotonic() - call.since >= self.ask_task_after:
                    await self._take_terminal_task(call)
                if call.follow is not None and not call.finished:
                    await call.follow()
        except Exception as e:
            log.warning("reply.reread_failed", call_id=call_id, error=str(e) or type(e).__name__)

    async def _take_terminal_task(self, call: PendingCall) -> None:
        """End the call with its task when that is terminal: its final was stored before it was published, and a
        terminal task takes no more messages, so it is this call's answer whatever message the call sent."""
        try:
            task = await self._get_task(call.agent, call.task_id, call.headers)
        except RpcError:
            return  # not found (still queued), not the caller's: the call waits on
        if call.finished or not task.status.state.terminal:
            return
        log.warning("reply.answered_from_task", agent=call.agent, task_id=call.task_id)
        call.finished = True
        status = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
        call.queue.put_nowait(CallEvent(call.attempt, call.seq + 1, False, response=StreamResponse(task=task)))
        call.queue.put_nowait(
            CallEvent(call.attempt, call.seq + 2, True, response=StreamResponse(status_update=status))
        )
