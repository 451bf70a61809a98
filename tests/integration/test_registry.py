"""The registry's wait for a card: bounded whatever the cards bucket does meanwhile."""

from __future__ import annotations

import asyncio
import contextlib

from a2amesh.bus.nats import Bus
from a2amesh.registry import Registry


async def test_waiting_for_a_card_ends_at_its_timeout_while_cards_change_all_the_time(bus: Bus) -> None:
    """A wait for a card that never comes raises TimeoutError at its timeout even when other cards change in the
    very loop iteration the timeout fires in (Python 3.11's ``asyncio.wait_for`` inside ``asyncio.timeout`` lost
    the timeout then, and a node waiting for its callee's card was never answered)."""
    registry = Registry(bus, card_ttl=3.0)
    await registry.start()

    async def churn() -> None:  # a card refreshed in every loop iteration
        while True:
            async with registry.changed:
                registry.changed.notify_all()
            await asyncio.sleep(0)

    churning = asyncio.create_task(churn())
    try:
        for attempt in range(200):
            waiting = asyncio.create_task(registry.wait_for("nobody", 0.005))
            done, _ = await asyncio.wait({waiting}, timeout=2)
            if not done:
                waiting.cancel()
            assert done, f"wait {attempt} for a card that never comes was still waiting 2 s after its 5 ms timeout"
            assert isinstance(waiting.exception(), TimeoutError), waiting.exception()
    finally:
        churning.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await churning
        await registry.stop()
