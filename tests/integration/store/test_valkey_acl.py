"""Least privilege on a real valkey-server, and on a Valkey Cluster, started with the ACL file
`a2amesh deploy valkey-acl` generates.

An agent's Redis user reaches task records, claims, artifacts and its own index, history and app keys only:
executions, another agent's keys, another namespace and administration are refused. Agents and the executor,
each as its own Redis user, still run an agent call and a workflow with a sub-workflow end to end.
"""

from __future__ import annotations

import hashlib
import shutil
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr
from redis.exceptions import NoPermissionError

from a2amesh.access import ADMIN, EXECUTOR, GATEWAY, LLM_HOST, REMOTES, redis_password_variable, valkey_acl
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.servers import ValkeyCluster, ValkeyServer
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis, connect_redis
from tests.support.cli import run_cli
from tests.support.processes import REPO, ProcessFactory
from tests.support.servers import MeshServers
from tests.support.waiting import eventually, within

AGENTS = ("alpha", "beta")
USERS = (ADMIN, EXECUTOR, GATEWAY, REMOTES, LLM_HOST, *AGENTS)


def password(user: str) -> str:
    return f"redis-{user}-pw"


@dataclass
class Guarded:
    valkey: ValkeyServer | ValkeyCluster
    namespace: str
    nats_url: str

    def url(self, user: str) -> str:
        port = self.valkey.nodes[0].port if isinstance(self.valkey, ValkeyCluster) else self.valkey.port
        return f"redis://{user}:{password(user)}@127.0.0.1:{port}/0"

    def settings(self, user: str) -> Settings:
        return Settings.load(
            environ={},
            profile="test",
            nats_url=self.nats_url,
            redis_url=SecretStr(self.url(user)),
            redis_cluster=isinstance(self.valkey, ValkeyCluster),
            namespace=self.namespace,
        )


@pytest.fixture(params=["server", "cluster"])
def guarded(request: pytest.FixtureRequest, tmp_path: Path, namespace: str, servers: MeshServers) -> Iterator[Guarded]:
    """A Valkey server, or a Valkey Cluster (3 primaries, 3 replicas: every node loads the same ACL file, the
    replicas replicate as the admin user), started with the generated ACL file."""
    hashes = {u: hashlib.sha256(password(u).encode()).hexdigest() for u in USERS}
    acl = tmp_path / "users.acl"
    acl.write_text(valkey_acl(namespace, AGENTS, hashes))
    valkey: ValkeyServer | ValkeyCluster
    if request.param == "cluster":
        valkey = ValkeyCluster(data_dir=tmp_path / "acl-cluster", aclfile=acl, admin=(ADMIN, password(ADMIN)))
    else:
        valkey = ValkeyServer(data_dir=tmp_path / "acl-valkey", aclfile=acl)
    valkey.start_sync()
    try:
        yield Guarded(valkey, namespace, servers.nats_url)
    finally:
        valkey.stop_sync()


@pytest.fixture
async def alpha_redis(guarded: Guarded) -> AsyncIterator[Redis]:
    r = await connect_redis(guarded.settings("alpha"))
    yield r
    await r.aclose()


async def test_an_agent_reaches_only_its_keys(guarded: Guarded, alpha_redis: Redis) -> None:
    ns = guarded.namespace
    r = alpha_redis
    await r.set(f"{ns}:task:{{t1}}", "{}")
    await r.set(f"{ns}:claim:{{t1}}", "me", px=1000)
    await r.zadd(Keys(ns).agent_tasks("alpha", 3), {"t1": 1})
    await r.rpush(f"{ns}:history:alpha:{{c1}}", "turn")
    await r.set(f"{ns}:app:alpha:counter", 1)
    assert await r.get(f"{ns}:task:{{t1}}") == "{}"
    refused = [
        r.get(f"{ns}:exec:{{e1}}"),
        r.hgetall(f"{ns}:exec:{{e1}}:nodes"),
        r.zrange(Keys(ns).agent_tasks("beta", 3), 0, -1),
        r.zrange(f"{ns}:{{idx:3}}:tasks:alphabet", 0, -1),
        r.lrange(f"{ns}:history:beta:{{c1}}", 0, -1),
        r.set(f"{ns}:app:beta:counter", 1),
        r.get(f"{ns}:{{schedules}}"),
        r.get("other:task:{t1}"),
        r.keys("*"),
        r.flushall(),
        r.config_set("maxmemory-policy", "allkeys-lru"),
    ]
    for command in refused:
        with pytest.raises(NoPermissionError):
            await command


async def test_the_cli_hashes_passwords_from_the_environment(tmp_path: Path) -> None:
    code, _, err = await run_cli("deploy", "valkey-acl", "agent_cards")
    assert code == 2
    assert "missing: A2AMESH_REDIS_PASSWORD_ADMIN" in err
    assert "Traceback" not in err
    env = {}
    for user in (
        ADMIN,
        EXECUTOR,
        GATEWAY,
        REMOTES,
        LLM_HOST,
        "echo",
        "job_status",
        "notifier",
        "order_validator",
        "pricing",
        "text_stats",
        "agent-uuid-router",  # 2nChat's agents
        "agent-uuid-rc2",
        "agent-uuid-dm2",
        "agent-uuid-2n",
    ):
        env[redis_password_variable(user)] = password(user)
    out = tmp_path / "users.acl"
    code, _, err = await run_cli("deploy", "valkey-acl", "agent_cards", "-o", str(out), env=env)
    assert code == 0, err
    text = out.read_text()
    assert "pw" not in text.replace("#", "")  # only hashes
    assert f"user echo on #{hashlib.sha256(password('echo').encode()).hexdigest()} resetchannels" in text
    assert "~a2amesh:{idx:0}:tasks:echo ~a2amesh:{idx:1}:tasks:echo " in text


def agents_and_workflows(tmp: Path) -> tuple[list[Path], Path]:
    shutil.copy(REPO / "agent_cards" / "example_agents.py", tmp / "example_agents.py")
    files = []
    for name in AGENTS:
        path = tmp / f"{name}.yaml"
        path.write_text(f"name: {name}\ndescription: echo as {name}\nhandler: example_agents:echo\n")
        files.append(path)
    wf = tmp / "wf"
    wf.mkdir()
    (wf / "inner.yaml").write_text(
        textwrap.dedent(
            """
            name: inner
            nodes:
              - {id: a, type: agent, agent_name: alpha, input: {x: 1}}
            output_mapping: {a: "{{a.output}}"}
            """
        )
    )
    (wf / "outer.yaml").write_text(
        textwrap.dedent(
            """
            name: outer
            nodes:
              - {id: sub, type: workflow, workflow_name: inner}
              - {id: b, type: agent, agent_name: beta, depends_on: [sub], input: {y: 2}}
            output_mapping: {inner: "{{sub.output.a}}", beta: "{{b.output}}"}
            """
        )
    )
    return files, wf


async def test_the_mesh_works_under_these_acls(guarded: Guarded, tmp_path: Path) -> None:
    files, wf = agents_and_workflows(tmp_path)
    factories = []
    procs = []
    for user, args in (
        ("alpha", ["agent", str(files[0])]),
        ("beta", ["agent", str(files[1])]),
        (EXECUTOR, ["executor", str(wf)]),
    ):
        factory = ProcessFactory(guarded.settings(user), tmp_path / f"proc-{user}")
        (tmp_path / f"proc-{user}").mkdir()
        factories.append(factory)
        procs.append(await factory.start(*args))
    settings = guarded.settings(GATEWAY)
    bus = await Bus.connect(settings, name="acl-test")
    await init_mesh(bus, settings)
    client = Client(bus, settings)
    try:
        await client.start()

        async def ready() -> bool:
            for p in procs:
                assert p.returncode is None, p.output()[-3000:]
            return all(client.registry.get(n) is not None for n in (*AGENTS, "inner", "outer"))

        await eventually(ready, timeout=30, what="the agents' and workflows' cards")
        task = await within(client.send("alpha", make_message(data={"hello": 1})), 30, "the agent call")
        assert task.status.state == TaskState.COMPLETED, task.status
        run = await within(client.send("outer", make_message(data={})), 60, "the workflow run")
        assert run.status.state == TaskState.COMPLETED, run.status
        assert run.output() == {"inner": {"x": 1}, "beta": {"y": 2}}, run.output()
        for p in procs:
            assert "NOPERM" not in p.output(), p.output()[-3000:]
    finally:
        await client.close()
        await bus.close()
        for factory in factories:
            await factory.cleanup()
