"""Session-wide real servers for the tests: NATS (JetStream) and Valkey from the wheels, or NATS_URL / REDIS_URL."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from a2amesh.servers import NatsServer, ValkeyServer


@dataclass
class TestServers:
    """The servers of one test session. ``nats`` / ``valkey`` are None when external URLs are used."""

    nats_url: str
    redis_url: str
    nats: NatsServer | None
    valkey: ValkeyServer | None


def start_servers(tmp: Path) -> TestServers:
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
    return TestServers(nats_url, redis_url, nats, valkey)


def stop_servers(s: TestServers) -> None:
    """Stop the servers this session started."""
    for server in (s.nats, s.valkey):
        if server is not None:
            server.stop_sync()
