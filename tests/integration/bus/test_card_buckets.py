"""The cards and presence buckets follow the configured card TTL when `init` runs again."""

from __future__ import annotations

import uuid

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import ensure_buckets
from a2amesh.config import Settings


async def test_card_ttl_can_be_lowered_below_the_duplicate_window_and_raised_again(settings: Settings) -> None:
    """Guards against `init` failing with JetStream's "duplicates window can not be larger then max age" when the
    card TTL of an existing bucket, created with a TTL above the 2-minute de-duplication window, is lowered."""
    fresh = settings.model_copy(update={"namespace": f"ttl{uuid.uuid4().hex[:8]}", "card_ttl": 600.0})
    bus = await Bus.connect(fresh, name="test-buckets")
    try:
        buckets = [f"KV_{b}" for b in (bus.subjects.cards_bucket, bus.subjects.presence_bucket)]
        await ensure_buckets(bus, fresh)
        for stream in buckets:
            config = (await bus.jsm.stream_info(stream)).config
            assert (config.max_age, config.duplicate_window) == (600.0, 120.0), (stream, config)

        await ensure_buckets(bus, fresh.model_copy(update={"card_ttl": 5.0}))
        for stream in buckets:
            config = (await bus.jsm.stream_info(stream)).config
            assert config.max_age == 5.0, (stream, config.max_age)
            assert (config.duplicate_window or 0) <= 5.0, config.duplicate_window

        await ensure_buckets(bus, fresh.model_copy(update={"card_ttl": 300.0}))
        for stream in buckets:
            assert (await bus.jsm.stream_info(stream)).config.max_age == 300.0, stream
    finally:
        for stream in (f"KV_{bus.subjects.cards_bucket}", f"KV_{bus.subjects.presence_bucket}"):
            await bus.jsm.delete_stream(stream)
        await bus.close()
