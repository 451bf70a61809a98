"""Remote agents declared through the management API: the store, and the announcement of each change.

``POST /api/remotes`` and ``DELETE /api/remotes/NAME`` write the declaration (:class:`RemoteStore`, Redis) and
then publish ``{ns}.events.remote.{name}.created|deleted``; every ``a2amesh remote serve --stored`` process
(started by ``a2amesh up``) hears it and starts or stops that remote's proxy at once. The event is a hint: the
write stands if it cannot be published, and those processes re-read the store on an interval anyway.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from a2amesh.bus.nats import Bus
from a2amesh.jsontext import dumps_bytes
from a2amesh.logs import get_logger
from a2amesh.remote.declare import REMOTE_EVENTS, RemoteStore
from a2amesh.remote.spec import RemoteSpec

__all__ = ["REMOTE_EVENTS", "Remotes"]

log = get_logger("manage")


class Remotes:
    """Declared remotes: reads from the store; changes stored, then announced on the bus.

    Args:
        store: the declarations (Redis).
        bus: where the changes are announced (``None``: not announced; proxies find them on their re-read).
    """

    def __init__(self, store: RemoteStore, bus: Bus | None) -> None:
        self.store = store
        self.bus = bus

    async def all(self) -> list[RemoteSpec]:
        """Every declaration, by name."""
        return await self.store.all()

    async def get(self, name: str) -> RemoteSpec | None:
        """The declaration of ``name``, or None."""
        return await self.store.get(name)

    async def add(self, spec: RemoteSpec) -> bool:
        """Store a named declaration and announce it; False (nothing announced) if that name is taken."""
        assert spec.name is not None
        if not await self.store.add(spec):
            return False
        await self._announce(spec.name, "created")
        return True

    async def remove(self, name: str) -> bool:
        """Forget a declaration and announce it; False if there was none of that name."""
        if not await self.store.remove(name):
            return False
        await self._announce(name, "deleted")
        return True

    async def _announce(self, name: str, event: Literal["created", "deleted"]) -> None:
        if self.bus is None:
            return
        payload = {"remote": name, "event": event, "timestamp": datetime.now(UTC).isoformat()}
        try:
            await self.bus.publish(self.bus.subjects.remote_event(name, event), dumps_bytes(payload))
        except Exception as e:  # the proxies re-read the store on their own; the write stands
            log.warning("remote.event_failed", remote=name, event=event, error=str(e) or type(e).__name__)
