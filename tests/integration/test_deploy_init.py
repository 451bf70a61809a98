"""`a2amesh deploy init`'s files, used as they are by real servers: nats-server started with the generated users and
valkey-server with the generated ACL file. Each process's own password files refuse what that process must not
do (tests/support/least_privilege.py); an agent and a caller, configured through *_FILE variables, run a call;
with ``--tls`` a client that trusts the generated CA connects and one that does not cannot."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from a2amesh.access import ADMIN, GATEWAY, LLM_HOST, REMOTES
from a2amesh.agent.pool import LlmAgentPool
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.manage.definitions import DefinitionService
from a2amesh.manage.llm_agents import LLM_AGENT_DEFINITIONS
from a2amesh.protocol import TaskState
from a2amesh.provision import NATS_ACCOUNTS, VALKEY_ACL, DeployInit, nats_password_file, redis_password_file
from a2amesh.remote.declare import RemoteStore
from a2amesh.remote.spec import parse_remote
from a2amesh.remote.stored import StoredRemotes
from a2amesh.servers import NatsServer, ValkeyServer
from a2amesh.store.definitions import LLM_AGENTS, DefinitionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import connect_redis
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall
from tests.support.least_privilege import check_nats, check_redis, redis_client, settings_of
from tests.support.processes import REPO, ProcessFactory
from tests.support.stock_a2a import StockServer, stock_server
from tests.support.waiting import eventually, within

__all__ = ["stock_server"]

AGENTS = ["alpha", "beta"]


@dataclass
class Deployed:
    folder: Path
    namespace: str
    nats: NatsServer
    valkey: ValkeyServer

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.valkey.port}/0"

    def settings(self, user: str, tls_ca: Path | None = None) -> Settings:
        return settings_of(
            self.folder, user, nats_url=self.nats.url, redis_url=self.redis_url, namespace=self.namespace, tls_ca=tls_ca
        )

    async def init(self) -> None:
        """The streams and buckets created as the admin user (``a2amesh init``)."""
        admin = self.settings(ADMIN)
        bus = await Bus.connect(admin, name="admin")
        try:
            await init_mesh(bus, admin)
        finally:
            await bus.close()

    def violations(self) -> list[str]:
        """The permission violations nats-server has logged."""
        return [line for line in self.nats.output() if " Violation - " in line]


def generate(folder: Path, namespace: str, *, tls: bool = False) -> None:
    owner = (os.getuid(), os.getgid())
    DeployInit(folder, namespace, AGENTS, tls=tls, tls_path=str(folder / "tls"), owner=owner).run()


@pytest.fixture
def deployed(tmp_path: Path, namespace: str) -> Iterator[Deployed]:
    """Both servers started with the files `deploy init` wrote, as they are."""
    folder = tmp_path / "secrets"
    generate(folder, namespace)
    server = NatsServer(data_dir=tmp_path / "nats", config=(folder / NATS_ACCOUNTS).read_text())
    valkey = ValkeyServer(data_dir=tmp_path / "valkey", aclfile=folder / VALKEY_ACL)
    server.start_sync()
    try:
        valkey.start_sync()
        try:
            yield Deployed(folder, namespace, server, valkey)
        finally:
            valkey.stop_sync()
    finally:
        server.stop_sync()


async def test_each_credential_is_refused_everything_outside_its_own_part(deployed: Deployed) -> None:
    await deployed.init()
    await check_nats(deployed.folder, deployed.nats.url, deployed.namespace, "alpha", "beta")
    await check_redis(deployed.folder, deployed.redis_url, deployed.namespace, "alpha", "beta")
    with pytest.raises(Exception, match="(?i)authorization"):  # nats-py raises it in several shapes
        await nats.connect(deployed.nats.url, allow_reconnect=False, connect_timeout=5, max_reconnect_attempts=0)


def echo_agent(folder: Path) -> Path:
    """agent_cards' echo handler as agent alpha (it keeps nothing in Redis of its own)."""
    shutil.copy(REPO / "agent_cards" / "example_agents.py", folder / "example_agents.py")
    path = folder / "alpha.yaml"
    path.write_text("name: alpha\ndescription: echo as alpha\nhandler: example_agents:echo\n")
    return path


async def test_an_agent_and_a_caller_work_from_their_own_files(deployed: Deployed, tmp_path: Path) -> None:
    """NATS_PASSWORD_FILE and REDIS_PASSWORD_FILE with REDIS_USER, as the compose file sets them: the agent
    process serves a call made by the gateway's user, and the server logs no permission violation."""
    await deployed.init()
    factory = ProcessFactory(deployed.settings("alpha"), tmp_path / "alpha")
    (tmp_path / "alpha").mkdir()
    env = {
        "NATS_USER": "alpha",
        "NATS_PASSWORD_FILE": str(deployed.folder / nats_password_file("alpha")),
        "REDIS_USER": "alpha",
        "REDIS_PASSWORD_FILE": str(deployed.folder / redis_password_file("alpha")),
    }
    gateway = deployed.settings(GATEWAY)
    caller = await Bus.connect(gateway, name="gateway")
    client = Client(caller, gateway)
    try:
        proc = await factory.start("agent", str(echo_agent(tmp_path / "alpha")), env=env)
        await client.start()

        async def ready() -> bool:
            assert proc.returncode is None, proc.output()[-3000:]
            return client.registry.get("alpha") is not None

        await eventually(ready, timeout=30, what="alpha's card")
        try:
            task = await within(client.send("alpha", make_message(data={"hello": 1})), 30, "the agent call")
        except AssertionError as e:
            raise AssertionError(f"{e}; {deployed.violations()}; the agent printed:\n{proc.output()[-3000:]}") from None
        assert task.status.state == TaskState.COMPLETED, task.status
        assert task.output() == {"hello": 1}, task.output()
        assert not deployed.violations()
        secret = (deployed.folder / nats_password_file("alpha")).read_text().strip()
        assert secret not in proc.output()
    finally:
        await client.close()
        await caller.close()
        await factory.cleanup()


async def test_the_stored_remotes_serve_a_call_as_their_own_user(deployed: Deployed, stock_server: Any) -> None:
    """The proxies of the remotes declared through the API, signed in to both servers as deploy init's ``remotes``
    user: a declaration stored and announced with the gateway's credentials is served, a call made by the
    gateway's user completes through a stock a2a-sdk server, and neither NATS nor Valkey refused the proxies
    anything."""
    await deployed.init()
    stock: StockServer = await stock_server()
    own = deployed.settings(REMOTES)
    remotes_bus = await Bus.connect(own, name="remotes")
    remotes_redis = await connect_redis(own)
    gateway = deployed.settings(GATEWAY)
    caller = await Bus.connect(gateway, name="gateway")
    gateway_redis = await connect_redis(gateway)
    client = Client(caller, gateway)
    remotes = StoredRemotes(bus=remotes_bus, redis=remotes_redis, settings=own, interval=600)
    stop = asyncio.Event()
    running = await remotes.start(stop, limit=15)
    try:
        await client.start()
        declared = parse_remote({"remote": {"url": stock.url, "name": "stock"}}, "test")
        assert await RemoteStore(gateway_redis, deployed.namespace).add(declared)
        await caller.publish(caller.subjects.remote_event("stock", "created"), b"{}")
        await within(client.registry.wait_for("stock", 15), 16, "the card of the stored remote")
        task = await within(client.send("stock", make_message(data={"x": 1})), 15, "the stored remote's answer")
        assert task.status.state == TaskState.COMPLETED, task.status
        assert task.output() == {"echo": {"x": 1}, "n": 2}
        assert not deployed.violations()
        async with redis_client(deployed.folder, deployed.redis_url, ADMIN) as r:
            assert await r.execute_command("ACL", "LOG") == []  # type: ignore[no-untyped-call]
    finally:
        stop.set()
        await within(running, 30, "the stored remotes to stop")
        await client.close()
        await caller.close()
        await gateway_redis.aclose()
        await remotes_redis.aclose()
        await remotes_bus.close()


async def test_the_llm_host_serves_stored_llm_agents_as_its_own_user(
    deployed: Deployed, fake_llm: FakeOpenAIServer
) -> None:
    """The host of the LLM agents stored through the API, signed in to both servers as deploy init's ``llm-host``
    user: two LLM agents stored and announced with the gateway's credentials are served, one (with a history)
    calls the other as a peer tool over the mesh, a call made by the gateway's user completes, and neither NATS
    nor Valkey refused the host anything."""
    await deployed.init()
    own = deployed.settings(LLM_HOST).model_copy(update={"llm_base_url": fake_llm.base_url})
    assert own.reply_scope == LLM_HOST
    host_bus = await Bus.connect(own, name=LLM_HOST)
    host_redis = await connect_redis(own)
    gateway = deployed.settings(GATEWAY)
    caller = await Bus.connect(gateway, name="gateway")
    gateway_redis = await connect_redis(gateway)
    client = Client(caller, gateway)
    store = DefinitionStore(gateway_redis, Keys(deployed.namespace), kind=LLM_AGENTS)
    definitions = DefinitionService(store, bus=caller, kind=LLM_AGENT_DEFINITIONS)
    llm = {"model": "fake-model", "system_prompt": "Answer."}
    await definitions.create({"name": "helper", "description": "Knows numbers", "llm": llm})
    pool = LlmAgentPool(bus=host_bus, redis=host_redis, settings=own, interval=600)
    stop = asyncio.Event()
    running = await pool.start(stop, limit=15)
    try:
        await client.start()
        await within(client.registry.wait_for("helper", 15), 16, "the card of the stored helper")
        asker = {"name": "asker", "description": "Asks the helper", "peers": ["helper"]}
        # announced on the agent events the host hears
        await definitions.create({**asker, "llm": {**llm, "history": True}})
        await within(client.registry.wait_for("asker", 15), 16, "the card of the stored asker")
        fake_llm.script(Reply(tool_calls=[ToolCall("helper", {"message": "six times seven?"})]), "42", "It is 42.")
        task = await within(client.send("asker", make_message(text="ask the helper")), 30, "the asker's answer")
        assert (task.status.state, task.output()) == (TaskState.COMPLETED, "It is 42."), task.status
        tool_result = fake_llm.requests[-1]["messages"][-1]
        assert tool_result["role"] == "tool", tool_result
        assert "42" in tool_result["content"], tool_result
        violations = deployed.violations()
        assert not violations, violations
        assert task.context_id is not None
        async with redis_client(deployed.folder, deployed.redis_url, ADMIN) as r:
            assert await r.execute_command("ACL", "LOG") == []  # type: ignore[no-untyped-call]
            assert await r.llen(Keys(deployed.namespace).history("asker", task.context_id)) > 0
    finally:
        stop.set()
        await within(running, 30, "the LLM host to stop")
        await client.close()
        await caller.close()
        await gateway_redis.aclose()
        await host_redis.aclose()
        await host_bus.close()


async def test_tls_with_the_generated_ca(tmp_path: Path, namespace: str) -> None:
    """``deploy init --tls``: the server runs with the generated certificate; a process trusting the generated
    CA (NATS_TLS_CA) connects as its user and initialises the mesh; one that does not is refused at the
    handshake."""
    folder = tmp_path / "secrets"
    generate(folder, namespace, tls=True)
    server = NatsServer(data_dir=tmp_path / "nats", config=(folder / NATS_ACCOUNTS).read_text())
    await server.start()
    try:
        admin = settings_of(
            folder, ADMIN, nats_url=server.url, redis_url="", namespace=namespace, tls_ca=folder / "tls" / "ca.pem"
        )
        bus = await Bus.connect(admin, name="tls")
        try:
            await init_mesh(bus, admin)
            ack = await bus.js_publish(bus.subjects.request("alpha"), b"{}", {"Nats-Msg-Id": "tls-1"})
            assert ack.seq == 1
        finally:
            await bus.close()
        trusted = ssl.create_default_context(cafile=str(folder / "tls" / "ca.pem"))
        await check_nats(folder, server.url, namespace, "alpha", "beta", tls=trusted)
        password = (folder / nats_password_file(ADMIN)).read_text().strip()
        with pytest.raises(ssl.SSLCertVerificationError):
            await nats.connect(server.url, user=ADMIN, password=password, allow_reconnect=False, connect_timeout=5)
    finally:
        await server.stop()
