"""Push notification configs of tasks (A2A 1.0 ``TaskPushNotificationConfig``), one Redis hash per task.

The gateway keeps no state of its own, so every replica reads a task's configs here: the one that created a
config, the one a later message of the task reaches, the one asked to list or delete it. A config is stored as
its ProtoJSON text, token and credentials included (they are what the webhook expects back); the hash expires
``ttl`` (the mesh's task retention) after its last write, as the task's record does.
"""

from __future__ import annotations

from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis

__all__ = ["PushConfigStore"]


class PushConfigStore:
    """A task's push notification configs by id.

    Args:
        redis: the process's Redis client (``decode_responses=True``).
        keys: the namespace's key builder.
        ttl: seconds a task's configs live after the last write.
    """

    def __init__(self, redis: Redis, keys: Keys, *, ttl: float) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl = max(1, int(ttl))

    async def put(self, task_id: str, config_id: str, config_json: str) -> None:
        """Store (or replace) one config."""
        key = self.keys.push_configs(task_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, config_id, config_json)
            pipe.expire(key, self.ttl)
            await pipe.execute()

    async def get(self, task_id: str, config_id: str) -> str | None:
        """One config's JSON, or None."""
        value = await self.redis.hget(self.keys.push_configs(task_id), config_id)
        return None if value is None else str(value)

    async def all(self, task_id: str) -> dict[str, str]:
        """Every config of the task, by id."""
        values = await self.redis.hgetall(self.keys.push_configs(task_id))
        return {str(k): str(v) for k, v in values.items()}

    async def delete(self, task_id: str, config_id: str) -> bool:
        """Remove one config; whether it was there."""
        return bool(await self.redis.hdel(self.keys.push_configs(task_id), config_id))
