"""Fixtures of the container tests: the images built once per session, a mesh of containers per module, and the
timelines the tests print.

The containers of ``container_mesh`` use the host's network (``--network host``): the session's NATS and Valkey
listen on 127.0.0.1, which a container on a bridge network cannot reach. ``test_compose.py`` runs its own NATS
and Valkey containers on a compose project's bridge network instead.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from a2amesh.config import Settings
from tests.support.docker import BuiltImages, build_images, docker, prebuilt_images, require_engine
from tests.support.servers import MeshServers

_built: list[BuiltImages] = []
_timelines: list[Timeline] = []

SHUTDOWN_GRACE = 5
"""A2AMESH_SHUTDOWN_GRACE of the containers: the time running work gets on SIGTERM."""

STOP_TIMEOUT = 20
"""docker stop's grace period before SIGKILL (above SHUTDOWN_GRACE plus the drain)."""


@pytest.fixture(scope="session")
def images() -> Iterator[BuiltImages]:
    """The service and server images, built once per session by deploy/build-images under a tag of the session's
    own (so sessions of other checkouts on the same engine never run each other's images) and untagged at its end
    (the layers stay in the build cache), or found built by ``.ci/test`` beside its parallel phase, which untags
    them once every session that may use them has ended."""
    require_engine()
    built = prebuilt_images() or build_images(tag=f"test-{uuid.uuid4().hex[:8]}")
    _built.append(built)
    yield built
    if not built.prebuilt:
        docker("rmi", *built.all(), check=False)


def summary_lines() -> list[str]:
    """The build and the timelines, for the end of the run (tests/conftest.py prints them)."""
    lines = []
    for built in _built:
        lines.append(f"containers: deploy/build-images (base {built.base}) took {built.seconds:.1f}s {built.origin}")
    for timeline in _timelines:
        lines.extend(timeline.lines())
    return lines


@dataclass
class Timeline:
    """Steps of a container test with their start (seconds since the first) and duration, printed at the end of
    the module (``-s``) and in the session's summary, for quoting."""

    title: str
    rows: list[tuple[float, float, str]] = field(default_factory=list)
    origin: float = field(default_factory=time.monotonic)

    def add(self, label: str, seconds: float) -> None:
        """A step that ran before the timeline started (the session's image build)."""
        self.rows.append((-seconds, seconds, label))

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[None]:
        start = time.monotonic()
        failed = True
        try:
            yield
            failed = False
        finally:
            suffix = " (FAILED)" if failed else ""
            self.rows.append((start - self.origin, time.monotonic() - start, label + suffix))

    def lines(self) -> list[str]:
        total = max((at + took for at, took, _ in self.rows), default=0.0)
        head = f"containers: {self.title} timeline ({total:.1f}s after the build)"
        return [head, *(f"  {at:+7.1f}s  {took:6.2f}s  {label}" for at, took, label in self.rows)]

    def report(self) -> None:
        print("\n" + "\n".join(self.lines()))
        _timelines.append(self)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ContainerMesh:
    """Containers of one module, all in one namespace, on the host's network."""

    images: BuiltImages
    servers: MeshServers
    namespace: str = field(default_factory=lambda: "c" + uuid.uuid4().hex[:8])
    api_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    gateway_port: int = field(default_factory=free_port)
    started: list[str] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        return Settings.load(
            environ={},
            profile="test",
            nats_url=self.servers.nats_url,
            redis_url=self.servers.redis_url,
            namespace=self.namespace,
        )

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    def env(self) -> list[str]:
        values = {
            "NATS_URL": self.servers.nats_url,
            "REDIS_URL": self.servers.redis_url,
            "A2AMESH_NAMESPACE": self.namespace,
            "A2AMESH_PROFILE": "test",
            "A2AMESH_SHUTDOWN_GRACE": str(SHUTDOWN_GRACE),
        }
        return [arg for k, v in values.items() for arg in ("-e", f"{k}={v}")]

    def run(self, role: str, service: str, *options: str) -> str:
        """Start a container in the background (``docker run -d``); its name."""
        name = f"a2amesh-{self.namespace}-{role}"
        docker(
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "host",
            "--stop-timeout",
            str(STOP_TIMEOUT),
            *HARDENED,
            *self.env(),
            *options,
            self.images.image(service),
        )
        self.started.append(name)
        return name

    def remove_all(self) -> None:
        for name in self.started:
            docker("rm", "-f", name, check=False)


HARDENED = ("--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges")
"""How docs/deploy.md recommends running the images: a read-only root file system, no capabilities."""

TEST_AGENTS = Path(__file__).parent / "agents"
"""The sleeper agent's YAML and handler, mounted into its container."""

AGENTS = ("echo", "notifier", "text_stats")
"""Agents the module runs: echo, and the two the shipped notify_customer workflow calls."""


@pytest.fixture(scope="module")
def container_mesh(images: BuiltImages, servers: MeshServers) -> Iterator[ContainerMesh]:
    """The executor, four agents and the gateway (with an API key) as containers, started once per module."""
    mesh = ContainerMesh(images, servers)
    try:
        mesh.run("executor", "executor")
        for agent in AGENTS:
            mesh.run(agent, "agent", "-e", f"AGENT_FILE=agent_cards/{agent}.yaml")
        # an agent of the tests' own, from a read-only bind mount (as users mount theirs)
        mesh.run("sleeper", "agent", "-v", f"{TEST_AGENTS}:/agents:ro", "-e", "AGENT_FILE=/agents/sleeper.yaml")
        mesh.run(
            "gateway",
            "gateway",
            "-e",
            f"A2AMESH_API_KEYS=ci={mesh.api_key}",
            "-e",
            f"A2AMESH_HTTP_PORT={mesh.gateway_port}",
            # the image's HEALTHCHECK command, probed every second instead of every 10 s
            "--health-interval",
            "1s",
        )
        yield mesh
    finally:
        mesh.remove_all()
