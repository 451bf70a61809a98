"""One served name's lifecycle: its card, its control subject, its pull consumer (SPEC §3.3, §3.6, §3.7).

An agent host serves one agent, an executor replica one endpoint per workflow; both go through
:class:`Endpoint`. Opening it publishes the card, ensures the durable consumer, opens the pull consumer,
subscribes the control subject and starts pulling. Leaving it has three steps, each its own method, because
the callers interleave their own work between them:

1. :meth:`Endpoint.stop_pulling`: no new work is taken; messages delivered and not handed out are nak'ed
   (redelivered at once to another replica);
2. :meth:`Endpoint.close`: the card heartbeat stops and the control subject is unsubscribed (control requests
   are answered until then, so a CancelTask of work still draining gets its answer);
3. :meth:`Endpoint.withdraw`: the card (and this replica's presence key) is withdrawn, bounded.

The agent host drains its workers between 1 and 2, and withdraws after its control plane's pending answers
are in; the executor stops every workflow's pulling first, then drains its intake and drivers, then closes
each endpoint and withdraws all cards at once. ``async with Endpoint(...)`` (or :meth:`Endpoint.stop`) runs the
three steps back to back. Every step is idempotent and never raises.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

from a2amesh.bus.nats import Bus, PullConsumer, Received, Subscription, WorkMsg
from a2amesh.bus.setup import ensure_consumer
from a2amesh.config import Settings
from a2amesh.lifecycle import STOP_LIMIT, Background, cancel_and_wait
from a2amesh.registry import CardPublisher


class Endpoint:
    """Serves one agent or workflow name: card, control subject, pull consumer.

    Args:
        bus: an open bus.
        settings: the process settings.
        publisher: the card publisher of this name (its card may be changed and refreshed by the owner).
        on_control: handles each message on the name's control subject.
        start_work: called with each pulled message; it only starts a task (see :meth:`PullConsumer.serve`).
        free: how many more messages may be pulled now.
        until: pulling ends once it is set.
        max_ack_pending: the durable consumer's bound on un-acked messages (see :func:`ensure_consumer`).
        heartbeat: refresh the card every ``card_ttl / 3`` from a task of its own (the executor refreshes all
            its workflows' cards from one loop instead).
    """

    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        publisher: CardPublisher,
        *,
        on_control: Callable[[Received], Awaitable[None]],
        start_work: Callable[[WorkMsg], None],
        free: Callable[[], int],
        until: asyncio.Event,
        max_ack_pending: int,
        heartbeat: bool = True,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.publisher = publisher
        self.name = publisher.card.name
        self._on_control = on_control
        self._start_work = start_work
        self._free = free
        self._until = until
        self._max_ack_pending = max_ack_pending
        self._heartbeat = heartbeat
        self._published = False
        self._withdrawn = False
        self._pulling_stopped = False
        self.consumer: PullConsumer | None = None
        self._control: Subscription | None = None
        self._tasks = Background()
        """The card heartbeat and the pull loop (each stopped by its own step of leaving)."""
        self._beat: asyncio.Task[None] | None = None
        self._pull: asyncio.Task[None] | None = None

    async def publish(self) -> None:
        """Publish the card (done by :meth:`start` if not yet).

        Raises:
            ConfigError: the name is held by a live card of the other type.
        """
        if not self._published:
            await self.publisher.publish()
            self._published = True

    async def start(self) -> None:
        """Publish the card, ensure and open the consumer, subscribe the control subject, start pulling.

        On failure whatever was opened is closed again (the card withdrawn) and the error raised.
        """
        try:
            await self.publish()
            await ensure_consumer(self.bus, self.settings, self.name, max_ack_pending=self._max_ack_pending)
            subjects = self.bus.subjects
            self.consumer = await self.bus.pull_consumer(subjects.tasks_stream, subjects.consumer(self.name))
            self._control = await self.bus.subscribe(subjects.control(self.name), self._on_control)
            if self._heartbeat:
                self._beat = self._tasks.spawn(self.publisher.heartbeat(), name=f"{self.name}-card-heartbeat")
            self._pull = self._tasks.spawn(
                self.consumer.serve(self._start_work, self._free, self._until), name=f"pull-{self.name}"
            )
        except BaseException:
            await self.stop()
            raise

    async def pulled(self) -> None:
        """Wait until pulling ends (``until`` set); raises the pull loop's error, if it failed."""
        if self._pull is not None:
            await self._pull

    def wake(self) -> None:
        """Have the pull loop look at ``free()`` again now (a slot was freed)."""
        if self.consumer is not None:
            self.consumer.wake()

    async def stop_pulling(self) -> None:
        """Stop taking work: end the pull loop, stop the consumer, nak what was delivered and not handed out."""
        if self._pull is not None:
            await cancel_and_wait(self._pull, limit=STOP_LIMIT)
        if self.consumer is not None and not self._pulling_stopped:
            self._pulling_stopped = True
            await self.consumer.stop()
            for msg in self.consumer.drain_queued():
                with contextlib.suppress(Exception):
                    await msg.nak()

    async def close(self) -> None:
        """Stop the card heartbeat and unsubscribe the control subject (after :meth:`stop_pulling`)."""
        if self._beat is not None:
            await cancel_and_wait(self._beat, limit=STOP_LIMIT)
        control, self._control = self._control, None
        if control is not None:
            await control.unsubscribe()

    async def withdraw(self) -> None:
        """Withdraw the card and presence key (bounded: see :meth:`CardPublisher.withdraw`); once."""
        if self._withdrawn or not self._published:
            return
        self._withdrawn = True
        with contextlib.suppress(Exception):
            await self.publisher.withdraw()

    async def stop(self) -> None:
        """All of leaving, in order: :meth:`stop_pulling`, :meth:`close`, :meth:`withdraw`."""
        await self.stop_pulling()
        await self.close()
        await self.withdraw()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()
