"""Cards and presence in KV (SPEC §3.7): publish with heartbeat, watch, age out, fail fast on unknown names."""

from __future__ import annotations

import asyncio
import datetime as dt

from pydantic import ValidationError

from a2amesh.bus.kv import Kv, KvEntry
from a2amesh.bus.nats import Bus
from a2amesh.bus.retry import ELECTION_WAIT
from a2amesh.errors import ConfigError, TransportError
from a2amesh.lifecycle import Background
from a2amesh.logs import get_logger
from a2amesh.protocol import AgentCard, codes

log = get_logger("registry")

WITHDRAW_LIMIT = 5.0
"""Seconds a stopping process spends withdrawing a card before leaving it to age out (NATS away)."""


def _age(entry_created: dt.datetime | None) -> float:
    if entry_created is None:
        return 0.0
    return (dt.datetime.now(dt.UTC) - entry_created).total_seconds()


class Registry:
    """A live view of the mesh's cards: read at once on start, then kept current by a KV watch.

    An entry older than the card TTL counts as gone even when the watch did not report its expiry.
    """

    def __init__(self, bus: Bus, *, card_ttl: float) -> None:
        self._bus = bus
        self._ttl = card_ttl
        self._cards: dict[str, tuple[AgentCard, dt.datetime | None]] = {}
        self._kv: Kv | None = None
        self._watching = Background()
        self._watch: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.changed = asyncio.Condition()

    async def start(self) -> None:
        """Bind the bucket, start the watch and wait for the initial values (bounded)."""
        if self._watch is not None:
            return
        self._kv = await self._bus.kv(self._bus.subjects.cards_bucket)
        self._watch = self._watching.spawn(self._run_watch(self._kv), name="registry-watch")
        try:
            async with asyncio.timeout(ELECTION_WAIT):  # the watch rides out an election of the bucket
                await self._ready.wait()
        except TimeoutError as e:
            raise TransportError(
                codes.UNAVAILABLE,
                f"the cards bucket {self._bus.subjects.cards_bucket} gave no values within {ELECTION_WAIT:g}s",
            ) from e

    async def stop(self) -> None:
        """Stop watching."""
        watch, self._watch = self._watch, None
        if watch is not None:
            self._watching.cancel()
            await self._watching.wait(timeout=2)
            if not self._ready.is_set():
                self._ready.set()

    async def _run_watch(self, kv: Kv) -> None:
        while True:
            try:
                async for entry in kv.watch():
                    if entry is None:
                        self._ready.set()
                        continue
                    await self._apply(entry)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a dropped watch (server restart): start it again
                log.warning("registry.watch_restart", error=str(e) or type(e).__name__)
                await asyncio.sleep(0.5)

    async def _apply(self, entry: KvEntry) -> None:
        if entry.deleted or not entry.value:
            self._cards.pop(entry.key, None)
        else:
            try:
                card = AgentCard.model_validate_json(entry.value)
            except ValidationError as e:
                log.warning("registry.bad_card", key=entry.key, error=str(e).splitlines()[0])
                return
            self._cards[entry.key] = (card, entry.created)
        async with self.changed:
            self.changed.notify_all()

    def cards(self) -> list[AgentCard]:
        """Every live card, by name."""
        return [c for name, (c, created) in sorted(self._cards.items()) if _age(created) <= self._ttl]

    def get(self, name: str) -> AgentCard | None:
        """The live card of ``name``, or None."""
        item = self._cards.get(name)
        if item is None or _age(item[1]) > self._ttl:
            return None
        return item[0]

    async def resolve(self, name: str) -> AgentCard:
        """The live card of ``name``, reading the bucket when the watch has not seen it yet.

        Raises:
            TransportError: ``AGENT_NOT_FOUND`` when no live card has that name.
        """
        card = self.get(name)
        if card is not None:
            return card
        if self._kv is not None:
            entry = await self._kv.get(name)
            if entry is not None and entry.value and _age(entry.created) <= self._ttl:
                await self._apply(entry)
                card = self.get(name)
                if card is not None:
                    return card
        live = ", ".join(c.name for c in self.cards()) or "none"
        raise TransportError(
            codes.AGENT_NOT_FOUND,
            f"agent {name!r} is not in the mesh (no live card in {self._bus.subjects.cards_bucket}; live: {live})",
            metadata={"agent": name},
        )

    async def wait_for(self, name: str, timeout: float) -> AgentCard:
        """Wait until ``name`` has a live card.

        A card only turns live by a put, which the watch applies and then notifies under the condition's lock; so
        checking under that lock and waiting for the next change misses none. (No ``asyncio.wait_for`` inside the
        timeout: on Python 3.11 it swallows the outer cancellation when its own wait ends in the same loop
        iteration, and the wait would then outlive its timeout as long as no card came.)

        Raises:
            TimeoutError: no live card within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout), self.changed:
            while (card := self.get(name)) is None:
                await self.changed.wait()
            return card


class CardPublisher:
    """Keeps one replica's card and presence key alive, and removes them on a clean stop."""

    def __init__(self, bus: Bus, card: AgentCard, *, instance: str, card_ttl: float) -> None:
        self._bus = bus
        self.card = card
        self._instance = instance
        self._ttl = card_ttl
        self._cards: Kv | None = None
        self._presence: Kv | None = None

    @property
    def presence_key(self) -> str:
        """This replica's key in the presence bucket."""
        return self._bus.subjects.presence_key(self.card.name, self._instance)

    async def publish(self) -> None:
        """Check the name is free for this card's type, then put card and presence.

        Raises:
            ConfigError: the name is held by a live card of the other type (agent vs workflow).
        """
        self._cards = await self._bus.kv(self._bus.subjects.cards_bucket)
        self._presence = await self._bus.kv(self._bus.subjects.presence_bucket)
        existing = await self._cards.get(self.card.name)
        if existing is not None and existing.value and _age(existing.created) <= self._ttl:
            try:
                other = AgentCard.model_validate_json(existing.value)
            except ValidationError:
                other = None
            if other is not None and other.agent_type != self.card.agent_type:
                raise ConfigError(
                    f"{self.card.agent_type} {self.card.name}",
                    "name",
                    f"the name {self.card.name!r} is already used by a live {other.agent_type}; choose another name",
                )
        await self.refresh()

    async def refresh(self) -> None:
        """Re-put card and presence (every TTL/3)."""
        assert self._cards is not None
        assert self._presence is not None
        await self._presence.put(self.presence_key, self._instance.encode())
        await self._cards.put(self.card.name, self.card.to_json_bytes())

    async def heartbeat(self) -> None:
        """Refresh forever, every TTL/3; errors are logged and retried (a NATS restart)."""
        me = asyncio.current_task()
        while True:
            await asyncio.sleep(self._ttl / 3)
            try:
                await self.refresh()
            except Exception as e:
                log.warning("registry.refresh_failed", agent=self.card.name, error=str(e) or type(e).__name__)
            if me is not None and me.cancelling():
                # nats-py swallows a CancelledError that lands inside a request; honour the cancel anyway
                raise asyncio.CancelledError

    async def withdraw(self, within: float = WITHDRAW_LIMIT) -> None:
        """Delete the presence key, and the card when no other replica of this agent is present.

        Bounded by ``within`` seconds: a stopping process whose NATS went away (each KV request would be ridden
        out for ``ELECTION_WAIT``) leaves the presence key and the card to age out (``card_ttl``), logged once
        (``card.withdraw_gave_up``), and goes on stopping.
        """
        if self._presence is None or self._cards is None:
            return
        try:
            async with asyncio.timeout(within):
                await self._withdraw()
        except TimeoutError:
            log.warning("card.withdraw_gave_up", card=self.card.name, within=within, left="to age out (card_ttl)")

    async def _withdraw(self) -> None:
        assert self._presence is not None
        assert self._cards is not None
        await self._presence.delete(self.presence_key)
        prefix = f"{self.card.name}."
        others = [k for k in await self._presence.keys() if k.startswith(prefix) and k != self.presence_key]
        live = []
        for key in others:
            entry = await self._presence.get(key)
            if entry is not None and _age(entry.created) <= self._ttl:
                live.append(key)
        if not live:
            await self._cards.delete(self.card.name)
