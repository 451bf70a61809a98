"""services/probe.py, the readiness check of the agent and executor images (they serve no HTTP): ready exactly
while the process's network namespace holds an established connection to a NATS port of NATS_URL."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from a2amesh.bus.nats import Bus
from a2amesh.servers import free_port
from tests.support.servers import MeshServers

PROBE = Path(__file__).resolve().parents[2] / "services" / "probe.py"


async def probe(nats_url: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(PROBE), env={"NATS_URL": nats_url}, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, err.decode()


async def test_probe_is_ready_while_a_nats_connection_is_open(bus: Bus, servers: MeshServers) -> None:
    """Guards against a probe that passes without a connection to NATS (or fails with one), and against a
    cluster URL list whose other ports hide the one connected."""
    unused = free_port()
    code, err = await probe(f"nats://127.0.0.1:{unused}, {servers.nats_url}")
    assert (code, err) == (0, "")
    code, err = await probe(f"nats://127.0.0.1:{unused}")
    assert code == 1
    assert err.strip() == f"not ready: no established connection to NATS (port {unused})"
