"""The outside check of a deployment's credentials (``a2amesh deploy init``): with each process's own files, the
servers refuse what that process must not do, and allow what it does. Used against the embedded servers
(tests/integration/test_deploy_init.py) and against the compose stack (tests/containers/test_compose.py)."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from a2amesh.access import EXECUTOR, GATEWAY, LLM_HOST, REMOTES
from a2amesh.bus.subjects import Subjects
from a2amesh.config import Settings
from a2amesh.provision import nats_password_file, redis_password_file
from a2amesh.store.definitions import LLM_AGENTS, WORKFLOWS
from a2amesh.store.keys import Keys
from tests.support.waiting import eventually

STORED = "stored_probe"
"""A name no file-declared agent has: one the stored remotes' proxies and the LLM host may serve."""


def settings_of(
    folder: Path, user: str, *, nats_url: str, redis_url: str, namespace: str, tls_ca: Path | None = None
) -> Settings:
    """A process's settings as a container gets them: its user names and the files of its own two passwords."""
    environ = {
        "NATS_URL": nats_url,
        "NATS_USER": user,
        "NATS_PASSWORD_FILE": str(folder / nats_password_file(user)),
        "REDIS_URL": redis_url,
        "REDIS_USER": user,
        "REDIS_PASSWORD_FILE": str(folder / redis_password_file(user)),
        "A2AMESH_NAMESPACE": namespace,
        "A2AMESH_PROFILE": "test",
    }
    if tls_ca is not None:
        environ["NATS_TLS_CA"] = str(tls_ca)
    return Settings.load(environ=environ)


class Raw:
    """A plain nats-py connection as one user, collecting the errors the server sends it."""

    def __init__(self, user: str) -> None:
        self.user = user
        self.errors: list[str] = []
        self.nc: NatsClient | None = None

    async def connect(self, folder: Path, url: str, tls: ssl.SSLContext | None = None) -> NatsClient:
        async def on_error(e: Exception) -> None:
            self.errors.append(str(e))

        password = (folder / nats_password_file(self.user)).read_text().strip()
        options: dict[str, Any] = {"tls": tls} if tls is not None else {}
        self.nc = await nats.connect(
            url,
            user=self.user,
            password=password,
            inbox_prefix=f"_INBOX.{self.user}",
            error_cb=on_error,
            allow_reconnect=False,
            connect_timeout=10,
            **options,
        )
        return self.nc

    async def refused(self, what: str) -> None:
        async def seen() -> bool:
            return any("permissions violation" in e.lower() and what.lower() in e.lower() for e in self.errors)

        await eventually(seen, timeout=5, what=f"the server to refuse {self.user} {what} (errors: {self.errors})")

    async def subscribe_refused(self, subject: str) -> None:
        assert self.nc is not None
        await self.nc.subscribe(subject)
        await self.refused(f'subscription to "{subject}"')

    async def publish_refused(self, subject: str, data: bytes = b"{}", final: bool = False) -> None:
        assert self.nc is not None
        headers = {"A2A-Final": "true"} if final else None
        await self.nc.publish(subject, data, reply=self.nc.new_inbox(), headers=headers)
        await self.refused(f'publish to "{subject}"')

    async def close(self) -> None:
        if self.nc is not None:
            await self.nc.close()


async def declared_part_refused(who: Raw, s: Subjects, agent: str) -> None:
    """What a process serving names known only at run time (``access.serving_stored``: the stored remotes'
    proxies, the LLM host) may not touch of a file-declared agent: its queue, control subject, replies, card
    and requests."""
    await who.publish_refused(f"$JS.API.CONSUMER.MSG.NEXT.{s.tasks_stream}.{agent}")
    await who.subscribe_refused(s.control(agent))
    await who.publish_refused(s.reply("gateway.abc", agent, "call1"), final=True)
    await who.publish_refused(f"$KV.{s.cards_bucket}.{agent}")
    await who.subscribe_refused(s.request(agent))


async def check_nats(
    folder: Path, url: str, namespace: str, agent: str, other: str, tls: ssl.SSLContext | None = None
) -> None:
    """Each refusal the issue lists, asserted by the server's own error; then each user's own part allowed."""
    s, ns = Subjects(namespace), namespace
    tasks = s.tasks_stream
    alpha, executor, gateway, remotes = Raw(agent), Raw(EXECUTOR), Raw(GATEWAY), Raw(REMOTES)
    llm = Raw(LLM_HOST)
    everyone = (alpha, executor, gateway, remotes, llm)
    try:
        for raw in everyone:
            await raw.connect(folder, url, tls)
        # an agent: another agent's requests (live or from its queue), anyone's replies, a forged final on
        # another callee's reply subject, and any change of a stream
        await alpha.subscribe_refused(s.request(other))
        await alpha.publish_refused(f"$JS.API.CONSUMER.MSG.NEXT.{tasks}.{other}")
        for subject in (s.reply_inbox(GATEWAY), s.reply_inbox(other), s.reply_all, "_INBOX.>"):
            await alpha.subscribe_refused(subject)
        await alpha.publish_refused(s.reply("gateway.abc", other, "call1"), final=True)
        await alpha.publish_refused(s.reply(f"{EXECUTOR}.abc", other, "call1"), final=True)
        await alpha.publish_refused(f"$JS.API.STREAM.CREATE.{namespace.upper()}_STOLEN")
        await alpha.publish_refused(f"$JS.API.STREAM.DELETE.{tasks}")
        await alpha.publish_refused(f"$KV.{s.cards_bucket}.{other}")
        # the executor: no agent's replies, queue or control subject; no stream changes
        await executor.publish_refused(s.reply("gateway.abc", agent, "call1"), final=True)
        await executor.publish_refused(f"$JS.API.CONSUMER.MSG.NEXT.{tasks}.{agent}")
        await executor.subscribe_refused(s.control(agent))
        await executor.publish_refused(f"$JS.API.STREAM.DELETE.{tasks}")
        # the gateway calls and reads its own replies: it serves nothing and answers nothing
        await gateway.publish_refused(f"$JS.API.CONSUMER.MSG.NEXT.{tasks}.{agent}")
        await gateway.publish_refused(s.reply(f"{EXECUTOR}.abc", agent, "call1"), final=True)
        await gateway.subscribe_refused(s.reply_inbox(EXECUTOR))
        await gateway.subscribe_refused(s.control(agent))
        await gateway.publish_refused(f"$KV.{s.cards_bucket}.{agent}")
        await gateway.publish_refused(f"$JS.API.STREAM.DELETE.{tasks}")
        # the stored remotes' proxies: no file-declared agent's queue, control subject, card or replies; they call
        # no agent, forge no event, read no one's replies and change no stream
        await declared_part_refused(remotes, s, agent)
        await remotes.publish_refused(s.request(agent))
        await remotes.publish_refused(s.control(STORED))
        await remotes.publish_refused(s.remote_event(STORED, "created"))
        await remotes.publish_refused(s.workflow_event("wf", "created"))
        for subject in (s.reply_inbox(GATEWAY), s.reply_all, "_INBOX.>"):
            await remotes.subscribe_refused(subject)
        await remotes.publish_refused(f"$JS.API.STREAM.DELETE.{tasks}")
        # the LLM host: no file-declared agent's queue, control subject, card or replies; it reads no one else's
        # replies or deltas, forges no definition or lifecycle event, follows no events stream, changes no stream
        await declared_part_refused(llm, s, agent)
        await llm.publish_refused(f"$JS.API.CONSUMER.CREATE.{tasks}.{agent}")
        await llm.publish_refused(s.agent_event(STORED, "created"))
        await llm.publish_refused(s.workflow_event("wf", "created"))
        await llm.publish_refused(s.remote_event(STORED, "created"))
        await llm.publish_refused(f"$JS.API.CONSUMER.CREATE.{s.events_stream}")
        for subject in (s.reply_inbox(GATEWAY), s.reply_inbox(agent), s.reply_all, "_INBOX.>"):
            await llm.subscribe_refused(subject)
        await llm.subscribe_refused(f"{ns}.a2a.v1.delta.{GATEWAY}.>")
        await llm.publish_refused(f"$JS.API.STREAM.DELETE.{tasks}")
        # and what each does is allowed: no new refusal
        counts = [len(r.errors) for r in everyone]
        assert alpha.nc is not None
        assert executor.nc is not None
        assert gateway.nc is not None
        assert remotes.nc is not None
        assert llm.nc is not None
        await alpha.nc.subscribe(s.reply_inbox(agent))
        await alpha.nc.subscribe(s.control(agent))
        await alpha.nc.publish(s.reply("gateway.abc", agent, "call2"), b"{}")
        await executor.nc.subscribe(s.reply_inbox(EXECUTOR))
        await gateway.nc.subscribe(s.reply_inbox(GATEWAY))
        info = await gateway.nc.request(f"$JS.API.STREAM.INFO.{tasks}", b"", timeout=5)
        assert b'"config"' in info.data, info.data
        await remotes.nc.subscribe(s.remote_events_of("created"))
        await remotes.nc.subscribe(s.remote_events_of("deleted"))
        await remotes.nc.subscribe(s.control(STORED))
        await remotes.nc.publish(s.reply("gateway.abc", STORED, "call2"), b"{}")
        consumer = await remotes.nc.request(f"$JS.API.CONSUMER.INFO.{tasks}.{STORED}", b"", timeout=5)
        assert b'"error"' in consumer.data, consumer.data  # answered (there is no such consumer): not refused
        await llm.nc.subscribe(s.reply_inbox(LLM_HOST))
        await llm.nc.subscribe(f"{ns}.a2a.v1.delta.{LLM_HOST}.>")
        for event in ("created", "updated", "deleted"):
            await llm.nc.subscribe(s.agent_events_of(event))
        await llm.nc.subscribe(s.control(STORED))
        await llm.nc.publish(s.reply("gateway.abc", STORED, "call3"), b"{}")
        consumer = await llm.nc.request(f"$JS.API.CONSUMER.INFO.{tasks}.{STORED}", b"", timeout=5)
        assert b'"error"' in consumer.data, consumer.data
        for raw in everyone:
            assert raw.nc is not None
            await raw.nc.flush()
        assert [len(r.errors) for r in everyone] == counts, [
            r.errors[n:] for r, n in zip(everyone, counts, strict=True)
        ]
    finally:
        for raw in everyone:
            await raw.close()


def redis_client(folder: Path, url: str, user: str) -> Redis:
    password = (folder / redis_password_file(user)).read_text().strip()
    return Redis.from_url(url, username=user, password=password, decode_responses=True)


async def refused(command: Awaitable[Any]) -> None:
    with pytest.raises(NoPermissionError):
        await command


async def check_redis(folder: Path, url: str, namespace: str, agent: str, other: str) -> None:
    """An agent reaches neither another agent's keys nor the executor's; the stored remotes' proxies reach task
    records but no execution, definition, history or handler data, and only read the declarations; the LLM host
    reaches task records and histories, only reads the LLM agent definitions, and nothing else; no mesh user
    administers the server or reaches another namespace; each still writes its own keys."""
    ns, keys = namespace, Keys(namespace)
    async with redis_client(folder, url, agent) as r:
        await r.set(f"{ns}:app:{agent}:probe", "1")
        assert await r.get(f"{ns}:app:{agent}:probe") == "1"
        await r.delete(f"{ns}:app:{agent}:probe")
        for command in (
            r.get(f"{ns}:app:{other}:counter"),
            r.set(f"{ns}:app:{other}:counter", "1"),
            r.lrange(keys.history(other, "c1"), 0, -1),
            r.rpush(keys.history(other, "c1"), "forged"),
            r.zrange(keys.agent_tasks(other, 0), 0, -1),
            r.hgetall(keys.execution("e1")),
            r.set(keys.execution_state("e1"), "{}"),
            r.zrange(keys.executions_index(0), 0, -1),
            r.set(keys.lease("e1"), "me"),
        ):
            await refused(command)
    async with redis_client(folder, url, REMOTES) as r:
        # the stored remotes' proxies: task records and any agent's task index; declarations read only
        await r.hgetall(keys.remotes())
        await r.set(keys.task("probe"), "{}")
        await r.delete(keys.task("probe"))
        await r.zadd(keys.agent_tasks(STORED, 0), {"probe": 1})
        await r.zrem(keys.agent_tasks(STORED, 0), "probe")
        for command in (
            r.hset(keys.remotes(), STORED, "{}"),
            r.hdel(keys.remotes(), STORED),
            r.hgetall(keys.execution("e1")),
            r.set(keys.execution_state("e1"), "{}"),
            r.zrange(keys.executions_index(0), 0, -1),
            r.get(keys.schedules()),
            r.hgetall(keys.definition_heads("workflow")),
            r.lrange(keys.history(agent, "c1"), 0, -1),
            r.get(f"{ns}:app:{agent}:counter"),
        ):
            await refused(command)
    async with redis_client(folder, url, LLM_HOST) as r:
        # the LLM host: its agents' task records, task indexes, conversation locks and histories; the LLM agent
        # definitions read only; nothing of executions, workflows, remotes, memory or handlers
        await r.hgetall(keys.definition_heads(LLM_AGENTS))
        await r.hget(keys.definition_versions(LLM_AGENTS, STORED), "d:1")
        await r.set(keys.task("probe"), "{}")
        await r.delete(keys.task("probe"))
        await r.zadd(keys.agent_tasks(STORED, 0), {"probe": 1})
        await r.zrem(keys.agent_tasks(STORED, 0), "probe")
        await r.rpush(keys.history(STORED, "c1"), "turn")
        await r.delete(keys.history(STORED, "c1"))
        await r.set(keys.context_lock(STORED, "c1"), "me", px=1000)
        await r.delete(keys.context_lock(STORED, "c1"))
        for command in (
            r.hset(keys.definition_heads(LLM_AGENTS), STORED, "{}"),
            r.hset(keys.definition_versions(LLM_AGENTS, STORED), "d:1", "{}"),
            r.hgetall(keys.definition_heads(WORKFLOWS)),
            r.hset(keys.definition_heads(WORKFLOWS), "wf", "{}"),
            r.hgetall(keys.execution("e1")),
            r.set(keys.execution_state("e1"), "{}"),
            r.zrange(keys.executions_index(0), 0, -1),
            r.set(keys.lease("e1"), "me"),
            r.get(keys.schedules()),
            r.hgetall(keys.remotes()),
            r.zrange(keys.remote_slots(STORED), 0, -1),
            r.hgetall(keys.memory_entry(agent, "m1")),
            r.get(f"{ns}:app:{agent}:counter"),
        ):
            await refused(command)
    for user in (agent, EXECUTOR, GATEWAY, REMOTES, LLM_HOST):
        async with redis_client(folder, url, user) as r:
            for command in (
                r.get(f"other{ns}:exec:{{e1}}"),
                r.keys("*"),
                r.flushall(),
                r.config_set("maxmemory-policy", "allkeys-lru"),
                r.acl_list(),
                r.execute_command("ACL", "SETUSER", user, "on", "~*", "+@all"),  # type: ignore[no-untyped-call]
                r.execute_command("CLIENT", "KILL", "TYPE", "normal"),  # type: ignore[no-untyped-call]
            ):
                await refused(command)
    async with redis_client(folder, url, EXECUTOR) as r:
        await r.set(keys.execution_state("probe"), "{}")
        await r.delete(keys.execution_state("probe"))
