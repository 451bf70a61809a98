"""Fixtures shared by every test: real servers per session, a namespace per test, clients and hosts."""

from __future__ import annotations

import asyncio
import contextlib

# pytest_plugins set below once the fake LLM exists
import importlib.util as _ilu
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.node_handler import NodeHandler
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.store.redis import Redis, connect_redis
from tests.support import phases
from tests.support.processes import ProcessFactory
from tests.support.servers import (
    ClusterServers,
    MeshServers,
    own_cluster,
    own_servers,
    start_servers,
    stop_cluster,
    stop_servers,
)

pytest_plugins = [
    *(["tests.fakes.fixtures"] if _ilu.find_spec("tests.fakes.fixtures") else []),
    "tests.support.builtins",
    "tests.support.executors",
    "tests.support.gateway",
]

QUIET = ("chaos", "cluster", "containers", "model")
"""Folders of ``tests/`` whose every test not marked ``alone`` is ``quiet``: they kill, pause or starve processes and
servers and wait for recovery under deadlines, or run containers; ``.ci/test`` runs them after the parallel phase
(``A2AMESH_TEST_LANES`` at a time)."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        in_quiet_folder = item.path.is_relative_to(root) and item.path.relative_to(root).parts[0] in QUIET
        if in_quiet_folder and item.get_closest_marker("alone") is None:
            item.add_marker(pytest.mark.quiet)
    phases.record(items, root.parent)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # .ci/test's sessions hand out files in this order
        items[:] = phases.longest_first(items, root.parent)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    phases.add_time(report)


REPORTS = {
    "wire fuzz counts": "tests.fuzz.harness",
    "chaos summary": "tests.chaos.conftest",
    "containers": "tests.containers.conftest",
}
"""Sections printed at the end of the run, each filled by the ``summary_lines()`` of a module the session loaded:
the wire fuzzer's counts (messages, answers by code, valid calls, tracebacks), a line per chaos scenario (runs,
lost, duplicated, recovery), the container tests' image build and timelines."""

_FORWARDED: dict[str, list[str]] = {}
"""The sections' lines that xdist workers handed over (``.ci/test``'s parallel phases)."""


def _own_reports() -> dict[str, list[str]]:
    loaded = {title: sys.modules.get(name) for title, name in REPORTS.items()}
    return {title: module.summary_lines() for title, module in loaded.items() if module is not None}


def pytest_sessionfinish(session: pytest.Session) -> None:
    phases.write_times()
    output = getattr(session.config, "workeroutput", None)
    if output is not None:  # an xdist worker: its controller prints the lines
        output["reports"] = json.dumps(_own_reports())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    for title, lines in json.loads(getattr(node, "workeroutput", {}).get("reports", "{}")).items():
        _FORWARDED.setdefault(title, []).extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    own = _own_reports()
    for title in REPORTS:
        lines = dict.fromkeys([*_FORWARDED.get(title, []), *own.get(title, [])])  # the image build workers share: once
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshServers]:
    s = start_servers(tmp_path_factory.mktemp("servers"))
    yield s
    stop_servers(s)


@pytest.fixture
def fault_servers(tmp_path: Path) -> Iterator[MeshServers]:
    """Servers of this test alone, for tests that stop, restart or pause them."""
    s = own_servers(tmp_path)
    yield s
    stop_servers(s)


@pytest.fixture
def cluster_servers(tmp_path: Path) -> Iterator[ClusterServers]:
    """A 3-node NATS JetStream cluster and a Valkey server of this test alone (nodes may be killed or paused)."""
    s = own_cluster(tmp_path)
    yield s
    stop_cluster(s)


@pytest.fixture
def both_clusters(tmp_path: Path) -> Iterator[ClusterServers]:
    """A 3-node NATS JetStream cluster and a Valkey Cluster (3 primaries, 3 replicas) of this test alone."""
    s = own_cluster(tmp_path, valkey_cluster=True)
    yield s
    stop_cluster(s)


@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex[:8]


@pytest.fixture
def settings(servers: MeshServers, namespace: str) -> Settings:
    return Settings.load(
        environ={},
        profile="test",
        nats_url=servers.nats_url,
        redis_url=servers.redis_url,
        redis_cluster=servers.redis_cluster,
        namespace=namespace,
    )


@pytest.fixture
async def bus(settings: Settings) -> AsyncIterator[Bus]:
    b = await Bus.connect(settings, name="test")
    await init_mesh(b, settings)
    yield b
    await b.close()


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[Redis]:
    r = await connect_redis(settings)
    yield r
    await r.aclose()


@pytest.fixture
async def client(bus: Bus, settings: Settings) -> AsyncIterator[Client]:
    c = Client(bus, settings)
    await c.start()
    yield c
    await c.close()


HostFactory = Callable[..., Any]


@pytest.fixture
async def agent_host(bus: Bus, redis: Redis, settings: Settings) -> AsyncIterator[HostFactory]:
    """Start an in-process agent host for a handler function (or a ready ``runtime=``), wrapped in the node
    handler as in a real agent process; ``settings=`` overrides the test's settings. Every host is shut down
    at teardown."""
    started: list[tuple[AgentHost, asyncio.Event, asyncio.Task[None]]] = []

    async def start(
        name: str,
        handler: Any = None,
        *,
        runtime: Any = None,
        settings: Settings = settings,
        **definition: Any,
    ) -> AgentHost:
        if runtime is None:
            runtime = PythonAgent(AgentDefinition(name=name, handler="inline:handler", **definition), handler)
        if not isinstance(runtime, NodeHandler):
            runtime = NodeHandler(runtime)
        host = AgentHost(runtime, bus=bus, redis=redis, settings=settings)
        stop = asyncio.Event()
        task = await host.start(stop, limit=10)
        started.append((host, stop, task))
        return host

    yield start
    for _, stop, _ in started:
        stop.set()
    for _, _, task in started:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
    for host, _, _ in started:
        inner = getattr(host.runtime, "runtime", host.runtime)
        if hasattr(inner, "aclose"):
            await inner.aclose()


@pytest.fixture
async def processes(settings: Settings, tmp_path: Path) -> AsyncIterator[ProcessFactory]:
    factory = ProcessFactory(settings, tmp_path)
    yield factory
    await factory.cleanup()
