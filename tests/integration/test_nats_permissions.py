"""Least privilege on a real nats-server started with the configuration `a2amesh deploy nats-config` generates.

An agent cannot pull another agent's queue, read another caller's replies or inboxes, answer another
agent's control subject or write another agent's card; the mesh still works end to end under these
permissions (an agent call, a workflow with a sub-workflow), with no permission violation logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import secrets
import ssl
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import nkeys
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from nats.aio.client import Client as NatsClient
from pydantic import SecretStr

from a2amesh.access import (
    EXECUTOR,
    GATEWAY,
    LLM_HOST,
    REMOTES,
    NatsAccess,
    accounts_config,
    nkey_variable,
    password_variable,
)
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.manage.events import EventQuery, follow_events
from a2amesh.protocol import TaskState
from a2amesh.servers import NatsServer
from tests.support.cli import run_cli
from tests.support.processes import ProcessFactory, write_agent
from tests.support.servers import MeshServers
from tests.support.waiting import eventually, within

AGENTS = ("alpha", "beta")
USERS = ("admin", EXECUTOR, GATEWAY, REMOTES, LLM_HOST, *AGENTS)


def password(user: str) -> str:
    return f"pw-{user}-secret"


@dataclass
class Secured:
    server: NatsServer
    namespace: str
    redis_url: str

    def settings(self, user: str) -> Settings:
        return Settings.load(
            environ={},
            profile="test",
            nats_url=self.server.url,
            redis_url=self.redis_url,
            namespace=self.namespace,
            nats_user=user,
            nats_password=SecretStr(password(user)),
        )

    def violations(self) -> list[str]:
        return [line for line in self.server.output() if " Violation - " in line]


@pytest.fixture
def secured_server(
    tmp_path: Path, namespace: str, servers: MeshServers, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Secured]:
    """nats-server with the generated users (passwords from its environment), the namespace initialised."""
    for user in USERS:
        monkeypatch.setenv(password_variable(user), password(user))
    config = accounts_config(NatsAccess(namespace=namespace, agents=list(AGENTS)))
    server = NatsServer(data_dir=tmp_path / "secured-nats", config=config)
    server.start_sync()
    try:
        yield Secured(server, namespace, servers.redis_url)
    finally:
        server.stop_sync()


@pytest.fixture
async def admin_bus(secured_server: Secured) -> AsyncIterator[Bus]:
    settings = secured_server.settings("admin")
    bus = await Bus.connect(settings, name="admin")
    await init_mesh(bus, settings)
    yield bus
    await bus.close()


class Raw:
    """A plain nats-py connection as one user, collecting the errors the server sends it."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc: NatsClient | None = None

    async def connect(self, s: Secured, user: str) -> NatsClient:
        async def on_error(e: Exception) -> None:
            self.errors.append(str(e))

        self.nc = await nats.connect(
            s.server.url,
            user=user,
            password=password(user),
            inbox_prefix=f"_INBOX.{user}",
            error_cb=on_error,
            allow_reconnect=False,
        )
        return self.nc

    async def refused(self, what: str) -> None:
        async def seen() -> bool:
            return any("permissions violation" in e.lower() and what.lower() in e.lower() for e in self.errors)

        await eventually(seen, timeout=5, what=f"the server to refuse {what} (errors: {self.errors})")


async def test_an_agent_is_refused_everything_outside_its_own_part(secured_server: Secured, admin_bus: Bus) -> None:
    s = admin_bus.subjects
    raw = Raw()
    nc = await raw.connect(secured_server, "alpha")
    try:
        # pull another agent's queue
        beta_next = f"$JS.API.CONSUMER.MSG.NEXT.{s.tasks_stream}.beta"
        await nc.publish(beta_next, b'{"batch": 1}', reply=nc.new_inbox())
        await raw.refused(beta_next)
        await nc.publish(f"$JS.ACK.{s.tasks_stream}.beta.1.1.1.1.1", b"")
        await raw.refused(f"$JS.ACK.{s.tasks_stream}.beta")
        # read another caller's replies, deltas and inboxes, live or from the replies stream
        for subject in (s.reply_inbox("gateway"), s.reply_all, f"{s.ns}.a2a.v1.delta.gateway.>", "_INBOX.>"):
            await nc.subscribe(subject)
            await raw.refused(subject)
        stored = f"$JS.API.DIRECT.GET.{s.replies_stream}.{s.reply('gateway.abc', 'alpha', 'call1')}"
        await nc.publish(stored, b"", reply=nc.new_inbox())
        await raw.refused(stored)
        # answer another agent's control requests, write its card or presence, change a stream
        await nc.subscribe(s.control("beta"))
        await raw.refused(s.control("beta"))
        for subject in (f"$KV.{s.cards_bucket}.beta", f"$KV.{s.presence_bucket}.beta.x1"):
            await nc.publish(subject, b"{}", reply=nc.new_inbox())
            await raw.refused(subject)
        delete = f"$JS.API.STREAM.DELETE.{s.tasks_stream}"
        await nc.publish(delete, b"", reply=nc.new_inbox())
        await raw.refused(delete)
        # its own part is allowed
        refusals = len(raw.errors)
        await nc.subscribe(s.reply_inbox("alpha"))
        await nc.subscribe(s.control("alpha"))
        own = await nc.request(f"$JS.API.STREAM.INFO.{s.tasks_stream}", b"", timeout=5)
        assert b'"config"' in own.data
        await nc.flush()
        assert len(raw.errors) == refusals, raw.errors[refusals:]
    finally:
        await nc.close()


async def test_an_agent_cannot_answer_a_call_made_to_another(secured_server: Secured, admin_bus: Bus) -> None:
    """The reply subject names the callee: alpha may publish replies and deltas to calls made to alpha (as a
    gateway's or an executor's call, scoped or not), and a forged final to a call made to beta — or to the
    executor's workflows — is refused by the server, even with the call's id known."""
    s = admin_bus.subjects
    raw = Raw()
    nc = await raw.connect(secured_server, "alpha")
    try:
        forged = [
            s.reply("gateway.abc", "beta", "call1"),
            s.reply("unscoped", "beta", "call1"),
            s.reply(f"{EXECUTOR}.abc", "outer", "call2"),
            s.delta("gateway.abc", "beta", "call1"),
        ]
        for subject in forged:
            await nc.publish(subject, b'{"jsonrpc":"2.0","id":"x","result":{}}', headers={"A2A-Final": "true"})
            await raw.refused(subject)
        refusals = len(raw.errors)
        for subject in (s.reply("gateway.abc", "alpha", "call3"), s.reply("unscoped", "alpha", "call3")):
            await nc.publish(subject, b"{}")
        await nc.publish(s.delta("gateway.abc", "alpha", "call3"), b"{}")
        await nc.flush()
        assert len(raw.errors) == refusals, raw.errors[refusals:]
    finally:
        await nc.close()


async def test_a_caller_reads_only_its_own_replies(secured_server: Secured, admin_bus: Bus) -> None:
    s = admin_bus.subjects
    raw = Raw()
    nc = await raw.connect(secured_server, GATEWAY)
    try:
        for subject in (s.reply_inbox(EXECUTOR), s.reply_inbox("alpha"), "_INBOX.alpha.>"):
            await nc.subscribe(subject)
            await raw.refused(subject)
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{s.tasks_stream}.alpha", b"{}", reply=nc.new_inbox())
        await raw.refused(f"$JS.API.CONSUMER.MSG.NEXT.{s.tasks_stream}.alpha")
        await nc.publish(s.reply(f"{EXECUTOR}.abc", "alpha", "call1"), b"{}")
        await raw.refused(s.reply(f"{EXECUTOR}.abc", "alpha", "call1"))
    finally:
        await nc.close()


def workflows(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "inner.yaml").write_text(
        textwrap.dedent(
            """
            name: inner
            nodes:
              - {id: a, type: agent, agent_name: alpha, input: {sleep: 0.01}}
            output_mapping: {n: "{{a.output.n}}"}
            """
        )
    )
    (folder / "outer.yaml").write_text(
        textwrap.dedent(
            """
            name: outer
            nodes:
              - {id: sub, type: workflow, workflow_name: inner}
              - {id: b, type: agent, agent_name: beta, depends_on: [sub], input: {sleep: 0.01}}
            output_mapping: {inner: "{{sub.output.n}}", beta: "{{b.output.n}}"}
            """
        )
    )
    return folder


async def test_the_mesh_works_under_these_permissions(secured_server: Secured, admin_bus: Bus, tmp_path: Path) -> None:
    """Agents, the executor and a caller each as their own user: an agent call and a workflow with a
    sub-workflow complete, the gateway announces remote-agent changes, and the server logged no permission
    violation."""
    started: list[ProcessFactory] = []
    for user in AGENTS:
        factory = ProcessFactory(secured_server.settings(user), tmp_path / user)
        (tmp_path / user).mkdir()
        started.append(factory)
        await factory.start(
            "agent",
            str(write_agent(tmp_path / user, user, "count")),
            env={"NATS_USER": user, "NATS_PASSWORD": password(user)},
        )
    executor = ProcessFactory(secured_server.settings(EXECUTOR), tmp_path / "executor")
    (tmp_path / "executor").mkdir()
    started.append(executor)
    proc = await executor.start(
        "executor", str(workflows(tmp_path / "wf")), env={"NATS_USER": EXECUTOR, "NATS_PASSWORD": password(EXECUTOR)}
    )
    bus = await Bus.connect(secured_server.settings(GATEWAY), name="gateway")
    client = Client(bus, secured_server.settings(GATEWAY))
    try:
        await client.start()
        assert client.instance.startswith("gateway.")
        # the management API announces a remote declared or removed through it (checked with the violations below)
        for event in ("created", "deleted"):
            await bus.publish(bus.subjects.remote_event("weather", event), b"{}")

        async def ready() -> bool:
            assert proc.returncode is None, proc.output()[-3000:]
            return all(client.registry.get(n) is not None for n in (*AGENTS, "inner", "outer"))

        await eventually(ready, timeout=30, what="the agents' and workflows' cards")
        task = await within(client.send("alpha", make_message(data={"sleep": 0.01})), 30, "the agent call")
        assert task.status.state == TaskState.COMPLETED, task.status
        run = await within(client.send("outer", make_message(data={})), 60, "the workflow run")
        assert run.status.state == TaskState.COMPLETED, run.status
        assert set(run.output()) == {"inner", "beta"}, run.output()

        async def completed_event() -> list[str]:
            # the gateway user follows the events stream as /api/events does
            seen: list[str] = []
            async with contextlib.aclosing(follow_events(bus, EventQuery(after=0), idle=1.0)) as feed:
                async for event in feed:
                    if event is not None:
                        seen.append(event.type)
                        if event.type == "workflow.completed":
                            return seen
            return seen

        assert "workflow.completed" in await within(completed_event(), 15, "the events stream as the gateway")
        # each process ran as its own user: its instance (in its presence key) is in its user's scope
        presence = await (await admin_bus.kv(admin_bus.subjects.presence_bucket)).keys()
        for name, user in (("alpha", "alpha"), ("beta", "beta"), ("outer", EXECUTOR)):
            assert any(k.startswith(f"{name}.{user}.") for k in presence), (name, presence)
        assert not secured_server.violations(), secured_server.violations()[:5]
    finally:
        await client.close()
        await bus.close()
        for factory in started:
            await factory.cleanup()


async def test_the_cli_writes_the_config_with_secrets_left_to_the_environment(tmp_path: Path) -> None:
    out = tmp_path / "nats.conf"
    args = ["-o", str(out), "--tls-cert", "/tls/cert.pem", "--tls-key", "/tls/key.pem"]
    code, _, err = await run_cli("deploy", "nats-config", "agent_cards", *args)
    assert code == 0, err
    text = out.read_text()
    assert "{user: order_validator, password: $A2AMESH_NATS_PASSWORD_ORDER_VALIDATOR" in text
    assert '"$JS.API.CONSUMER.MSG.NEXT.A2AMESH_TASKS.order_validator"' in text
    assert 'cert_file: "/tls/cert.pem"' in text
    assert "listen: 127.0.0.1:4222" in text
    code, _, err = await run_cli("deploy", "nats-config", str(tmp_path / "missing"))
    assert code == 2
    assert "not a folder of agent YAML files" in err
    assert "Traceback" not in err
    assert "secret" not in text


async def test_nkey_users_with_their_scopes(
    tmp_path: Path, namespace: str, servers: MeshServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``--auth nkey`` the server reads each user's public nkey from its environment; processes sign in
    with their seed file and name their scope with A2AMESH_SCOPE: an agent call completes, no violation."""
    seeds: dict[str, Path] = {}
    for user in USERS:
        seed = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
        monkeypatch.setenv(nkey_variable(user), nkeys.from_seed(seed).public_key.decode())
        seeds[user] = tmp_path / f"{user}.nk"
        seeds[user].write_bytes(seed)
    config = accounts_config(NatsAccess(namespace=namespace, agents=list(AGENTS), auth="nkey"))
    server = NatsServer(data_dir=tmp_path / "nkey-nats", config=config)
    await server.start()

    def settings(user: str) -> Settings:
        return Settings.load(
            environ={},
            profile="test",
            nats_url=server.url,
            redis_url=servers.redis_url,
            namespace=namespace,
            nats_nkey_seed=str(seeds[user]),
            scope=user,
        )

    factory = ProcessFactory(settings("alpha"), tmp_path)
    admin = await Bus.connect(settings("admin"), name="admin")
    bus = await Bus.connect(settings(GATEWAY), name="gateway")
    client = Client(bus, settings(GATEWAY))
    try:
        await init_mesh(admin, settings("admin"))
        proc = await factory.start(
            "agent",
            str(write_agent(tmp_path, "alpha", "count")),
            env={"NATS_NKEY_SEED": str(seeds["alpha"]), "A2AMESH_SCOPE": "alpha"},
        )
        await client.start()

        async def ready() -> bool:
            assert proc.returncode is None, proc.output()[-3000:]
            return client.registry.get("alpha") is not None

        await eventually(ready, timeout=30, what="alpha's card")
        task = await within(client.send("alpha", make_message(data={"sleep": 0.01})), 30, "the agent call")
        assert task.status.state == TaskState.COMPLETED, task.status
        assert not [line for line in server.output() if " Violation - " in line]
    finally:
        await client.close()
        await bus.close()
        await admin.close()
        await factory.cleanup()
        await server.stop()


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key) files."""
    now = dt.datetime.now(dt.UTC)

    def build(
        subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: ec.EllipticCurvePrivateKey, ca: bool
    ) -> x509.Certificate:
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        return b.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = build("a2amesh test CA", ca_key, "a2amesh test CA", ca_key, True)
    cert = build("127.0.0.1", server_key, "a2amesh test CA", ca_key, False)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


async def test_tls_settings_of_the_generated_config(
    tmp_path: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generated ``tls`` block: a client trusting the CA (``NATS_TLS_CA``) connects as its user,
    initialises the namespace and publishes to a stream; one that does not trust it cannot connect."""
    ca, cert, key = await asyncio.to_thread(_certificates, tmp_path)
    for user in USERS:
        monkeypatch.setenv(password_variable(user), password(user))
    access = NatsAccess(namespace=namespace, agents=list(AGENTS), tls_cert=str(cert), tls_key=str(key))
    server = NatsServer(data_dir=tmp_path / "tls-nats", config=accounts_config(access))
    await server.start()
    base: dict[str, Any] = {"environ": {}, "profile": "test", "nats_url": server.url, "namespace": namespace}
    try:
        admin = Settings.load(**base, nats_user="admin", nats_password=password("admin"), nats_tls_ca=str(ca))
        bus = await Bus.connect(admin, name="tls")
        try:
            await init_mesh(bus, admin)
            ack = await bus.js_publish(bus.subjects.request("alpha"), b"{}", {"Nats-Msg-Id": "tls-1"})
            assert ack.seq == 1
        finally:
            await bus.close()
        # a client that does not trust the CA (system CAs only) does not get in
        with pytest.raises(ssl.SSLCertVerificationError):
            await nats.connect(
                server.url, user="admin", password=password("admin"), allow_reconnect=False, connect_timeout=5
            )
    finally:
        await server.stop()
