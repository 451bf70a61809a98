"""The lifecycle every long-running worker shares (agent host, workflow executor).

``run()`` serves until ``shutdown()`` (or the event given to ``run_until``) and returns when shutdown
is done; ``shutdown()`` is idempotent, safe before ``run()``, and waits. ``start()`` runs a worker in a task of
its own and returns once it serves; ``async with worker:`` does the same and shuts it down on exit.

Background work has one owner per kind, and only this module starts tasks (``tests/unit/test_background_tasks.py``
holds the rest of the package to it, with the hot paths it names as exceptions): a task that lives as long as an
object (a watch, a heartbeat, the runs an object follows) or is started from a synchronous callback belongs to a
:class:`Background` the object holds; a task that lives for one block of a function is a :func:`side_task`;
children that fail together are an ``asyncio.TaskGroup``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from a2amesh.errors import WorkerNotReady

T = TypeVar("T")

START_LIMIT = 30.0
"""Seconds a worker started by :meth:`Worker.start` has to become ready."""

STOP_LIMIT = 5.0
"""Seconds a cancelled background loop or task has to stop (see :func:`cancel_and_wait`)."""

CANCEL_ANSWER_LIMIT = 10.0
"""Seconds a CancelTask waits for the running task to end as canceled before answering with it as it stands."""


class Worker:
    """Base of the agent host and the workflow executor: ``ready``, ``run_until`` and ``shutdown``."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._stopped = asyncio.Event()
        self._serving: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Serve until asked to stop; subclasses set ``ready`` once serving and ``_stopped`` when done."""
        raise NotImplementedError

    async def run_until(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set."""
        self._stop = stop
        await self.run()

    async def shutdown(self) -> None:
        """Ask the worker to stop and wait until it has (idempotent, safe before ``run()``)."""
        self._stop.set()
        if self.ready.is_set():
            await self._stopped.wait()

    async def start(self, stop: asyncio.Event | None = None, *, limit: float = START_LIMIT) -> asyncio.Task[None]:
        """Serve in a task of its own (until ``stop`` is set, if given) and return that task once ready.

        Raises:
            WorkerNotReady: it ended or was not ready within ``limit`` seconds (then it is stopped first); the
                run's own error, if it failed, is the cause.
        """
        running = asyncio.create_task(self.run() if stop is None else self.run_until(stop), name=type(self).__name__)
        self._serving = running
        await wait_set_or_done(self.ready, running, timeout=limit)
        if self.ready.is_set() and not running.done():
            return running
        (stop or self._stop).set()
        await cancel_and_wait(running, limit=STOP_LIMIT)
        error = running.exception() if running.done() and not running.cancelled() else None
        why = "ended before it was ready" if error is not None else f"was not ready within {limit:g} s"
        raise WorkerNotReady(f"{type(self).__name__} {why}" + (f": {error}" if error else "")) from error

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._serving is not None:
            await asyncio.gather(self._serving, return_exceptions=True)


async def cancel_and_wait(task: asyncio.Future[Any], *, limit: float, every: float = 1.0) -> bool:
    """Cancel ``task`` and wait at most ``limit`` seconds for it to end; True when it ended.

    The cancellation is delivered again every ``every`` seconds while the task runs on: a library that
    races a cancellation against a reply that has just arrived can swallow it (redis-py 8 on Python 3.11
    does, about once in 200 cancels of a command in flight), and the task would then carry on until its
    own end. Clean-up that needs longer than ``every`` must shield itself. Never raises the task's error.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not task.done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        task.cancel()
        await asyncio.wait((task,), timeout=min(every, remaining))
    if not task.cancelled():
        task.exception()  # retrieved: an error raised while cancelled is the cancel's outcome, not news
    return True


class Background:
    """The one owner of tasks that outlive the call that starts them: an object's own loops and followers
    (started when it opens, stopped when it closes) and tasks started from synchronous callbacks (a timer, a
    reconnect hook, a generator's ``finally``), where no ``asyncio.TaskGroup`` can be entered.

    Each task stays referenced until it ends (a dropped reference lets the loop collect a running task);
    its error is retrieved and handed to ``on_error`` if given, else dropped (the coroutines handle their
    own errors, and a clean-up failing on a closed connection is expected); :meth:`cancel` stops every
    task still running, :meth:`wait` waits for them.

    Args:
        on_error: called with the error of a task that failed (not one cancelled).
    """

    def __init__(self, *, on_error: Callable[[BaseException], None] | None = None) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()
        self._on_error = on_error

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Start ``coro`` as a task owned here."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            error = task.exception()  # retrieved: see the class docstring
            if error is not None and self._on_error is not None:
                self._on_error(error)

    def __len__(self) -> int:
        return len(self._tasks)

    def cancel(self) -> None:
        """Cancel every task still running (without waiting for them)."""
        for task in list(self._tasks):
            task.cancel()

    async def wait(self, timeout: float | None = None) -> None:
        """Wait at most ``timeout`` seconds (None: without a bound) for every task running now to end."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)


@contextlib.asynccontextmanager
async def side_task(coro: Coroutine[Any, Any, None], *, name: str | None = None) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``coro`` in a task of its own for the duration of the block (a heartbeat, a refresh loop, a pump).

    On leaving the block the task is stopped with :func:`cancel_and_wait` (bounded by :data:`STOP_LIMIT`). A
    failure of the task does not interrupt the block: its error is raised when the block is left, unless the
    block itself is raising. Unlike an ``asyncio.TaskGroup`` child, the side task's end is never the block's.
    """
    task = asyncio.get_running_loop().create_task(coro, name=name)
    raising = True
    try:
        yield task
        raising = False
    finally:
        await cancel_and_wait(task, limit=STOP_LIMIT)
        if not raising and task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error


async def wait_set_or_done(event: asyncio.Event, task: asyncio.Future[Any], *, timeout: float | None = None) -> None:
    """Wait until ``event`` is set or ``task`` is done, at most ``timeout`` seconds (None: without a bound).

    Neither is cancelled, and the task's error is not raised."""
    if event.is_set() or task.done():
        return
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter, task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def until_set(stop: asyncio.Event, items: AsyncIterator[T]) -> AsyncIterator[T]:
    """``items`` until they end or ``stop`` is set; then the pending ``anext`` is cancelled (a server that is
    shutting down ends its open streams instead of waiting for their next item). However it ends, ``items``
    is no longer running when this returns, so its owner may close it."""
    stopping = asyncio.ensure_future(stop.wait())
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            pending = asyncio.ensure_future(anext(items))
            await asyncio.wait({pending, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not pending.done():
                return
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield item
    finally:
        stopping.cancel()
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending


async def reconcile_forever(
    wake: asyncio.Event, interval: float, sync: Callable[[], Awaitable[None]], *, log: Any, failed: str
) -> None:
    """Run ``sync`` whenever ``wake`` is set and at least every ``interval`` seconds, until cancelled; a failing
    ``sync`` is logged as ``failed`` and tried again next time."""
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await wake.wait()
        wake.clear()
        try:
            await sync()
        except Exception as e:
            log.warning(failed, error=str(e) or type(e).__name__)
