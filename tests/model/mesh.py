"""The mesh the lifecycle model drives, kept up for a whole test module, and its two transports.

A :class:`LoopThread` runs one asyncio loop in a background thread (hypothesis' stateful machines are
synchronous); on it run real agents and a real executor as OS processes (SIGKILLed and restarted by the
model), an in-process HTTP gateway with its own NATS connection, and the callers: the mesh
:class:`~a2amesh.client.Client` over NATS, a raw NATS requester (a resend with a new ``Nats-Msg-Id``, its
own request id and reply subject), and plain httpx JSON-RPC through the gateway.

Every call returns an :class:`Answer`: the ``(task id, state)`` of each event it saw, or a JSON-RPC error
code, with its start and end on the loop's clock. A call not answered within its bound is an answer too
(``timed_out``); the model treats it as a violation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import textwrap
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
import yaml

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import A2AMeshError, to_rpc_error
from a2amesh.gateway import Gateway, GatewaySettings
from a2amesh.ids import nuid
from a2amesh.protocol import ListTasksRequest, Message, SendMessageRequest, StreamResponse, Task, codes
from a2amesh.rpc import encode_request
from tests.support.processes import Proc, ProcessFactory
from tests.support.servers import MeshServers
from tests.support.waiting import eventually

T = TypeVar("T")

WORK_BOUND = 40.0
"""Seconds within which a work call (send, stream, continue, resend, subscribe) must end: a killed agent's
task is redelivered after ``ack_wait`` (2 s, test profile), a killed executor's run taken over after its lease
(2 s); the rest is slack for a loaded 2-core machine."""
CONTROL_BOUND = 15.0
"""Seconds within which GetTask, ListTasks and CancelTask must answer (a cancel waits up to 10 s for the work to
stop)."""

Transport = Literal["nats", "http"]
AGENTS = {"m_ask": "ask", "m_slow": "slow"}
WORKFLOWS = {
    "m_review": """
        name: m_review
        nodes:
          - {id: check, type: human_review, prompt: "Go on?", data: "{{workflow.input}}"}
          - {id: after, type: agent, agent_name: m_slow, depends_on: [check], input: {seconds: 0.3}}
        output_mapping: "{{after.output}}"
        """,
    "m_chain": """
        name: m_chain
        nodes:
          - {id: a, type: agent, agent_name: m_slow, input: "{{workflow.input}}"}
          - {id: b, type: agent, agent_name: m_slow, depends_on: [a], input: "{{workflow.input}}"}
          - {id: c, type: agent, agent_name: m_slow, depends_on: [b], input: "{{workflow.input}}"}
        output_mapping: "{{c.output}}"
        """,
}
PROCESSES = ("m_ask", "m_slow", "executor")


@dataclass
class Answer:
    """What one call saw.

    Attributes:
        start, end: the call's start and end (the loop's clock).
        states: ``(task id, state)`` of every task or status the call saw, in order (the last is its final).
        error: the JSON-RPC error code it was answered with.
        timed_out: no answer within the bound.
        note: what else the model must know (a wrong JSON-RPC id, the error's message).
    """

    start: float
    end: float = 0.0
    states: list[tuple[str, str]] = field(default_factory=list)
    error: int | None = None
    timed_out: bool = False
    note: str = ""

    @property
    def final(self) -> tuple[str, str] | None:
        return self.states[-1] if self.states else None

    def shown(self) -> str:
        if self.timed_out:
            return f"no answer ({self.note})"
        if self.error is not None:
            return f"error {self.error} {self.note}".strip()
        seen = " → ".join(state.removeprefix("TASK_STATE_") for _, state in self.states)
        return f"{seen or 'no state'}{' ' + self.note if self.note else ''}"


def _states_of(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``(task id, state)`` of one ProtoJSON ``StreamResponse`` or ``SendMessageResponse`` (none for an
    artifact update)."""
    if "task" in result:
        task = result["task"]
        return [(str(task["id"]), str(task["status"]["state"]))]
    if "statusUpdate" in result:
        ev = result["statusUpdate"]
        return [(str(ev["taskId"]), str(ev["status"]["state"]))]
    return []


def _task_state(task: Task) -> tuple[str, str]:
    return task.id, task.status.state.value


def _event_state(ev: StreamResponse) -> list[tuple[str, str]]:
    return _states_of(ev.to_json_dict())


class LoopThread:
    """One asyncio loop in a daemon thread; :meth:`run` runs a coroutine on it from the calling thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="lifecycle-model-loop", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return self.submit(coro).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the loop's thread (the model's bookkeeping is touched there only)."""

        async def inner() -> T:
            return fn()

        return self.run(inner(), 10)

    def close(self) -> None:
        async def cancel_the_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(cancel_the_rest(), 10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Mesh:
    """NATS, Valkey (the session's servers), the model's agents and executor as OS processes, a gateway, and
    the callers; everything but the servers started and stopped here."""

    def __init__(self, servers: MeshServers, tmp: Path) -> None:
        self.settings = Settings.load(
            environ={},
            profile="test",
            nats_url=servers.nats_url,
            redis_url=servers.redis_url,
            redis_cluster=servers.redis_cluster,
            namespace="m" + uuid.uuid4().hex[:8],
        )
        self.tmp = tmp
        self.processes = ProcessFactory(self.settings, tmp)
        self.procs: dict[str, Proc] = {}
        self.kills = 0
        self._gateway_stop = asyncio.Event()
        self._gateway_task: asyncio.Task[None] | None = None

    # lifecycle
    async def start(self) -> None:
        self.bus = await Bus.connect(self.settings, name="lifecycle-model")
        await init_mesh(self.bus, self.settings)
        self.client = Client(self.bus, self.settings)
        await self.client.start()
        self.raw_instance = nuid()
        for name in PROCESSES:
            await self._start_process(name)
        gateway = Gateway(self.settings, GatewaySettings(host="127.0.0.1", port=0), bus=None)
        self._gateway_task = asyncio.create_task(gateway.run_until(self._gateway_stop))
        await eventually(lambda: gateway.ready.is_set(), timeout=20, what="the gateway to listen")
        self.http = httpx.AsyncClient(base_url=gateway.url, timeout=WORK_BOUND + 5)
        for name in [*AGENTS, *WORKFLOWS]:
            await self.client.registry.wait_for(name, 30)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.http.aclose()
        self._gateway_stop.set()
        if self._gateway_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._gateway_task, 15)
        await self.processes.cleanup()
        await self.client.close()
        await self.bus.close()

    async def _start_process(self, name: str) -> None:
        if name == "executor":
            folder = self.tmp / "workflows"
            folder.mkdir(exist_ok=True)
            for wf, text in WORKFLOWS.items():
                (folder / f"{wf}.yaml").write_text(textwrap.dedent(text))
            proc = await self.processes.start("executor", str(folder), "--reload-interval", "1")
            ready = "executor.ready"
        else:
            path = self.tmp / f"{name}.yaml"
            path.write_text(yaml.safe_dump({"name": name, "handler": f"tests.model.agents:{AGENTS[name]}"}))
            proc = await self.processes.start("agent", str(path))
            ready = "agent.ready"

        def started() -> bool:
            assert proc.returncode is None, f"{name} exited at start: {proc.output()[-3000:]}"
            return f'"{ready}"' in proc.output()

        await eventually(started, timeout=60, what=f"{name} to be ready")
        self.procs[name] = proc

    async def kill(self, name: str) -> None:
        """SIGKILL the process, then start another in its place (ready when it returns)."""
        proc = self.procs[name]
        proc.signal(signal.SIGKILL)
        await proc.wait(20)
        self.kills += 1
        await self._start_process(name)

    # the calls
    async def bounded(self, bound: float, call: Callable[[Answer], Awaitable[None]]) -> Answer:
        """Run ``call`` (it fills the answer) within ``bound`` seconds; an error is the answer's code."""
        answer = Answer(start=asyncio.get_running_loop().time())
        try:
            async with asyncio.timeout(bound):
                await call(answer)
        except TimeoutError:
            answer.timed_out, answer.note = True, f"within {bound:g}s"
        except A2AMeshError as e:
            rpc = to_rpc_error(e)
            answer.error, answer.note = rpc.code, str(e)[:200]
            if rpc.code == codes.TRANSPORT_ERROR:  # DEADLINE_EXCEEDED, UNAVAILABLE: the call got no answer
                answer.timed_out = True
        answer.end = asyncio.get_running_loop().time()
        return answer

    async def send(self, via: Transport, target: str, message: Message, *, stream: bool = False) -> Answer:
        if via == "http":
            method = codes.SEND_STREAMING_MESSAGE if stream else codes.SEND_MESSAGE
            return await self._http(target, method, {"message": message.to_json_dict()}, stream=stream)

        async def call(answer: Answer) -> None:
            c = await self.client.dispatch(target, message, stream=stream, timeout=WORK_BOUND)
            if stream:
                async for ev in c.events():
                    answer.states.extend(_event_state(ev))
            else:
                answer.states.append(_task_state(await c.result()))

        return await self.bounded(WORK_BOUND, call)

    async def resend_raw(self, target: str, message: Message) -> Answer:
        """An exact resend over NATS as a client does after a timeout: the same message, a new ``Nats-Msg-Id``
        (JetStream does not drop it), a new JSON-RPC id and reply subject. Its final must carry its own id."""
        request_id = "resend-" + nuid()
        subject = self.bus.subjects.reply(self.raw_instance, target, nuid())
        queue: asyncio.Queue[Received] = asyncio.Queue()

        async def put(msg: Received) -> None:
            queue.put_nowait(msg)

        async def call(answer: Answer) -> None:
            sub = await self.bus.subscribe(subject, put)
            try:
                body = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=message), request_id)
                hdrs = {
                    h.VERSION: codes.A2A_VERSION,
                    h.DEADLINE: str(int((time.time() + WORK_BOUND) * 1000)),
                    h.CALL_DEPTH: "0",
                    h.REPLY_TO: subject,
                    h.MSG_ID: f"{target}:{message.message_id}:resend-{nuid()}",
                }
                await self.bus.js_publish(self.bus.subjects.request(target), body, hdrs)
                while True:
                    msg = await queue.get()
                    reply = json.loads(msg.data)
                    final = msg.headers.get(h.FINAL) == "true"
                    if final and reply.get("id") != request_id:
                        answer.note = f"its final carries JSON-RPC id {reply.get('id')!r}, not its own {request_id!r}"
                    if "error" in reply:
                        answer.error = int(reply["error"]["code"])
                        answer.note = (answer.note + " " + str(reply["error"].get("message", ""))[:200]).strip()
                        return
                    answer.states.extend(_states_of(reply["result"]))
                    if final:
                        if "task" not in reply["result"]:
                            form = next(iter(reply["result"]), "nothing")
                            answer.note = (
                                answer.note + f" its final is a {form}, not the task SendMessage answers"
                            ).strip()
                        return
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

        return await self.bounded(WORK_BOUND, call)

    async def get(self, via: Transport, target: str, task_id: str) -> Answer:
        if via == "http":
            return await self._http(target, codes.GET_TASK, {"id": task_id}, bound=CONTROL_BOUND)

        async def call(answer: Answer) -> None:
            answer.states.append(_task_state(await self.client.get_task(target, task_id, timeout=CONTROL_BOUND)))

        return await self.bounded(CONTROL_BOUND, call)

    async def cancel(self, via: Transport, target: str, task_id: str) -> Answer:
        if via == "http":
            return await self._http(target, codes.CANCEL_TASK, {"id": task_id}, bound=CONTROL_BOUND)

        async def call(answer: Answer) -> None:
            answer.states.append(_task_state(await self.client.cancel_task(target, task_id, timeout=CONTROL_BOUND)))

        return await self.bounded(CONTROL_BOUND, call)

    async def listed(self, via: Transport, target: str, context_id: str, task_id: str) -> Answer:
        """ListTasks of ``target`` in one context; the answer holds ``task_id``'s entry (none when unlisted)."""
        if via == "http":
            answer = await self._http(target, codes.LIST_TASKS, {"contextId": context_id}, bound=CONTROL_BOUND)
            answer.states = [s for s in answer.states if s[0] == task_id]
            return answer

        async def call(answer: Answer) -> None:
            page = await self.client.list_tasks(target, ListTasksRequest(context_id=context_id), timeout=CONTROL_BOUND)
            answer.states.extend(_task_state(t) for t in page.tasks if t.id == task_id)

        return await self.bounded(CONTROL_BOUND, call)

    async def subscribe(self, via: Transport, target: str, task_id: str) -> Answer:
        if via == "http":
            return await self._http(target, codes.SUBSCRIBE_TO_TASK, {"id": task_id}, stream=True)

        async def call(answer: Answer) -> None:
            async for ev in self.client.subscribe(target, task_id, timeout=WORK_BOUND):
                answer.states.extend(_event_state(ev))

        return await self.bounded(WORK_BOUND, call)

    async def _http(
        self, target: str, method: str, params: dict[str, Any], *, stream: bool = False, bound: float = WORK_BOUND
    ) -> Answer:
        """One JSON-RPC call through the gateway (an SSE stream for the streaming methods)."""
        request_id = "http-" + nuid()
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        headers = {"A2A-Version": "1.0"}

        def take(reply: dict[str, Any], answer: Answer) -> bool:
            """Fold one JSON-RPC response into the answer; True when it ends the call."""
            if reply.get("id") != request_id:
                answer.note = f"answered with JSON-RPC id {reply.get('id')!r}, not {request_id!r}"
            if "error" in reply:
                answer.error = int(reply["error"]["code"])
                answer.note = (answer.note + " " + str(reply["error"].get("message", ""))[:200]).strip()
                answer.timed_out = answer.error == codes.TRANSPORT_ERROR  # the gateway got no answer in time
                return True
            result = reply["result"]
            if method == codes.LIST_TASKS:
                answer.states.extend((str(t["id"]), str(t["status"]["state"])) for t in result.get("tasks", []))
            elif method in (codes.GET_TASK, codes.CANCEL_TASK):
                answer.states.append((str(result["id"]), str(result["status"]["state"])))
            else:
                answer.states.extend(_states_of(result))
            return False

        async def call(answer: Answer) -> None:
            if not stream:
                r = await self.http.post(f"/agents/{target}/", json=body, headers=headers)
                take(r.json(), answer)
                return
            async with self.http.stream(
                "POST", f"/agents/{target}/", json=body, headers={**headers, "Accept": "text/event-stream"}
            ) as r:
                if not r.headers.get("content-type", "").startswith("text/event-stream"):
                    take(json.loads(await r.aread()), answer)
                    return
                async for line in r.aiter_lines():
                    if line.startswith("data:") and take(json.loads(line[5:]), answer):
                        return

        return await self.bounded(bound, call)
