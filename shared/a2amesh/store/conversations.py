"""Conversation history of an agent per ``contextId``, and the fenced per-context lock (SPEC §3.8).

An LLM agent with ``history: true`` holds the lock of a context for a whole turn, so two replicas
never work on one conversation at once; the history is appended only while the lock is still held
(the lock token is the fence), so a replica that lost its lock cannot write a stale turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from a2amesh.errors import StateConflict
from a2amesh.ids import nuid
from a2amesh.lifecycle import STOP_LIMIT, Background, cancel_and_wait
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis, load_script

__all__ = ["ContextLock", "ConversationStore"]


class ContextLock:
    """A held lock on one conversation; renewed in the background until released."""

    def __init__(self, store: ConversationStore, agent: str, context_id: str, token: str, ttl: float) -> None:
        self.agent = agent
        self.context_id = context_id
        self.token = token
        self._store = store
        self._ttl = ttl
        self.lost = False
        self._renewing = Background()
        self._renewer: asyncio.Task[None] | None = None

    def start_renewing(self) -> None:
        self._renewer = self._renewing.spawn(self._renew_loop(), name=f"ctxlock-{self.context_id}")

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self._ttl / 3)
            try:
                if not await self._store._lock_op(self, "renew"):
                    self.lost = True
                    return
            except asyncio.CancelledError:
                raise
            except Exception:  # a Redis hiccup: try again at the next beat; the fence protects the writes
                continue

    async def release(self) -> None:
        """Stop renewing and release the lock if still held."""
        if self._renewer is not None:
            await cancel_and_wait(self._renewer, limit=STOP_LIMIT)
            self._renewer = None
        with contextlib.suppress(Exception):
            await self._store._lock_op(self, "release")


class ConversationStore:
    """Conversations of one namespace.

    Args:
        redis: the process's Redis client.
        keys: the namespace's key builder.
        retention: seconds a conversation is kept after its last turn.
        max_messages: the most recent messages kept per conversation.
    """

    def __init__(self, redis: Redis, keys: Keys, *, retention: float, max_messages: int = 200) -> None:
        self._r = redis
        self._k = keys
        self._ttl = max(int(retention), 1)
        self._max = max_messages
        self._lock_script = redis.register_script(load_script("context_lock"))
        self._append = redis.register_script(load_script("history_append"))

    async def load(self, agent: str, context_id: str) -> list[dict[str, Any]]:
        """The stored messages of a conversation, oldest first (OpenAI chat message objects)."""
        raw = await self._r.lrange(self._k.history(agent, context_id), 0, -1)
        return [json.loads(m) for m in raw]

    async def append(self, lock: ContextLock, messages: list[dict[str, Any]]) -> None:
        """Append messages to the locked conversation.

        Raises:
            StateConflict: the lock was lost (expired and taken by another replica).
        """
        if not messages:
            return
        done = await self._append(
            keys=[self._k.history(lock.agent, lock.context_id), self._k.context_lock(lock.agent, lock.context_id)],
            args=[lock.token, self._ttl, self._max, *(json.dumps(m) for m in messages)],
        )
        if not done:
            raise StateConflict(
                f"lost the lock of context {lock.context_id} of agent {lock.agent}; this turn is not saved"
            )

    @contextlib.asynccontextmanager
    async def lock(self, agent: str, context_id: str, *, ttl: float, timeout: float) -> AsyncIterator[ContextLock]:
        """Hold the lock of one conversation for the duration of the block.

        Raises:
            StateConflict: the lock is still held by another turn after ``timeout`` seconds.
        """
        key = self._k.context_lock(agent, context_id)
        token = nuid()
        give_up = time.monotonic() + timeout
        pause = 0.02
        while not await self._r.set(key, token, nx=True, px=max(int(ttl * 1000), 1)):
            if time.monotonic() > give_up:
                raise StateConflict(
                    f"context {context_id} of agent {agent} is busy with another turn (waited {timeout:g}s)"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        held = ContextLock(self, agent, context_id, token, ttl)
        held.start_renewing()
        try:
            yield held
        finally:
            await held.release()

    async def _lock_op(self, lock: ContextLock, op: str) -> bool:
        key = self._k.context_lock(lock.agent, lock.context_id)
        return bool(await self._lock_script(keys=[key], args=[op, lock.token, max(int(lock._ttl * 1000), 1)]))
