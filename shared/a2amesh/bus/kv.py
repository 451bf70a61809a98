"""A JetStream KV bucket (cards, presence) behind the transport seam: put, get, delete, keys, and a watch that
gives the current values, one marker, then every change."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

import nats.js.errors
from nats.js.kv import KeyValue

from a2amesh.bus.retry import ride_out
from a2amesh.lifecycle import Background

__all__ = ["KV_MARKER_GRACE", "Kv", "KvEntry"]

_CLEANUPS = Background()
"""Fire-and-forget clean-ups (stopping a KV watcher), referenced until they finish."""


@dataclass(frozen=True)
class KvEntry:
    """One KV entry or deletion seen by a watcher."""

    key: str
    value: bytes | None
    revision: int
    created: dt.datetime | None
    deleted: bool


KV_MARKER_GRACE = 2.0  # s a watch waits for values the server delivered before it gives its marker


class Kv:
    """A JetStream KV bucket."""

    def __init__(self, kv: KeyValue, js: Any, bucket: str) -> None:
        self._kv = kv
        self._js = js
        self._bucket = bucket

    async def put(self, key: str, value: bytes) -> int:
        """Put a value; returns its revision (a put that meets an election is put again: the last value wins)."""
        return int(
            await ride_out(f"a put of {key} in KV bucket {self._bucket}", functools.partial(self._kv.put, key, value))
        )

    async def get(self, key: str) -> KvEntry | None:
        """The current entry (with its write time), or None when absent or deleted."""
        try:
            raw = await ride_out(
                f"key {key} of KV bucket {self._bucket}",
                functools.partial(
                    self._js._jsm.get_msg, f"KV_{self._bucket}", subject=f"$KV.{self._bucket}.{key}", direct=True
                ),
            )
        except nats.js.errors.NotFoundError:
            return None
        headers = dict(raw.headers or {})
        if headers.get("KV-Operation") in ("DEL", "PURGE"):
            return None
        return KvEntry(key, raw.data or b"", int(raw.seq or 0), _created(raw.time), False)

    async def delete(self, key: str) -> None:
        """Delete a key (a no-op when absent)."""
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            await ride_out(f"a delete of {key} in KV bucket {self._bucket}", functools.partial(self._kv.delete, key))

    async def keys(self) -> list[str]:
        """Every live key."""
        try:
            return list(await ride_out(f"the keys of KV bucket {self._bucket}", self._kv.keys))
        except nats.js.errors.NoKeysError:
            return []

    async def watch(self) -> AsyncIterator[KvEntry | None]:
        """Current values, then ``None`` once (initial values done), then every change."""
        watcher = await ride_out(f"a watch of KV bucket {self._bucket}", self._kv.watchall)
        # nats-py leaves these two unannotated
        next_entry = cast(Callable[[], Awaitable[Any]], watcher.__anext__)
        stop = cast(Callable[[], Coroutine[Any, Any, None]], watcher.stop)
        seen = 0  # entries given so far
        marker_due: int | None = None  # the marker waits until this many entries have been given
        try:
            while True:
                # not watcher.updates(): its wait_for can swallow a cancellation on Python 3.11
                try:
                    if marker_due is None:
                        e = await next_entry()
                    else:
                        async with asyncio.timeout(KV_MARKER_GRACE):
                            e = await next_entry()
                except StopAsyncIteration:
                    return
                except TimeoutError:  # what is missing was dropped by nats-py (an expiry marker): done
                    marker_due = None
                    yield None
                    continue
                if e is None:
                    # nats-py gives its marker when the server has nothing more pending for the watch, which
                    # can be before it has read values already on the wire: wait for as many entries as the
                    # server had delivered
                    delivered = await _delivered(watcher)
                    if seen >= delivered:
                        yield None
                    else:
                        marker_due = delivered
                    continue
                seen += 1
                deleted = e.operation in ("DEL", "PURGE")
                yield KvEntry(e.key, e.value, int(e.revision or 0), _created(e.created), deleted)
                if marker_due is not None and seen >= marker_due:
                    marker_due = None
                    yield None
        finally:
            # stopping a watcher can wait on the server: never let it hold up a cancellation
            _CLEANUPS.spawn(stop())


async def _delivered(watcher: Any) -> int:
    """How many messages the server has delivered to a KV watcher's consumer (0 when it cannot say)."""
    sub = getattr(watcher, "_sub", None)
    if sub is None:
        return 0
    try:
        info = await sub.consumer_info()
    except Exception:
        return 0
    return int(getattr(info.delivered, "consumer_seq", 0) or 0)


def _created(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, int | float):
        return dt.datetime.fromtimestamp(value / 1e9 if value > 1e12 else value, tz=dt.UTC)
    return None
