"""SIGTERM with NATS gone: agents and executors exit within a bound instead of hanging until SIGKILL."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client
from a2amesh.config import Settings
from tests.process.test_executor_processes import start_executor, write_behaviour_agent
from tests.support.processes import Proc, ProcessFactory
from tests.support.servers import MeshServers
from tests.support.waiting import eventually

WORKFLOWS = 3
EXIT_WITHIN = 30.0
"""Generous for a loaded machine: the card withdrawals' bound (5 s, at once for all of a replica's cards), the
connection's drain (5 s) and the rest of the stop. Without the bound, each card's KV requests were ridden out
for 20 s, one card after another (an executor of 3 workflows: over a minute), past any orchestrator's patience."""


@pytest.fixture
async def own(
    fault_servers: MeshServers, namespace: str, tmp_path: Path
) -> AsyncIterator[tuple[Client, ProcessFactory]]:
    settings = Settings.load(
        environ={},
        profile="test",
        nats_url=fault_servers.nats_url,
        redis_url=fault_servers.redis_url,
        namespace=namespace,
    )
    bus = await Bus.connect(settings, name="shutdown-test")
    await init_mesh(bus, settings)
    client = Client(bus, settings)
    await client.start()
    factory = ProcessFactory(settings, tmp_path)
    try:
        yield client, factory
    finally:
        await factory.cleanup()
        await client.close()
        await bus.close()


async def _stops(proc: Proc, what: str) -> None:
    proc.signal(signal.SIGTERM)
    code = await proc.wait(EXIT_WITHIN)
    log = proc.output()
    assert code == 0, f"the {what} exited {code}: {log[-3000:]}"
    assert '"event":"card.withdraw_gave_up"' in log, f"the {what} did not say it left its cards: {log[-3000:]}"


async def test_sigterm_after_nats_went_away_exits_in_bounded_time(
    own: tuple[Client, ProcessFactory], fault_servers: MeshServers, tmp_path: Path
) -> None:
    """NATS stops; then SIGTERM: the executor (3 workflows) and the agent each exit 0 within the bound, saying
    that they left their cards and presence keys to age out."""
    client, processes = own
    agent = await processes.start("agent", str(write_behaviour_agent(tmp_path, "tag", "tag")))
    folder = tmp_path / "wf"
    folder.mkdir()
    for i in range(WORKFLOWS):
        (folder / f"quiet{i}.yaml").write_text(
            f"name: quiet{i}\nnodes:\n  - {{id: only, type: agent, agent_name: tag, input: {{v: 1}}}}\n"
        )
    executor = await start_executor(processes, folder, client, "quiet0")
    await eventually(
        lambda: all(client.registry.get(n) for n in ("tag", *(f"quiet{i}" for i in range(WORKFLOWS)))),
        timeout=20,
        what="every card",
    )
    assert fault_servers.nats is not None
    await fault_servers.nats.stop()
    await _stops(executor, "executor")
    await _stops(agent, "agent")
