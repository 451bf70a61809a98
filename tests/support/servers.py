"""Session-wide real servers for the tests: NATS (JetStream) and Valkey from the wheels, or NATS_URL / REDIS_URL."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from a2amesh.servers import NatsServer, ValkeyServer


@dataclass
class MeshServers:
    """The servers of one test session. ``nats`` / ``valkey`` are None when external URLs are used."""

    nats_url: str
    redis_url: str
    nats: NatsServer | None
    valkey: ValkeyServer | None


def start_servers(tmp: Path) -> MeshServers:
    """Start (or adopt, from NATS_URL / REDIS_URL) the servers of a test session."""
    nats = valkey = None
    nats_url = os.environ.get("NATS_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")
    if not nats_url:
        nats = NatsServer(data_dir=tmp / "nats")
        nats.start_sync()
        nats_url = nats.url
    if not redis_url:
        valkey = ValkeyServer(data_dir=tmp / "valkey")
        valkey.start_sync()
        redis_url = valkey.url
    return MeshServers(nats_url, redis_url, nats, valkey)


def stop_servers(s: MeshServers) -> None:
    """Stop the servers this session started."""
    for server in (s.nats, s.valkey):
        if server is not None:
            server.stop_sync()


def own_servers(tmp: Path) -> MeshServers:
    """A fresh NATS + Valkey pair for one fault test (it may stop, restart or SIGSTOP them)."""
    nats = NatsServer(data_dir=tmp / "own-nats")
    valkey = ValkeyServer(data_dir=tmp / "own-valkey")
    nats.start_sync()
    try:
        valkey.start_sync()
    except BaseException:
        nats.stop_sync()
        raise
    return MeshServers(nats.url, valkey.url, nats, valkey)
