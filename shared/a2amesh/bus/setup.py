"""``a2amesh init``: create or update the namespace's streams, KV buckets and consumers (SPEC §3.2).

Idempotent. In verify mode (services at start) missing pieces are created and drifted settings updated;
a difference that JetStream cannot update in place (e.g. a stream's retention) is a clear startup error.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.js import api

from a2amesh.bus.nats import Bus
from a2amesh.bus.retry import ELECTION_WAIT, is_transient, ride_out
from a2amesh.config import Settings
from a2amesh.errors import ConfigError, TransportError
from a2amesh.logs import get_logger
from a2amesh.protocol import codes

log = get_logger("setup")

DUPLICATE_WINDOW = 120.0
EVENTS_MAX_AGE = 7 * 24 * 3600.0


def stream_configs(bus: Bus, settings: Settings) -> list[api.StreamConfig]:
    """The stream configs a namespace needs."""
    s = bus.subjects
    return [
        api.StreamConfig(
            name=s.tasks_stream,
            description="a2amesh work queue: SendMessage / SendStreamingMessage requests per agent",
            subjects=[s.request_all],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType.FILE,
            max_age=settings.tasks_max_age,
            duplicate_window=DUPLICATE_WINDOW,
            discard=api.DiscardPolicy.OLD,
            num_replicas=settings.replicas or 1,
        ),
        api.StreamConfig(
            name=s.replies_stream,
            description="a2amesh replies: task, state changes and finals of every call",
            subjects=[s.reply_all],
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE,
            max_age=settings.reply_final_ttl + 3600,
            duplicate_window=DUPLICATE_WINDOW,
            allow_direct=True,
            allow_msg_ttl=True,
            discard=api.DiscardPolicy.OLD,
            num_replicas=settings.replicas or 1,
        ),
        api.StreamConfig(
            name=s.events_stream,
            description="a2amesh lifecycle events of workflows and nodes",
            subjects=s.events_all,
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE,
            max_age=EVENTS_MAX_AGE,
            duplicate_window=DUPLICATE_WINDOW,
            discard=api.DiscardPolicy.OLD,
            num_replicas=settings.replicas or 1,
        ),
    ]


# Stream fields whose change needs a new stream (JetStream refuses to update them).
_IMMUTABLE = ("retention", "storage")
_COMPARED = (
    "subjects",
    "max_age",
    "duplicate_window",
    "allow_direct",
    "allow_msg_ttl",
    "retention",
    "storage",
    "num_replicas",
)


async def ensure_streams(bus: Bus, settings: Settings) -> None:
    """Create or update every stream of the namespace.

    Raises:
        ConfigError: when an existing stream differs in a setting that cannot be changed in place.
    """
    js = bus.jsm
    for cfg in stream_configs(bus, settings):
        try:
            info = await _admin(cfg.name, functools.partial(js.stream_info, cfg.name), settings)
        except nats.js.errors.NotFoundError:
            await _admin(cfg.name, functools.partial(js.add_stream, cfg), settings)
            log.info("stream.created", stream=cfg.name, replicas=settings.replicas)
            continue
        have = info.config
        if settings.replicas is None:
            cfg.num_replicas = have.num_replicas
        for field in _IMMUTABLE:
            if getattr(have, field) != getattr(cfg, field):
                raise ConfigError(
                    f"stream {cfg.name}",
                    field,
                    f"is {getattr(have, field)} but a2amesh needs {getattr(cfg, field)}; "
                    "delete the stream (nats stream rm) and run `a2amesh init`",
                )
        if any(_norm(getattr(have, f)) != _norm(getattr(cfg, f)) for f in _COMPARED):
            await _admin(cfg.name, functools.partial(js.update_stream, cfg), settings)
            log.info("stream.updated", stream=cfg.name, replicas=settings.replicas)


PLACEMENT_WAIT = ELECTION_WAIT
"""Seconds a stream, bucket or consumer request is asked again while the cluster reports a peer offline (a node
still joining or restarting) or JetStream does not answer in time (a cluster electing its leaders, a server
under load), before the error is reported."""

T = TypeVar("T")


async def _admin(
    name: str | None, request: Callable[[], Awaitable[T]], settings: Settings, *, kind: str = "stream"
) -> T:
    """Run a stream, bucket or consumer request (info, creation, update); its answer. A server that cannot hold
    the replicas asked for is a ConfigError.

    A cluster that cannot place the replicas because a peer is offline right now, and a request JetStream does
    not answer in time, are asked again for up to :data:`PLACEMENT_WAIT` seconds (:func:`ride_out`: creating or
    updating a stream with the same configuration again is harmless); JetStream still not answering is
    ``UNAVAILABLE``."""
    replicated = (settings.replicas or 1) > 1

    def transient(e: Exception) -> bool:
        if is_transient(e):
            return True
        if replicated and isinstance(e, nats.js.errors.APIError):
            description = str(e.description)
            return "peer offline" in description or "insufficient resources" in description
        return False

    def gave_up(e: Exception) -> BaseException:
        if isinstance(e, nats.js.errors.APIError) and not is_transient(e):
            return e  # a placement JetStream still refuses: answered below as the server says
        return TransportError(
            codes.UNAVAILABLE,
            f"JetStream did not answer for {kind} {name} within {PLACEMENT_WAIT:g}s "
            "(a cluster still electing its leaders, or a server too busy to answer)",
        )

    try:
        return await ride_out(
            f"{kind} {name}", request, within=PLACEMENT_WAIT, transient=transient, pause=0.2, gave_up=gave_up
        )
    except nats.js.errors.APIError as e:
        description = str(e.description)
        if replicated and ("replicas" in description or "peers" in description):
            raise ConfigError(
                f"{kind} {name}",
                "replicas",
                f"{settings.replicas} replicas need a JetStream cluster of at least {settings.replicas} nodes; "
                f"the server says: {description}",
            ) from e
        raise


def _norm(v: Any) -> Any:
    if v is None:
        return False
    if isinstance(v, float | int) and not isinstance(v, bool):
        return round(v, 3)
    if isinstance(v, list):
        return sorted(v)
    return v


async def ensure_buckets(bus: Bus, settings: Settings) -> None:
    """Create or update the cards and presence KV buckets (max_age = card TTL)."""
    js = bus.jsm
    for bucket in (bus.subjects.cards_bucket, bus.subjects.presence_bucket):
        stream = f"KV_{bucket}"
        try:
            info = await _admin(stream, functools.partial(js.stream_info, stream), settings)
        except nats.js.errors.NotFoundError:
            config = api.KeyValueConfig(
                bucket=bucket,
                history=1,
                ttl=settings.card_ttl,
                storage=api.StorageType.FILE,
                direct=True,
                replicas=settings.replicas or 1,
            )
            await _admin(stream, functools.partial(js.create_key_value, config), settings)
            log.info("bucket.created", bucket=bucket, replicas=settings.replicas)
            continue
        have = info.config
        if (
            round(have.max_age or 0, 3) != round(settings.card_ttl, 3)
            or not have.allow_direct
            or (settings.replicas is not None and (have.num_replicas or 1) != settings.replicas)
        ):
            have.max_age = settings.card_ttl
            # JetStream refuses a de-duplication window longer than max_age (what nats-py sets at create)
            have.duplicate_window = min(have.duplicate_window or DUPLICATE_WINDOW, settings.card_ttl)
            have.allow_direct = True
            have.num_replicas = settings.replicas or have.num_replicas
            await _admin(stream, functools.partial(js.update_stream, have), settings)
            log.info("bucket.updated", bucket=bucket, ttl=settings.card_ttl, replicas=settings.replicas)


def consumer_config(bus: Bus, settings: Settings, agent: str, *, max_ack_pending: int) -> api.ConsumerConfig:
    """The durable pull consumer of one agent's (or workflow's) work queue."""
    backoff = None
    if settings.deliver_backoff:
        backoff = [min(settings.ack_wait * 2**i, 600.0) for i in range(settings.max_deliver - 1)]
    return api.ConsumerConfig(
        durable_name=bus.subjects.consumer(agent),
        name=bus.subjects.consumer(agent),
        description=f"a2amesh work queue of {agent}",
        filter_subject=bus.subjects.request(agent),
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait,
        max_deliver=settings.max_deliver,
        backoff=backoff,
        max_ack_pending=max_ack_pending,
        max_waiting=512,
    )


async def ensure_consumer(bus: Bus, settings: Settings, agent: str, *, max_ack_pending: int) -> None:
    """Create or update the durable consumer of ``agent``."""
    js = bus.jsm
    cfg = consumer_config(bus, settings, agent, max_ack_pending=max_ack_pending)
    try:
        info = await _admin(
            cfg.durable_name,
            functools.partial(js.consumer_info, bus.subjects.tasks_stream, cfg.durable_name),
            settings,
            kind="consumer",
        )
    except nats.js.errors.NotFoundError:
        await _admin(
            cfg.durable_name,
            functools.partial(js.add_consumer, bus.subjects.tasks_stream, cfg),
            settings,
            kind="consumer",
        )
        log.info("consumer.created", consumer=cfg.durable_name)
        return
    have = info.config
    cfg.max_ack_pending = max(int(have.max_ack_pending or 0), max_ack_pending)
    differs = (
        round(have.ack_wait or 0, 3) != round(cfg.ack_wait or 0, 3)
        or have.max_deliver != cfg.max_deliver
        or [round(b, 3) for b in have.backoff or []] != [round(b, 3) for b in cfg.backoff or []]
        or have.max_ack_pending != cfg.max_ack_pending
        or have.filter_subject != cfg.filter_subject
    )
    if differs:
        try:
            await _admin(
                cfg.durable_name,
                functools.partial(js.add_consumer, bus.subjects.tasks_stream, cfg),
                settings,
                kind="consumer",
            )
        except nats.js.errors.APIError as e:
            raise ConfigError(
                f"consumer {cfg.durable_name}", "", f"cannot be updated to the configured settings: {e.description}"
            ) from e
        log.info("consumer.updated", consumer=cfg.durable_name)


async def init_mesh(bus: Bus, settings: Settings) -> None:
    """Create or update the streams and KV buckets of the namespace (consumers come with their agents)."""
    await ensure_streams(bus, settings)
    await ensure_buckets(bus, settings)
