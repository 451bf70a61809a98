"""The transport seam: the only module that imports ``nats``.

Layers above speak bytes, header dicts and the small types here; they never see a nats-py object.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats
import nats.aio.client
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg as NatsMsg
from nats.js import api as js_api

from a2amesh.bus import headers as h
from a2amesh.bus.kv import Kv
from a2amesh.bus.nats_client import NATS_CLIENT
from a2amesh.bus.retry import ride_out
from a2amesh.bus.subjects import Subjects
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.ids import nuid
from a2amesh.jsontext import loads
from a2amesh.lifecycle import Background
from a2amesh.logs import get_logger
from a2amesh.protocol import codes

log = get_logger("bus")

Headers = dict[str, str]


@dataclass(frozen=True)
class Received:
    """A core NATS message handed to a subscriber."""

    subject: str
    data: bytes
    headers: Headers
    reply: str


PUBLISH_TIMEOUT = 30.0
"""Seconds a JetStream publish keeps trying: longer than a stream leader election on a cluster."""
ATTEMPT_TIMEOUT = 2.0
"""Seconds the first publish attempt waits for its ack before it is sent again (same ``Nats-Msg-Id``); each
later attempt waits 1.5 times longer, up to ``ATTEMPT_TIMEOUT_MAX``, so an overloaded server that is only
slow to ack is not sent every publish again every 2 s."""
ATTEMPT_TIMEOUT_MAX = 8.0
PING_INTERVAL = 5
MAX_OUTSTANDING_PINGS = 2
RETRY_PAUSE = 0.1
RETRY_PAUSE_MAX = 1.0
DUPLICATE_IN_PROCESS = 10158
"""JetStream's ``err_code`` for a publish whose ``Nats-Msg-Id`` a clustered stream leader is still proposing
(an earlier attempt of the same publish): the copy may yet be stored, and a later attempt gets its ack."""


class _Retryable(Exception):
    """A publish attempt that failed in a way another attempt can get past (no ack, no leader, reconnecting)."""

    def __init__(self, error: TransportError, *, maybe_stored: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.maybe_stored = maybe_stored


def _gave_up(e: Exception) -> BaseException:
    """The error of a publish that kept failing: its last attempt's."""
    return e.error if isinstance(e, _Retryable) else e


@dataclass(frozen=True)
class PubAck:
    """The JetStream acknowledgement of a publish."""

    stream: str
    seq: int
    duplicate: bool


@dataclass(frozen=True)
class StoredMsg:
    """A message read back from a stream."""

    subject: str
    seq: int
    data: bytes
    headers: Headers
    time: dt.datetime | None


class WorkMsg:
    """A JetStream message pulled from a work consumer, with its ack operations."""

    def __init__(self, msg: NatsMsg) -> None:
        self._msg = msg
        self.subject: str = msg.subject
        self.data: bytes = msg.data
        self.headers: Headers = dict(msg.headers or {})
        self.num_delivered, self.stream_seq = _delivery_and_stream_seq(msg)
        self._done = False

    def queue_info(self) -> tuple[int | None, int | None]:
        """When the stream stored this message (epoch nanoseconds) and how many messages its consumer still had
        pending at this delivery, from its ack subject (None: not read there)."""
        tokens = (self._msg.reply or "").split(".")
        at = 7 if len(tokens) == 9 else 9 if len(tokens) >= 11 else None
        if at is None or tokens[0] != "$JS":
            return None, None
        try:
            return int(tokens[at]), int(tokens[at + 1])
        except (ValueError, IndexError):
            return None, None

    async def ack(self) -> None:
        """Acknowledge: the work is done and persisted."""
        if not self._done:
            self._done = True
            await self._msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        """Negative ack: deliver again (after ``delay`` seconds)."""
        if not self._done:
            self._done = True
            await self._msg.nak(delay=delay)

    async def term(self) -> None:
        """Terminate: never deliver this message again."""
        if not self._done:
            self._done = True
            await self._msg.term()

    async def in_progress(self) -> None:
        """Reset the ack timer: the work is still running."""
        if not self._done:
            await self._msg.in_progress()

    def kept_alive(self, interval: float) -> contextlib.AbstractAsyncContextManager[None]:
        """Send :meth:`in_progress` every ``interval`` seconds while the block (``async with``) runs.

        For steps that may wait on a slow or paused store: without it the message would be
        redelivered meanwhile, and each redelivery counts towards ``max_deliver``. A timer, not a
        task: a block that ends within ``interval`` (the usual case) costs no extra loop turns.
        """
        return _KeptAlive(self, interval)


def _delivery_and_stream_seq(msg: NatsMsg) -> tuple[int, int]:
    """A JetStream message's delivery count and stream sequence, read from its ack subject.

    ``$JS.ACK.{stream}.{consumer}.{delivered}.{stream_seq}.{consumer_seq}.{time}.{pending}``, or with
    ``{domain}.{account_hash}`` after ``$JS.ACK`` (and a random token at the end) on newer servers; nats-py's
    ``metadata`` reads the same fields but also builds a datetime and two dataclasses per message.
    """
    tokens = (msg.reply or "").split(".")
    if tokens[0] == "$JS" and len(tokens) > 1 and tokens[1] == "ACK":
        if len(tokens) == 9:
            return int(tokens[4]), int(tokens[5])
        if len(tokens) >= 11:
            return int(tokens[6]), int(tokens[7])
    meta = msg.metadata  # not a JetStream message: raises nats-py's NotJSMessageError
    return int(meta.num_delivered), int(meta.sequence.stream)


class _KeptAlive(contextlib.AbstractAsyncContextManager[None]):
    """:meth:`WorkMsg.kept_alive` (a class, not an async generator: every task enters one)."""

    __slots__ = ("_beats", "_handle", "_interval", "_msg")

    def __init__(self, msg: WorkMsg, interval: float) -> None:
        self._msg = msg
        self._interval = interval
        self._handle: asyncio.TimerHandle | None = None
        self._beats: Background | None = None

    async def __aenter__(self) -> None:
        self._handle = asyncio.get_running_loop().call_later(self._interval, self._fire)

    async def __aexit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._beats is not None:
            self._beats.cancel()

    def _fire(self) -> None:
        if self._beats is None:
            self._beats = Background()
        self._beats.spawn(self._beat())
        self._handle = asyncio.get_running_loop().call_later(self._interval, self._fire)

    async def _beat(self) -> None:
        with contextlib.suppress(Exception):
            await self._msg.in_progress()


class PullConsumer:
    """A durable pull consumer fed by our own pull requests, so each message is handed over as it arrives.

    The owner grants credit (its free slots) with :meth:`want`; outstanding pull requests never ask for
    more than that, so a replica holds at most as many un-acked messages as it can work on at once.
    A request the server expires unfilled (its ``408``, every ``EXPIRES`` seconds on an idle replica) is
    renewed at once for what it had left: otherwise a message arriving before the owner's next
    :meth:`want` (up to its poll interval later) would wait for it.
    """

    EXPIRES = 5.0

    def __init__(self, nc: NatsClient, stream: str, durable: str) -> None:
        self._nc = nc
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._queue: asyncio.Queue[WorkMsg] = asyncio.Queue()
        # One running total: the server spreads deliveries over all waiting requests, so counting per
        # request drifts; 404/408/409 status messages say how many of a request went unfilled.
        self._outstanding = 0
        self._last_request = 0.0
        self._sub: Any = None
        self._inbox = ""
        self._stopped = False
        self._handle: Callable[[WorkMsg], None] | None = None
        self._wake = asyncio.Event()
        self.renewals = 0  # expired requests renewed (for tests and diagnostics)

    async def start(self) -> None:
        """Open the inbox the server delivers pulled messages to."""
        self._inbox = self._nc.new_inbox()
        self._sub = await self._nc.subscribe(self._inbox, cb=self._on_msg)

    @property
    def outstanding(self) -> int:
        """Messages requested from the server and not delivered yet."""
        if self._outstanding and time.monotonic() > self._last_request + self.EXPIRES + 1:
            self._outstanding = 0  # every request we sent has expired on the server
        return self._outstanding

    def reset(self) -> None:
        """Forget outstanding requests (the server drops them on a reconnect)."""
        self._outstanding = 0

    async def want(self, slots: int) -> None:
        """Ask the server for messages so that outstanding + queued reaches ``slots``.

        A new pull request goes out only when less than half of ``slots`` is covered, so a busy
        replica sends one request per several messages rather than one per message.
        """
        covered = self.outstanding + self._queue.qsize()
        deficit = slots - covered
        if deficit <= 0 or (covered > 0 and covered * 2 >= slots) or not self._nc.is_connected:
            return
        await self._request(deficit)

    async def _request(self, batch: int) -> None:
        self._outstanding += batch
        self._last_request = time.monotonic()
        req = {"batch": batch, "expires": int(self.EXPIRES * 1e9)}
        await self._nc.publish(self._next_subject, json.dumps(req).encode(), reply=self._inbox)

    async def _on_msg(self, msg: NatsMsg) -> None:
        headers = msg.headers or {}
        status = headers.get("Status")
        if status is not None:
            if status in ("404", "408", "409"):
                pending = headers.get("Nats-Pending-Messages")
                if pending and pending.isdigit():
                    unfilled = int(pending)
                    self._outstanding = max(0, self._outstanding - unfilled)
                    if status == "408" and unfilled and not self._stopped and self._nc.is_connected:
                        self.renewals += 1
                        with contextlib.suppress(Exception):  # the owner's next want() asks again
                            await self._request(unfilled)
                elif status == "409":
                    self.reset()
            elif status == "503":  # no consumer leader right now (an election): ask again at the next poll
                self.reset()
            return
        self._outstanding = max(0, self._outstanding - 1)
        if self._handle is not None:
            self._handle(WorkMsg(msg))
            self._wake.set()
        else:
            self._queue.put_nowait(WorkMsg(msg))

    async def serve(
        self, handle: Callable[[WorkMsg], None], free: Callable[[], int], until: asyncio.Event, *, poll: float = 0.5
    ) -> None:
        """Keep ``free()`` messages asked for and hand each to ``handle`` as it arrives, until ``until`` is set.

        ``handle`` is called from the subscription's callback and should only start a task: a message then
        reaches its worker one loop turn after it is read, rather than through a queue and this loop as
        :meth:`next` hands it. Credit is topped up after each delivery, on :meth:`wake` (call it when a
        slot frees) and every ``poll`` seconds (after a reconnect the server has forgotten our requests).
        Errors asking for messages are logged and retried at the next wake-up.
        """
        for msg in self.drain_queued():
            handle(msg)
        self._handle = handle
        try:
            while not until.is_set():
                slots = free()
                if slots > 0:
                    try:
                        await self.want(slots)
                    except Exception as e:
                        log.warning("pull.request_failed", subject=self._next_subject, error=str(e) or type(e).__name__)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll):
                        await self._wake.wait()
        finally:
            self._handle = None

    def wake(self) -> None:
        """Have :meth:`serve` look at ``free()`` again now (a slot was freed)."""
        self._wake.set()

    async def next(self, timeout: float) -> WorkMsg | None:
        """The next pulled message, or None after ``timeout`` seconds."""
        if not self._queue.empty():
            return self._queue.get_nowait()  # under load: no timer to arm and cancel
        try:
            async with asyncio.timeout(timeout):
                return await self._queue.get()
        except TimeoutError:
            return None

    def drain_queued(self) -> list[WorkMsg]:
        """Messages delivered to us but not handed out yet (to nak on shutdown)."""
        out = []
        while not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out

    async def stop(self) -> None:
        """Stop receiving (and renewing requests)."""
        self._stopped = True
        with contextlib.suppress(Exception):
            if self._sub is not None:
                await self._sub.unsubscribe()


class Subscription:
    """A core NATS subscription."""

    def __init__(self, sub: Any) -> None:
        self._sub = sub

    async def unsubscribe(self) -> None:
        """Stop receiving."""
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()


class _PubAcks:
    """JetStream publish acks of one connection, awaited on one wildcard inbox subscription.

    nats-py's ``JetStreamContext.publish`` pays per publish for a random token (a system call), an
    ``asyncio.wait_for`` (a second future and a timer) and a JSON parse into its dataclass. Here a
    publish gets a counter token and one future; one sweep timer fails whatever is past its deadline.
    """

    SWEEP = 0.25

    def __init__(self, nc: NatsClient) -> None:
        self._nc = nc
        self._prefix = ""
        self._waiting: dict[str, tuple[asyncio.Future[NatsMsg], float]] = {}
        self._count = 0
        self._sub: Any = None
        self._starting: asyncio.Lock | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def publish(self, subject: str, data: bytes, headers: Headers | None, timeout: float) -> NatsMsg:
        """Publish with a reply inbox of ours; the stream's answer (raises ``TimeoutError`` after ``timeout``)."""
        if self._sub is None:
            await self._start()
        loop = asyncio.get_running_loop()
        self._count += 1
        token = str(self._count)
        future: asyncio.Future[NatsMsg] = loop.create_future()
        self._waiting[token] = (future, loop.time() + timeout)
        try:
            await self._nc.publish(subject, data, reply=self._prefix + token, headers=headers or None)
            if self._sweeper is None:
                self._sweeper = loop.call_later(self.SWEEP, self._sweep)
            return await future
        finally:
            self._waiting.pop(token, None)

    def fail_all(self, error: Exception) -> None:
        """Fail every publish still waiting (the connection is closing)."""
        for future, _ in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()

    async def _start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._sub is None:
                inbox = self._nc.new_inbox()
                self._prefix = inbox + "."
                self._sub = await self._nc.subscribe(inbox + ".*", cb=self._on_ack)

    async def _on_ack(self, msg: NatsMsg) -> None:
        entry = self._waiting.pop(msg.subject[len(self._prefix) :], None)
        if entry is not None and not entry[0].done():
            entry[0].set_result(msg)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        expired = [token for token, (_, deadline) in self._waiting.items() if deadline <= now]
        for token in expired:
            future, _ = self._waiting.pop(token)
            if not future.done():
                future.set_exception(TimeoutError())
        self._sweeper = loop.call_later(self.SWEEP, self._sweep) if self._waiting else None


class Bus:
    """A process's NATS connection (core + JetStream) in the namespace's terms."""

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        reconnect_listeners: list[Callable[[], None]] | None = None,
        disconnect_listeners: list[Callable[[], None]] | None = None,
    ):
        self._nc = nc
        self._js = nc.jetstream()
        self._acks = _PubAcks(nc)
        self.subjects = subjects
        self._reconnect_listeners = reconnect_listeners if reconnect_listeners is not None else []
        self._disconnect_listeners = disconnect_listeners if disconnect_listeners is not None else []
        self._conn_state: dict[str, bool] = {"closing": False}

    def on_reconnect(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every reconnect."""
        self._reconnect_listeners.append(listener)

    def on_disconnect(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` when the connection drops (before any message of the next connection)."""
        self._disconnect_listeners.append(listener)

    @classmethod
    async def connect(cls, settings: Settings, *, name: str = "a2amesh", url: str | None = None) -> Bus:
        """Connect to NATS with the settings' URL and credentials.

        Raises:
            TransportError: ``UNAVAILABLE`` when no server answers.
        """
        servers = [u.strip() for u in (url or settings.nats_url or "nats://127.0.0.1:4222").split(",") if u.strip()]
        blog = log.bind(conn=name)

        async def on_error(e: Exception) -> None:
            blog.warning("nats.error", error=str(e) or type(e).__name__)

        state = {"closing": False}

        dropped: list[Callable[[], None]] = []

        async def on_disconnected() -> None:
            if not state["closing"]:
                blog.warning("nats.disconnected")
                for listener in dropped:
                    listener()

        listeners: list[Callable[[], None]] = []

        async def on_reconnected() -> None:
            blog.info("nats.reconnected")
            for listener in listeners:
                listener()

        opts: dict[str, Any] = {
            "servers": servers,
            "name": name,
            "error_cb": on_error,
            "disconnected_cb": on_disconnected,
            "reconnected_cb": on_reconnected,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            # a server that stops answering without closing the connection (paused, partitioned) is left
            # after PING_INTERVAL * MAX_OUTSTANDING_PINGS seconds for another one of the URLs
            "ping_interval": PING_INTERVAL,
            "max_outstanding_pings": MAX_OUTSTANDING_PINGS,
            "connect_timeout": 5,
            "allow_reconnect": True,
        }
        opts.update(_credentials(settings))
        try:
            # nats-py retries the first connection for ever when reconnects are unlimited: bounded here
            async with asyncio.timeout(settings.connect_timeout):
                nc = NATS_CLIENT()
                await nc.connect(**opts)
        except TimeoutError as e:
            raise TransportError(
                codes.UNAVAILABLE,
                f"no NATS server answered at {', '.join(servers)} within {settings.connect_timeout:g}s "
                "(is it running? set NATS_URL, or A2AMESH_CONNECT_TIMEOUT to wait longer)",
            ) from e
        except Exception as e:
            raise TransportError(codes.UNAVAILABLE, f"cannot connect to NATS at {', '.join(servers)}: {e}") from e
        bus = cls(nc, Subjects(settings.namespace), listeners, dropped)
        bus._conn_state = state
        return bus

    @property
    def max_payload(self) -> int:
        """The server's max_payload in bytes."""
        return int(self._nc.max_payload)

    @property
    def connected(self) -> bool:
        """Whether the connection is up right now."""
        return bool(self._nc.is_connected)

    async def close(self) -> None:
        """Drain subscriptions and close the connection."""
        if self._nc.is_closed:
            return
        self._conn_state["closing"] = True
        try:
            async with asyncio.timeout(5):
                await self._nc.drain()
        except Exception:
            with contextlib.suppress(Exception):
                await self._nc.close()
        self._acks.fail_all(nats.errors.ConnectionClosedError())

    # core NATS
    async def publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        """Fire-and-forget publish."""
        await self._nc.publish(subject, data, headers=headers or None)

    async def flush(self, timeout: float = 5) -> None:
        """Wait until the server has processed everything sent so far."""
        await self._nc.flush(timeout=int(max(timeout, 1)))

    async def subscribe(
        self, subject: str, handler: Callable[[Received], Awaitable[None]], *, queue: str = ""
    ) -> Subscription:
        """Subscribe ``handler`` to ``subject`` (in a queue group when ``queue`` is given)."""

        async def cb(msg: NatsMsg) -> None:
            await handler(Received(msg.subject, msg.data, dict(msg.headers or {}), msg.reply or ""))

        return Subscription(await self._nc.subscribe(subject, queue=queue, cb=cb))

    async def request(self, subject: str, data: bytes, headers: Headers | None, timeout: float) -> Received:
        """Request-reply over core NATS.

        Raises:
            TransportError: ``UNAVAILABLE`` (no responders) or ``DEADLINE_EXCEEDED`` (no answer in time).
        """
        try:
            msg = await self._nc.request(subject, data, timeout=timeout, headers=headers or None)
        except nats.errors.NoRespondersError as e:
            raise TransportError(codes.UNAVAILABLE, f"no responders on {subject}") from e
        except (TimeoutError, nats.errors.TimeoutError) as e:
            raise TransportError(codes.DEADLINE_EXCEEDED, f"no answer on {subject} within {timeout:g}s") from e
        return Received(msg.subject, msg.data, dict(msg.headers or {}), msg.reply or "")

    # JetStream
    async def js_publish(
        self, subject: str, data: bytes, headers: Headers | None = None, timeout: float = PUBLISH_TIMEOUT
    ) -> PubAck:
        """Publish to a stream and wait for its ack, riding out a stream leader election.

        An attempt that gets no ack in time (:data:`ATTEMPT_TIMEOUT`, growing; the leader died with it), finds
        no stream leader on a cluster (``503``) or meets a reconnecting connection is sent again, with the
        same ``Nats-Msg-Id`` (one is added when the caller gave none), until ``timeout``: the stream's
        de-duplication keeps one copy. The ack of a later attempt may then say ``duplicate`` for the
        caller's own first copy: a caller that follows a duplicate's task (as the client does) must be fine
        following its own.

        Raises:
            TransportError: ``UNAVAILABLE`` when no stream acknowledged it within ``timeout``, no stream
                captures the subject, the stream refused it, or the connection is closed.
        """
        if headers is None or h.MSG_ID not in headers:  # every attempt must carry the same id
            headers = {**(headers or {}), h.MSG_ID: f"pub:{nuid()}"}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wait = ATTEMPT_TIMEOUT

        async def attempt() -> PubAck:
            nonlocal wait
            try:
                return await self._publish_once(
                    subject, data, headers, max(min(wait, deadline - loop.time()), 0.001), timeout
                )
            except _Retryable as e:
                if e.maybe_stored:
                    wait = min(wait * 1.5, ATTEMPT_TIMEOUT_MAX)
                raise

        return await ride_out(
            f"a publish to {subject}",
            attempt,
            within=timeout,
            transient=lambda e: isinstance(e, _Retryable),
            pause=RETRY_PAUSE,
            pause_max=RETRY_PAUSE_MAX,
            gave_up=_gave_up,
        )

    async def _publish_once(
        self, subject: str, data: bytes, headers: Headers | None, timeout: float, total: float
    ) -> PubAck:
        try:
            msg = await self._acks.publish(subject, data, headers, timeout)
        except TimeoutError as e:
            error = TransportError(codes.UNAVAILABLE, f"JetStream did not acknowledge {subject} in {total:g}s")
            error.__cause__ = e
            raise _Retryable(error, maybe_stored=True) from e
        except nats.errors.ConnectionClosedError as e:
            raise TransportError(codes.UNAVAILABLE, f"cannot publish {subject}: {e}") from e
        except nats.errors.Error as e:  # reconnecting, buffer full
            error = TransportError(codes.UNAVAILABLE, f"cannot publish {subject}: {e}")
            error.__cause__ = e
            raise _Retryable(error, maybe_stored=True) from e
        if msg.headers and msg.headers.get("Status") == "503":
            error = TransportError(codes.UNAVAILABLE, f"no stream captures {subject} (run `a2amesh init`)")
            if self.clustered:  # a replicated stream without a leader for a moment answers the same
                raise _Retryable(error, maybe_stored=False)
            raise error
        try:
            ack = loads(msg.data)
            if "error" in ack:
                err = ack["error"]
                error = TransportError(codes.UNAVAILABLE, f"JetStream refused {subject}: {err.get('description', err)}")
                if err.get("code") == 503:  # JetStream or the stream is unavailable for a moment
                    raise _Retryable(error, maybe_stored=False)
                if err.get("err_code") == DUPLICATE_IN_PROCESS:  # an earlier attempt's copy is being stored
                    raise _Retryable(error, maybe_stored=True)
                raise error
            return PubAck(str(ack["stream"]), int(ack["seq"]), bool(ack.get("duplicate", False)))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise TransportError(codes.UNAVAILABLE, f"JetStream answered {subject} with {msg.data[:200]!r}") from e

    @property
    def clustered(self) -> bool:
        """Whether the server this connection is on is part of a cluster."""
        return bool(self._nc._server_info.get("cluster"))

    async def direct_get_last(self, stream: str, subject: str) -> StoredMsg | None:
        """The last message stored on ``subject`` (direct get), or None."""
        try:
            raw = await ride_out(
                f"the last message on {subject} in stream {stream}",
                functools.partial(self._js._jsm.get_msg, stream, subject=subject, direct=True),
            )
        except nats.js.errors.NotFoundError:
            return None
        return StoredMsg(raw.subject or subject, int(raw.seq or 0), raw.data or b"", dict(raw.headers or {}), raw.time)

    async def last_seq(self, stream: str) -> int:
        """The sequence of the last message stored in ``stream`` (0 when empty).

        Raises:
            TransportError: ``UNAVAILABLE`` when the stream does not exist.
        """
        try:
            info = await ride_out(f"stream {stream}", functools.partial(self._js.stream_info, stream))
        except nats.js.errors.NotFoundError as e:
            raise TransportError(codes.UNAVAILABLE, f"stream {stream} does not exist (run `a2amesh init`)") from e
        return int(info.state.last_seq or 0)

    async def follow(
        self, stream: str, subject: str, *, after: int | None, idle: float
    ) -> AsyncGenerator[StoredMsg | None]:
        """Messages of ``stream`` on ``subject`` (wildcards allowed), from the one after sequence ``after`` (None:
        only new ones), through an ordered ephemeral consumer. ``None`` first, once the consumer exists, then
        whenever ``idle`` seconds pass without a message. The consumer goes when the iterator is closed.

        Raises:
            TransportError: ``UNAVAILABLE`` when the stream does not exist.
        """
        if after is None:
            config = js_api.ConsumerConfig(deliver_policy=js_api.DeliverPolicy.NEW)
        else:
            config = js_api.ConsumerConfig(
                deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1
            )
        try:
            sub = await ride_out(
                f"a consumer of {subject} in stream {stream}",
                functools.partial(self._js.subscribe, subject, stream=stream, ordered_consumer=True, config=config),
            )
        except nats.js.errors.NotFoundError as e:
            raise TransportError(codes.UNAVAILABLE, f"stream {stream} does not exist (run `a2amesh init`)") from e
        try:
            yield None
            while True:
                try:
                    msg = await sub.next_msg(timeout=idle)
                except (TimeoutError, nats.errors.TimeoutError):
                    yield None
                    continue
                meta = msg.metadata
                yield StoredMsg(
                    msg.subject, int(meta.sequence.stream), msg.data, dict(msg.headers or {}), meta.timestamp
                )
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def pull_consumer(self, stream: str, durable: str) -> PullConsumer:
        """A started pull consumer on an existing durable consumer."""
        consumer = PullConsumer(self._nc, stream, durable)
        await consumer.start()
        self.on_reconnect(consumer.reset)
        return consumer

    async def kv(self, bucket: str) -> Kv:
        """Bind to an existing KV bucket."""
        try:
            kv = await ride_out(f"KV bucket {bucket}", functools.partial(self._js.key_value, bucket))
        except nats.js.errors.BucketNotFoundError as e:
            raise TransportError(
                codes.UNAVAILABLE,
                f"KV bucket {bucket} does not exist on this NATS server: run `a2amesh init` "
                "(or `a2amesh up`) for this namespace first",
            ) from e
        return Kv(kv, self._js, bucket)

    # administration (used by bus.setup only)
    @property
    def jsm(self) -> Any:
        """The JetStream manager (stream/consumer/bucket administration)."""
        return self._js

    @property
    def js_api(self) -> Any:
        """nats-py's JetStream API module (config classes)."""
        return js_api


def _credentials(settings: Settings) -> dict[str, Any]:
    """nats-py options for the settings' inbox scope, credentials and TLS."""
    opts: dict[str, Any] = {}
    if settings.reply_scope:  # inboxes a server can restrict this user to (docs/scaling.md)
        opts["inbox_prefix"] = f"_INBOX.{settings.reply_scope}"
    if settings.nats_user:
        opts["user"] = settings.nats_user
    if settings.nats_password:
        opts["password"] = settings.nats_password.get_secret_value()
    if settings.nats_token:
        opts["token"] = settings.nats_token.get_secret_value()
    if settings.nats_creds:
        opts["user_credentials"] = settings.nats_creds
    if settings.nats_nkey_seed:
        opts["nkeys_seed"] = settings.nats_nkey_seed
    if settings.nats_tls_ca or settings.nats_tls_cert:
        import ssl

        ctx = ssl.create_default_context(cafile=settings.nats_tls_ca)
        if settings.nats_tls_cert:
            ctx.load_cert_chain(settings.nats_tls_cert, settings.nats_tls_key)
        opts["tls"] = ctx
    return opts
