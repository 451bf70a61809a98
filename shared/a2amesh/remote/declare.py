"""Declaring a remote agent: the one code path of ``a2amesh remote add`` and ``POST /api/remotes``.

:func:`check_remote` fetches and checks the card (a bad card is one :class:`~a2amesh.errors.RemoteError` naming
the URL and the problem) and settles the mesh name; :class:`RemoteStore` keeps the declarations made through the
management API in Redis, where ``a2amesh remote serve --stored`` reads them (``remote/stored.py``). Declarations
hold where secrets are read from (an env var's name, a file's path), never their values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from a2amesh.errors import ConfigError
from a2amesh.remote.cards import RemoteCard, fetch_card, mesh_name
from a2amesh.remote.http import make_http_client
from a2amesh.remote.spec import RemoteSpec, parse_remote
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis

__all__ = ["REMOTE_EVENTS", "CheckedRemote", "RemoteStore", "check_remote", "declaration"]

REMOTE_EVENTS = ("created", "deleted")
"""The lifecycle events of a remote declared through the API (``{ns}.events.remote.{name}.{event}``)."""


@dataclass(frozen=True)
class CheckedRemote:
    """A declaration whose card was fetched and found usable, with its mesh name settled."""

    spec: RemoteSpec
    card: RemoteCard

    @property
    def name(self) -> str:
        assert self.spec.name is not None
        return self.spec.name


def declaration(spec: RemoteSpec) -> dict[str, Any]:
    """The declaration as written under ``remote:`` (defaults left out)."""
    return spec.model_dump(mode="json", exclude_defaults=True)


async def check_remote(spec: RemoteSpec, *, source: str) -> CheckedRemote:
    """Fetch and check the remote's card, and name it (the declared name, else the card's).

    Raises:
        RemoteError: the card cannot be used (unreachable, not A2A, invalid, no usable interface).
        ConfigError: a secret the declaration names cannot be read, or its CA file cannot be loaded.
    """
    http = make_http_client(spec, source=source)
    try:
        remote = await fetch_card(http, spec)
    finally:
        await http.aclose()
    named = spec.model_copy(update={"name": mesh_name(spec, remote)})
    return CheckedRemote(spec=named, card=remote)


class RemoteStore:
    """The remote agents declared through the management API (a Redis hash: name → declaration JSON)."""

    def __init__(self, redis: Redis, namespace: str) -> None:
        self.redis = redis
        self.key = Keys(namespace).remotes()

    async def add(self, spec: RemoteSpec) -> bool:
        """Store a named declaration; False if that name is taken."""
        assert spec.name is not None
        return bool(await self.redis.hsetnx(self.key, spec.name, json.dumps(declaration(spec))))

    async def get(self, name: str) -> RemoteSpec | None:
        raw = await self.redis.hget(self.key, name)
        return None if raw is None else parse_remote({"remote": json.loads(raw)}, f"stored remote {name}")

    async def all(self) -> list[RemoteSpec]:
        raw = cast(dict[str, str], await self.redis.hgetall(self.key))
        return [parse_remote({"remote": json.loads(v)}, f"stored remote {k}") for k, v in sorted(raw.items())]

    async def readable(self) -> tuple[list[RemoteSpec], dict[str, str]]:
        """Every declaration that can be read, by name, and the problem of each that cannot (by name): one
        written by another release, or by hand, does not hide the others."""
        raw = cast(dict[str, str], await self.redis.hgetall(self.key))
        specs: list[RemoteSpec] = []
        problems: dict[str, str] = {}
        for name, value in sorted(raw.items()):
            try:
                specs.append(parse_remote({"remote": json.loads(value)}, f"stored remote {name}"))
            except (ConfigError, ValueError) as e:
                problems[name] = str(e)
        return specs, problems

    async def remove(self, name: str) -> bool:
        """Forget a declaration; False if there was none of that name."""
        return bool(await self.redis.hdel(self.key, name))
