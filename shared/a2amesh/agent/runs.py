"""What the agent host keeps of the tasks it works on: one :class:`Run` per task, the :class:`Target` subjects
its answers go to, and :class:`Bounded`, the one sweep timer that bounds many tasks' waits."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from a2amesh.bus.nats import WorkMsg
from a2amesh.protocol import Task
from a2amesh.protocol.jsonrpc import JsonRpcId
from a2amesh.rpc import dumps
from a2amesh.store.tasks import Subscriber
from a2amesh.worker.replies import ReplyPublisher, Target

__all__ = ["Bounded", "BoundedBlock", "Run", "Target"]


class Bounded:
    """Waits of many tasks bounded by one sweep timer: ``async with waits.bounded(delay):`` raises
    ``TimeoutError`` when the block runs ``delay`` seconds (up to one sweep interval more), as
    ``asyncio.timeout`` does, without arming and cancelling a timer of its own for each block."""

    __slots__ = ("_every", "_expired", "_sweeper", "_waiting")

    def __init__(self, every: float) -> None:
        self._every = every
        self._waiting: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.TimerHandle | None = None

    def bounded(self, delay: float) -> BoundedBlock:
        return BoundedBlock(self, delay)

    def _enter(self, delay: float) -> asyncio.Task[Any]:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        self._waiting[task] = loop.time() + delay
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._every, self._sweep)
        return task

    def _exit(self, task: asyncio.Task[Any], exc_type: type[BaseException] | None) -> bool:
        """Whether the block ran out of time (its task's cancellation was ours)."""
        if self._waiting.pop(task, None) is not None or task not in self._expired:
            return False
        self._expired.discard(task)
        return exc_type is asyncio.CancelledError and task.uncancel() == 0

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task in [t for t, deadline in self._waiting.items() if deadline <= now]:
            del self._waiting[task]
            self._expired.add(task)
            task.cancel()
        self._sweeper = loop.call_later(self._every, self._sweep) if self._waiting else None


class BoundedBlock(contextlib.AbstractAsyncContextManager[None]):
    __slots__ = ("_delay", "_owner", "_task")

    def __init__(self, owner: Bounded, delay: float) -> None:
        self._owner = owner
        self._delay = delay
        self._task: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> None:
        self._task = self._owner._enter(self._delay)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        if self._owner._exit(self._task, exc_type):
            raise TimeoutError from exc


@dataclass
class Run:
    """One task being worked on by this replica."""

    task: Task
    msg: WorkMsg | None
    request_id: JsonRpcId
    streaming: bool
    attempt: int
    targets: list[Target]
    publisher: ReplyPublisher  # the sender of its replies (A2A-Attempt: this delivery's)
    seq: int = 0
    cancel_requested: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    final_stored: bool = False  # the final is in Redis: new subscribers get it from there
    history_length: int | None = None  # the caller's historyLength: how much history its answers carry
    deadline: float | None = None  # A2A-Deadline (epoch seconds)
    call_depth: int = 0  # A2A-Call-Depth
    continues: bool = False  # the request continues an interrupted task (it named the task id)
    # from the handler's start until its final is stored (a store outage can hold that up for longer than a
    # claim's TTL): the host's heartbeat keeps the delivery and the claim alive
    working: bool = False
    fence: str = ""  # the claim's fencing token: every write of this run carries it
    fenced: bool = False  # another replica took the task over: nothing more of this run is stored or answered
    encoded: tuple[Task, bytes] | None = None  # the final task and its ProtoJSON, encoded once for its record

    def task_result(self, request_id: JsonRpcId, history_length: int | None = None) -> bytes:
        """The JSON-RPC answer carrying the task with at most ``history_length`` messages of its history
        (:func:`a2amesh.rpc.encode_task_result`); the whole final reuses the bytes of its record."""
        task = self.task
        if self.encoded is not None and self.encoded[0] is task and task.keeps_history(history_length):
            task_json = self.encoded[1]
        else:
            task_json = task.json_with_history(history_length)
        return b'{"jsonrpc":"2.0","id":%b,"result":{"task":%b}}' % (dumps(request_id), task_json)

    @property
    def has_progress_readers(self) -> bool:
        """Whether a progress event reaches anyone: a streaming caller, or a subscriber (never a plain caller)."""
        return self.streaming or any(not t.primary for t in self.targets)

    def request_cancel(self) -> None:
        if not self.cancel_requested.done():
            self.cancel_requested.set_result(None)

    def add_target(self, subscriber: Subscriber) -> Target | None:
        if any(t.subject == subscriber.subject for t in self.targets):
            return None
        target = Target(subscriber.subject, primary=False, answer_id=subscriber.answer_id(self.task.id))
        self.targets.append(target)
        return target
