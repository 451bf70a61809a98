"""A KV watch gives every current value before its initial-values marker (the card registry's snapshot)."""

from __future__ import annotations

from a2amesh.bus.nats import Bus
from a2amesh.config import Settings

KEYS = 300


async def test_the_marker_comes_after_every_current_value(bus: Bus, settings: Settings) -> None:
    """nats-py's watcher can put its marker before values already on the wire; ours must not."""
    kv = await bus.kv(bus.subjects.cards_bucket)
    for i in range(KEYS):
        await kv.put(f"k{i:03d}", b"{}")
    for attempt in range(20):
        seen: set[str] = set()
        async for entry in kv.watch():
            if entry is None:
                break
            seen.add(entry.key)
        missing = {f"k{i:03d}" for i in range(KEYS)} - seen
        assert not missing, f"watch {attempt}: the marker came before {len(missing)} current values"
