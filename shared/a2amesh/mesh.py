"""Run a whole mesh on one machine: embedded servers (when no URLs are given) plus one process per agent replica.

Used by ``a2amesh up`` and ``a2amesh demo``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from a2amesh.agent.definition import AgentDefinition, llm_settings_missing, load_agent_file
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.config import Settings
from a2amesh.errors import A2AMeshError, ServerError
from a2amesh.gateway.server import bind
from a2amesh.gateway.settings import GatewaySettings
from a2amesh.logs import get_logger
from a2amesh.registry import Registry
from a2amesh.remote.spec import RemoteSpec, is_remote_file, load_remote_file
from a2amesh.servers import NatsCluster, NatsServer, ValkeyCluster, ValkeyServer
from a2amesh.workflow.dag.nodes import BUILTIN_AGENTS

log = get_logger("mesh")


@dataclass
class Child:
    """One supervised process."""

    label: str
    argv: list[str]
    proc: asyncio.subprocess.Process | None = None


@dataclass
class Mesh:
    """A supervisor for a one-machine mesh.

    Args:
        settings: settings of the mesh; ``nats_url`` / ``redis_url`` None means embedded servers.
        agents_dir: folder of agent YAML files (each started ``replicas`` times); a ``remote:`` file starts the
            proxy of that remote agent (``a2amesh remote serve``), whose card the mesh does not wait for: a
            remote that is down must not stop the mesh (docs/interop.md).
        workflows_dir: folder of workflow definitions for one executor process, if any.
        state_dir: where embedded servers keep their data (persistent across runs).
        log_file: children's output goes here (None: inherit the terminal).
        gateway: settings of the HTTP gateway process to start (None: no gateway); port 0 takes a free one.
        llm_host: start ``a2amesh llm-host`` (the LLM agents defined through the API).
        stored_remotes: start ``a2amesh remote serve --stored`` (the proxies of the remote agents declared
            through the API, started and stopped as they are added and removed; not waited for either).
        builtins: start the built-in agents (``a2amesh builtins``: the llm, tools and tool_loop nodes).
        cluster: embedded NATS as a 3-node JetStream cluster, streams and buckets with 3 replicas, and embedded
            Valkey as a Valkey Cluster of 3 primaries and 3 replicas.
    """

    settings: Settings
    agents_dir: Path | None
    state_dir: Path
    workflows_dir: Path | None = None
    log_file: Path | None = None
    children: list[Child] = field(default_factory=list)
    nats: NatsServer | None = None
    valkey: ValkeyServer | None = None
    definitions: list[tuple[Path, AgentDefinition]] = field(default_factory=list)
    remotes: list[tuple[Path, RemoteSpec]] = field(default_factory=list)
    not_started: list[tuple[str, str]] = field(default_factory=list)
    """LLM agents of ``agents_dir`` left out because no model is configured: (name, what to set)."""
    gateway: GatewaySettings | None = None
    gateway_url: str = ""
    llm_host: bool = False
    stored_remotes: bool = False
    builtins: bool = True
    cluster: bool = False
    nats_cluster: NatsCluster | None = None
    valkey_cluster: ValkeyCluster | None = None

    @property
    def nats_url(self) -> str:
        """The NATS URL the mesh uses."""
        if self.nats_cluster:
            return self.nats_cluster.url
        return self.nats.url if self.nats else (self.settings.nats_url or "")

    @property
    def redis_url(self) -> str:
        """The Redis URL the mesh uses."""
        if self.valkey:
            return self.valkey.url
        if self.valkey_cluster:
            return self.valkey_cluster.url
        return self.settings.redis_url.get_secret_value() if self.settings.redis_url else ""

    def effective_settings(self) -> Settings:
        """The settings with the URLs of the servers in use."""
        update: dict[str, object] = {"nats_url": self.nats_url, "redis_url": _secret(self.redis_url)}
        if self.nats_cluster:
            update["replicas"] = self.settings.replicas or len(self.nats_cluster.nodes)
        if self.valkey_cluster:
            update["redis_cluster"] = True
        return self.settings.model_copy(update=update)

    async def start(self) -> None:
        """Start servers, initialise the namespace, start every agent (and the executor), wait for their cards,
        then start the gateway and wait until it listens."""
        gateway_argv = self._gateway_argv()  # a busy port or an unsafe bind fails before anything starts
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._load_agent_files()
        if not self.settings.nats_url and self.cluster:
            self.nats_cluster = NatsCluster(data_dir=self.state_dir / "nats-cluster")
            await self.nats_cluster.start()
            (self.state_dir / "nats.port").unlink(missing_ok=True)
            (self.state_dir / "nats.urls").write_text(self.nats_cluster.url)
            log.info("mesh.nats_cluster_started", url=self.nats_cluster.url)
        elif not self.settings.nats_url:
            (self.state_dir / "nats.urls").unlink(missing_ok=True)
            self.nats = NatsServer(port=_saved_port(self.state_dir / "nats.port"), data_dir=self.state_dir / "nats")
            await self.nats.start()
            (self.state_dir / "nats.port").write_text(str(self.nats.port))
            log.info("mesh.nats_started", url=self.nats.url)
        if not self.settings.redis_url and self.cluster:
            (self.state_dir / "valkey.port").unlink(missing_ok=True)
            self.valkey_cluster = ValkeyCluster(data_dir=self.state_dir / "valkey-cluster")
            await self.valkey_cluster.start()
            (self.state_dir / "valkey.cluster").write_text(self.valkey_cluster.url)
            log.info("mesh.valkey_cluster_started", urls=self.valkey_cluster.urls)
        elif not self.settings.redis_url:
            (self.state_dir / "valkey.cluster").unlink(missing_ok=True)
            self.valkey = ValkeyServer(
                port=_saved_port(self.state_dir / "valkey.port"), data_dir=self.state_dir / "valkey"
            )
            await self.valkey.start()
            (self.state_dir / "valkey.port").write_text(str(self.valkey.port))
            log.info("mesh.valkey_started", url=self.valkey.url)
        settings = self.effective_settings()
        bus = await Bus.connect(settings, name="a2amesh-up")
        try:
            await init_mesh(bus, settings)
            self._agent_children()
            if self.builtins:
                self.children.append(Child("builtins", [sys.executable, "-m", "a2amesh", "builtins"]))
            if self.workflows_dir is not None:
                self.children.append(
                    Child("executor", [sys.executable, "-m", "a2amesh", "executor", str(self.workflows_dir)])
                )
            if self.llm_host:
                self.children.append(Child("llm-host", [sys.executable, "-m", "a2amesh", "llm-host"]))
            if self.stored_remotes:
                argv = [sys.executable, "-m", "a2amesh", "remote", "serve", "--stored"]
                self.children.append(Child("remotes", argv))
            for child in self.children:
                await self._spawn(child)
            await self._wait_for_cards(bus, settings)
        finally:
            await bus.close()
        if gateway_argv is not None:
            child = Child("gateway", gateway_argv)
            self.children.append(child)
            await self._spawn(child)
            await self._wait_for_gateway(child)

    def _load_agent_files(self) -> None:
        if self.agents_dir is None:
            return
        for path in sorted(self.agents_dir.glob("*.yaml")) + sorted(self.agents_dir.glob("*.yml")):
            if is_remote_file(path):
                self.remotes.append((path, load_remote_file(path)))
                continue
            definition = load_agent_file(path)
            missing = llm_settings_missing(definition, self.settings)
            if missing:  # an LLM agent without a model to call would exit at once: say what to set instead
                self.not_started.append((definition.name, missing))
                continue
            self.definitions.append((path, definition))

    def _agent_children(self) -> None:
        """One child per agent replica, and per replica of a remote agent's proxy."""
        for path, definition in self.definitions:
            for i in range(definition.replicas):
                argv = [sys.executable, "-m", "a2amesh", "agent", str(path)]
                self.children.append(Child(f"{definition.name}#{i + 1}", argv))
        for path, remote in self.remotes:
            for i in range(remote.replicas):
                argv = [sys.executable, "-m", "a2amesh", "remote", "serve", str(path)]
                self.children.append(Child(f"remote:{remote.name or path.stem}#{i + 1}", argv))

    def _gateway_argv(self) -> list[str] | None:
        """The gateway's command line, its port checked free now (port 0: a free one chosen now)."""
        if self.gateway is None:
            return None
        self.gateway.check_exposure()
        with bind(self.gateway.host, self.gateway.port) as sock:
            port = sock.getsockname()[1]
        host = self.gateway.host
        shown = f"[{host}]" if ":" in host else host
        self.gateway_url = self.gateway.public_url or f"http://{shown}:{port}"
        argv = [sys.executable, "-m", "a2amesh", "gateway", "--host", host, "--port", str(port)]
        return [*argv, "--insecure"] if self.gateway.insecure else argv

    async def _wait_for_gateway(self, child: Child, timeout: float = 20.0) -> None:
        """Wait until the gateway accepts connections (bounded), or fail naming its exit."""
        assert self.gateway is not None
        assert child.proc is not None
        host, port = self.gateway.host, int(child.argv[child.argv.index("--port") + 1])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                async with asyncio.timeout(1):
                    _, writer = await asyncio.open_connection(host, port)
            except (OSError, TimeoutError):
                if child.proc.returncode is not None or loop.time() > deadline:
                    where = f" (see {self.log_file})" if self.log_file else ""
                    state = (
                        f"exited with {child.proc.returncode}" if child.proc.returncode is not None else "not listening"
                    )
                    raise ServerError(f"the gateway on {host}:{port} {state} after {timeout:.0f}s{where}") from None
                await asyncio.sleep(0.1)  # a connect refused returns at once: poll the port, bounded above
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return

    async def _spawn(self, child: Child) -> None:
        env = {**os.environ, "NATS_URL": self.nats_url, "REDIS_URL": self.redis_url}
        if self.valkey_cluster:
            env["A2AMESH_REDIS_CLUSTER"] = "1"
        env["A2AMESH_NAMESPACE"] = self.settings.namespace
        env["A2AMESH_PROFILE"] = self.settings.profile
        replicas = self.effective_settings().replicas
        if replicas is not None:
            env["A2AMESH_REPLICAS"] = str(replicas)
        out = await asyncio.to_thread(open, self.log_file, "ab") if self.log_file else None
        try:
            child.proc = await asyncio.create_subprocess_exec(
                *child.argv, env=env, stdout=out, stderr=out, start_new_session=True
            )
        finally:
            if out is not None:
                out.close()
        log.info("mesh.started", process=child.label, pid=child.proc.pid)

    async def _wait_for_cards(self, bus: Bus, settings: Settings, timeout: float = 30.0) -> None:
        registry = Registry(bus, card_ttl=settings.card_ttl)
        await registry.start()
        try:
            names = [definition.name for _, definition in self.definitions]
            if self.builtins:
                names.extend(dict.fromkeys(BUILTIN_AGENTS.values()))
            for name in names:
                try:
                    await registry.wait_for(name, timeout)
                except TimeoutError as e:
                    dead = [c.label for c in self.children if c.proc and c.proc.returncode is not None]
                    where = f" (see {self.log_file})" if self.log_file else ""
                    raise ServerError(
                        f"agent {name} published no card within {timeout:.0f}s; "
                        f"exited: {', '.join(dead) or 'none'}{where}"
                    ) from e
        finally:
            await registry.stop()

    async def stop(self) -> None:
        """SIGTERM every child, wait for them (then SIGKILL), stop the embedded servers."""
        for child in self.children:
            if child.proc and child.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
        grace = self.settings.shutdown_grace + 5
        for child in self.children:
            if child.proc is None:
                continue
            try:
                async with asyncio.timeout(grace):
                    await child.proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
                await child.proc.wait()
        self.children.clear()
        if self.valkey:
            await self.valkey.stop()
        if self.nats:
            await self.nats.stop()
        if self.nats_cluster:
            await self.nats_cluster.stop()
        if self.valkey_cluster:
            await self.valkey_cluster.stop()

    def crashed(self) -> list[str]:
        """Labels of children that exited on their own."""
        return [c.label for c in self.children if c.proc is not None and c.proc.returncode is not None]

    async def __aenter__(self) -> Mesh:
        try:
            await self.start()
        except (A2AMeshError, OSError):
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _saved_port(path: Path) -> int:
    try:
        port = int(path.read_text())
    except (OSError, ValueError):
        return 0
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return 0
    return port


def _secret(value: str) -> object:
    from pydantic import SecretStr

    return SecretStr(value) if value else None
