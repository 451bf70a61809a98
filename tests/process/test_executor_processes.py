"""Workflow executors and agents as separate OS processes: replicas, SIGSTOP, hot reload, cancel, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any, cast

import yaml

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.bus.setup import ensure_consumer
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.ids import task_id_for
from a2amesh.protocol import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    Artifact,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
    codes,
)
from a2amesh.registry import CardPublisher
from a2amesh.rpc import encode_result
from a2amesh.store.redis import Redis
from a2amesh.worker.decode import decode_request
from tests.support.cli import mesh_cli
from tests.support.processes import Proc, ProcessFactory
from tests.support.waiting import eventually, within


def write_definitions(folder: Path, workflows: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in workflows.items():
        (folder / f"{name}.yaml").write_text(textwrap.dedent(text))
    return folder


def write_behaviour_agent(tmp: Path, name: str, handler: str, **fields: Any) -> Path:
    path = tmp / f"{name}.yaml"
    data = {"name": name, "handler": f"tests.agents.workflow_behaviours:{handler}", **fields}
    path.write_text(yaml.safe_dump(data))
    return path


def tkey(settings: Settings, *parts: str) -> str:
    return ":".join([settings.namespace, "test", *parts])


def instance_of(proc: Proc) -> str | None:
    for line in proc.output().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "executor.ready":
            return str(entry.get("instance"))
    return None


async def start_executor(processes: ProcessFactory, folder: Path, client: Client, workflow: str) -> Proc:
    proc = await processes.start("executor", str(folder), "--reload-interval", "0.2")

    async def ready() -> bool:
        assert proc.returncode is None, f"executor exited: {proc.output()[-3000:]}"
        return instance_of(proc) is not None and client.registry.get(workflow) is not None

    await eventually(ready, timeout=20, what="the executor to serve its workflows")
    return proc


# --- serialization ---------------------------------------------------------------------------


class RawAgent:
    """An agent that answers every request with its final reply three times, out of order, late.

    It also honours SubscribeToTask (as the agent host does), so a re-pointed call gets its answer.
    """

    def __init__(self, bus: Bus, settings: Settings, name: str) -> None:
        self.bus = bus
        self.settings = settings
        self.name = name
        self.received: Counter[str] = Counter()
        self.paths: dict[str, str] = {}
        self.finished: dict[str, bytes] = {}
        self.extra: dict[str, list[str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        card = AgentCard(
            name=self.name,
            capabilities=AgentCapabilities(
                extensions=[AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": "agent"})]
            ),
        )
        self.publisher = CardPublisher(self.bus, card, instance="raw", card_ttl=self.settings.card_ttl)
        await self.publisher.publish()
        await ensure_consumer(self.bus, self.settings, self.name, max_ack_pending=100)
        self.consumer = await self.bus.pull_consumer(self.bus.subjects.tasks_stream, self.name)
        self.control = await self.bus.subscribe(self.bus.subjects.control(self.name), self._on_control)
        self._loop = asyncio.create_task(self._pull())
        self._beat = asyncio.create_task(self.publisher.heartbeat())

    async def stop(self) -> None:
        self._loop.cancel()
        self._beat.cancel()
        for t in list(self._tasks):
            t.cancel()
        await self.consumer.stop()
        await self.control.unsubscribe()

    async def _pull(self) -> None:
        while True:
            await self.consumer.want(16)
            msg = await self.consumer.next(0.5)
            if msg is None:
                continue
            params = decode_request(msg.data, msg.headers, allowed=codes.WORK_METHODS).params
            assert isinstance(params, SendMessageRequest)
            message = params.message
            self.received[message.message_id] += 1
            self.paths[message.message_id] = str((message.metadata or {}).get("a2amesh.node_path"))
            await msg.ack()
            task = asyncio.create_task(self._answer(message, msg.headers[h.REPLY_TO], json.loads(msg.data)["id"]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, message: Message, reply_to: str, request_id: Any) -> None:
        await asyncio.sleep(random.uniform(0.2, 0.6))
        data = next(p.data for p in message.parts if p.data is not None and p.data.get("type") is None)
        task_id = task_id_for(self.name, message.message_id)
        task = Task(
            id=task_id,
            context_id=message.context_id,
            status=TaskStatus(state=TaskState.COMPLETED),
            artifacts=[Artifact(artifact_id="r", name="result", parts=[Part.of_data({"echo": data})])],
        )
        body = encode_result(request_id, {"task": task.to_json_dict()})
        self.finished[task_id] = body
        progress = encode_result(
            request_id,
            {
                "statusUpdate": {
                    "taskId": task_id,
                    "status": {
                        "state": "TASK_STATE_WORKING",
                        "message": Message(message_id="p", role=Role.AGENT, parts=[Part.of_text("…")]).to_json_dict(),
                    },
                }
            },
        )
        for subject in [reply_to, *self.extra.get(task_id, [])]:
            await self._publish(subject, body, 2, final=True, copy=1)
            await self._publish(subject, progress, 1, final=False, copy=0)
            await self._publish(subject, body, 2, final=True, copy=2)
            await self._publish(subject, body, 2, final=True, copy=3)

    async def _publish(self, subject: str, body: bytes, seq: int, *, final: bool, copy: int) -> None:
        hdrs = {h.AGENT: self.name, h.ATTEMPT: "1", h.SEQ: str(seq), h.MSG_ID: f"{subject}:{seq}:{copy}"}
        if final:
            hdrs[h.FINAL] = "true"
        await self.bus.js_publish(subject, body, hdrs)

    async def _on_control(self, msg: Received) -> None:
        obj = json.loads(msg.data)
        if obj.get("method") != codes.SUBSCRIBE_TO_TASK:
            return
        task_id = obj["params"]["id"]
        reply_to = msg.headers[h.REPLY_TO]
        self.extra.setdefault(task_id, []).append(reply_to)
        if task_id in self.finished:
            await self._publish(reply_to, self.finished[task_id], 2, final=True, copy=9)


async def test_two_replicas_duplicate_replies_and_sigstop(
    settings: Settings, bus: Bus, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """Replies thrice and out of order, the lease holder frozen past its lease: one dispatch per attempt, one final."""
    raw = RawAgent(bus, settings, "dup")
    await raw.start()
    nodes = "\n".join(
        f"  - {{id: n{i}, type: agent, agent_name: dup{', depends_on: [n' + str(i - 1) + ']' if i else ''},"
        f" input: {{step: {i}}}}}"
        for i in range(6)
    )
    folder = write_definitions(
        tmp_path / "wf",
        {
            "serial": f"""
name: serial
nodes:
{nodes}
  - {{id: fan, type: map, depends_on: [n2], withItems: [1, 2, 3, 4, 5, 6], node: item, concurrency_limit: 3}}
  - {{id: item, type: agent, agent_name: dup, input: {{item: "{{{{_map_item}}}}"}}}}
  - {{id: last, type: agent, agent_name: dup, depends_on: [n5, fan], input: {{done: true}}}}
output_mapping: {{last: "{{{{last.output}}}}", fan: "{{{{fan.output.results}}}}"}}
"""
        },
    )
    procs = [await start_executor(processes, folder, client, "serial") for _ in range(2)]
    finals: list[dict[str, str]] = []

    async def count_finals(msg: Received) -> None:
        if msg.headers.get(h.FINAL) == "true":
            finals.append(msg.headers)

    try:
        watcher = await bus.subscribe(bus.subjects.reply_inbox(client.instance), count_finals)
        call = await client.dispatch("serial", make_message(data={}), timeout=60)
        await eventually(lambda: len(raw.received) >= 2, timeout=10, what="two nodes to be dispatched")
        lease_key = f"{settings.namespace}:exec:{{{call.task_id}}}:lease"
        holder = str(await redis.get(lease_key) or "")
        owner_instance, _, epoch = holder.partition(":")
        owner = next(p for p in procs if instance_of(p) == owner_instance)
        owner.signal(signal.SIGSTOP)
        try:

            async def taken_over() -> bool:
                value = str(await redis.get(lease_key) or "")
                return bool(value) and not value.startswith(owner_instance)

            try:
                await eventually(taken_over, timeout=10, what="the other replica to take the execution over")
            except AssertionError as e:
                logs = "\n".join(p.output()[-3000:] for p in procs)
                raise AssertionError(f"{e}\n{logs}") from None
            await asyncio.sleep(settings.lease_ttl)
        finally:
            owner.signal(signal.SIGCONT)
        task = await within(call.result(), 30, "the final answer")
        assert task.status.state == TaskState.COMPLETED, task.status
        assert task.output()["fan"] == [{"echo": {"item": n}} for n in range(1, 7)]
        await asyncio.sleep(1)  # room for a late duplicate final from the thawed replica
        assert len({f[h.MSG_ID] for f in finals}) == 1, finals
        assert all(n == 1 for n in raw.received.values()), raw.received
        assert sorted(raw.paths.values()) == sorted(
            [f"n{i}" for i in range(6)] + [f"fan[{i}]" for i in range(6)] + ["last"]
        )
        record = await redis.hgetall(f"{settings.namespace}:exec:{{{call.task_id}}}")
        assert int(record["epoch"]) > int(epoch)
        await watcher.unsubscribe()
    finally:
        await raw.stop()


# --- hot reload, cancel ----------------------------------------------------------------------


async def test_hot_reload_in_a_running_executor(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """A definition file changed while an execution runs: it finishes on its version; new runs use the new one."""
    agent = await processes.start("agent", str(write_behaviour_agent(tmp_path, "hold", "hold")))
    await eventually(lambda: client.registry.get("hold") is not None, timeout=20, what="the agent card")
    folder = write_definitions(
        tmp_path / "wf", {"rl": "name: rl\nnodes:\n  - {id: old_node, type: agent, agent_name: hold, input: {v: 1}}\n"}
    )
    await start_executor(processes, folder, client, "rl")
    first = await client.dispatch("rl", make_message(data={}), timeout=30)
    await eventually(
        lambda: redis.llen(tkey(settings, "started")), timeout=10, what="the first execution's node to start"
    )
    (folder / "rl.yaml").write_text(
        "name: rl\nnodes:\n  - {id: new_node, type: agent, agent_name: hold, input: {v: 2}}\n"
    )

    async def reloaded() -> bool:
        card = client.registry.get("rl")
        return bool(card and card.workflow_definition and card.workflow_definition["nodes"][0]["id"] == "new_node")

    await eventually(reloaded, timeout=10, what="the executor to publish the new definition")
    second = await client.dispatch("rl", make_message(data={}), timeout=30)
    await redis.set(tkey(settings, "release"), "1")
    assert (await within(first.result(), 15, "the first run")).output() == {"old_node": {"released": True, "v": 1}}
    assert (await within(second.result(), 15, "the second run")).output() == {"new_node": {"released": True, "v": 2}}
    assert agent.returncode is None


async def test_cancel_reaches_leaf_through_sub_workflow(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """Cancelling the outer execution reaches the leaf callee under a sub-workflow (TASK_STATE_CANCELED) within 2 s."""
    await processes.start("agent", str(write_behaviour_agent(tmp_path, "hold", "hold")))
    await eventually(lambda: client.registry.get("hold") is not None, timeout=20, what="the agent card")
    folder = write_definitions(
        tmp_path / "wf",
        {
            "inner": "name: inner\nnodes:\n  - {id: leaf, type: agent, agent_name: hold}\n",
            "outer": "name: outer\nnodes:\n  - {id: sub, type: workflow, workflow_name: inner}\n",
        },
    )
    await start_executor(processes, folder, client, "outer")
    call = await client.dispatch("outer", make_message(data={}), timeout=30)
    leaf_task = cast(  # decode_responses: a str
        str, await eventually(lambda: redis.lindex(tkey(settings, "started"), 0), timeout=10, what="the leaf to start")
    )
    started = asyncio.get_running_loop().time()
    canceled = await client.cancel_task("outer", call.task_id, timeout=10)
    assert canceled.status.state == TaskState.CANCELED

    async def leaf_canceled() -> bool:
        task = await client.get_task("hold", leaf_task)
        return task.status.state == TaskState.CANCELED

    await eventually(leaf_canceled, timeout=2, what="the leaf task to be CANCELED")
    assert asyncio.get_running_loop().time() - started < 2.5
    assert await redis.lrange(tkey(settings, "cancelled"), 0, -1) == [leaf_task]
    assert (await within(call.result(), 5, "the outer answer")).status.state == TaskState.CANCELED


# --- the CLI ---------------------------------------------------------------------------------


async def test_cli_run_runs_show_retry_cancel(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """`a2amesh run` shows progress and exits 1 on failure; runs/show list it; retry --from reuses outputs."""
    await processes.start("agent", str(write_behaviour_agent(tmp_path, "tag", "tag")))
    await eventually(lambda: client.registry.get("tag") is not None, timeout=20, what="the agent card")
    folder = write_definitions(
        tmp_path / "wf",
        {
            "cli_wf": """
name: cli_wf
input_schema: {type: object, required: [x], properties: {x: {type: integer}}}
nodes:
  - {id: first, type: agent, agent_name: tag, input: {x: "{{workflow.input.x}}"}}
  - {id: second, type: agent, agent_name: tag, depends_on: [first], input: {y: "{{first.output.x}}"}}
output_mapping: {y: "{{second.output.y}}"}
"""
        },
    )
    await start_executor(processes, folder, client, "cli_wf")
    code, out, err = await mesh_cli(settings, "run", "cli_wf", "--input", '{"x": 7}')
    assert code == 0, err
    assert json.loads(out) == {"y": 7}
    assert "▶ first" in err
    assert "✓ second" in err
    run_id = err.split("→ run ", 1)[1].split()[0]

    code, out, err = await mesh_cli(settings, "run", "cli_wf", "--input", '{"x": "bad"}', "--json")
    assert code == 1
    result = json.loads(out)
    assert result["status"] == "failed"
    assert "$.x" in result["error"]

    code, out, _ = await mesh_cli(settings, "runs", "--workflow", "cli_wf", "--json")
    assert code == 0
    runs = json.loads(out)
    assert {r["status"] for r in runs} == {"completed", "failed"}

    code, out, _ = await mesh_cli(settings, "show", run_id[:12], "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["status"] == "completed"
    assert [n["path"] for n in shown["nodes"]] == ["first", "second"]
    code, out, _ = await mesh_cli(settings, "show", run_id)
    assert "first" in out
    assert "completed" in out

    await redis.delete(tkey(settings, "runs"))
    code, out, err = await mesh_cli(settings, "retry", run_id, "--from", "second", "--json")
    assert code == 0, err
    assert json.loads(out)["output"] == {"y": 7}
    assert await redis.hgetall(tkey(settings, "runs")) == {"second": "1"}

    code, _, err = await mesh_cli(settings, "cancel", run_id)
    assert code == 2
    assert "is completed: only a running or paused one can be cancelled" in err
    code, out, err = await mesh_cli(settings, "validate", str(folder / "cli_wf.yaml"))
    assert code == 0
    code, out, _ = await mesh_cli(settings, "graph", str(folder / "cli_wf.yaml"))
    assert out.startswith("flowchart TD")
    assert os.environ.get("A2AMESH_FAULT") is None
