"""The wire fuzzer's campaign: a real mesh, an outside caller on raw ``nats``, and what it observed.

One campaign per target (an agent, a workflow): start the mesh in a fresh namespace, send every case
(hostile ones interleaved with valid calls) to the target's request and control subjects, wait (bounded)
for the answers, wait (bounded) for the work consumer to drain, then watch the logs for a few quiet
seconds. Everything is recorded in a :class:`Report`; the tests assert properties over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import traceback
import uuid
from collections import Counter
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import structlog

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.node_handler import NodeHandler
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.config import Settings
from a2amesh.executor.service import WorkflowExecutor
from a2amesh.ids import nuid
from a2amesh.store.redis import connect_redis
from tests.fuzz import hostile
from tests.fuzz.hostile import Spec
from tests.support.executors import write_workflows
from tests.support.servers import MeshServers

ANSWER_BOUND = 8.0
"""Seconds after the last message of a phase within which every expected answer must have arrived."""
DRAIN_BOUND = 12.0
"""Seconds after the traffic within which the work consumer must hold nothing pending or unacked."""
QUIET_WINDOW = 4.0
"""Seconds of logs watched once the consumer drained (or the drain bound passed)."""
REPEAT_LIMIT = 3
"""A log event seen more often than this in the quiet window repeats without end."""

WORKFLOW = """
name: wf
description: echoes its input's value through one agent node
nodes:
  - {id: a, type: agent, agent_name: echo, input: {value: "{{workflow.input.value}}"}}
output_mapping: {result: "{{a.output.value}}"}
"""

SUBJECT_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


async def echo(input: Any, ctx: Any) -> Any:
    return input


@dataclass
class Answer:
    subject: str
    data: bytes
    headers: dict[str, str]
    at: float

    def json(self) -> Any:
        try:
            return json.loads(self.data)
        except ValueError:
            return None

    @property
    def final(self) -> bool:
        return self.headers.get("A2A-Final") == "true"


@dataclass
class Sent:
    """One message as sent, and everything that came back for it."""

    n: int
    spec: Spec
    subject: str
    body: bytes
    headers: dict[str, str]
    reply: str | None
    """Where the answers go: a valid ``A2A-Reply-To`` or the NATS reply inbox (None: nowhere valid)."""
    token: str
    """A token unique to this message inside its reply subject (to attribute stray replies)."""
    at: float = 0.0
    seq: int | None = None
    duplicate: bool = False
    send_error: str = ""
    answers: list[Answer] = field(default_factory=list)
    strays: list[Answer] = field(default_factory=list)
    waited_until: float = 0.0

    @property
    def expected(self) -> str:
        if self.send_error or self.duplicate:
            return "none"
        return self.spec.answers

    def done(self) -> bool:
        if self.spec.target == "work" or self.spec.target == "subscribe":
            return any(a.final for a in self.answers)
        return bool(self.answers)

    def describe(self, limit: int = 300) -> str:
        body = self.body.decode("utf-8", "backslashreplace")
        shown = body if len(body) <= limit else f"{body[:limit]}… ({len(self.body):,} bytes)"
        hdrs = {k: (v if len(v) <= 60 else f"{v[:60]}…({len(v)} chars)") for k, v in self.headers.items()}
        return f"#{self.n} {self.spec.kind} → {self.subject} headers={hdrs} body={shown}"


@dataclass
class LogEvent:
    at: float
    level: str
    event: str
    fields: dict[str, str]
    exc: str

    def line(self) -> str:
        keys = " ".join(f"{k}={v}" for k, v in self.fields.items())
        return f"[{self.level}] {self.event} {keys}" + (f"\n{self.exc}" if self.exc else "")


@dataclass
class Report:
    target: str
    name: str
    namespace: str
    sent: list[Sent] = field(default_factory=list)
    strays: list[Answer] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)
    consumer: dict[str, int] = field(default_factory=dict)
    drained: bool = False
    quiet_from: float = 0.0
    services_alive: dict[str, str] = field(default_factory=dict)
    known_task: str = ""
    seconds: float = 0.0

    def by_seq(self, seq: Any) -> str:
        for s in self.sent:
            if s.seq is not None and str(s.seq) == str(seq):
                return s.describe(160)
        return ""

    def summary(self) -> dict[str, Any]:
        codes: Counter[str] = Counter()
        for s in self.sent:
            for a in s.answers:
                if a.final or s.spec.target == "control":
                    body = a.json()
                    err = body.get("error") if isinstance(body, dict) else None
                    codes[str(err.get("code")) if isinstance(err, dict) else "result"] += 1
        valid = [s for s in self.sent if s.spec.valid]
        return {
            "messages": len(self.sent),
            "work": sum(s.spec.target == "work" for s in self.sent),
            "control": sum(s.spec.target != "work" for s in self.sent),
            "answers": dict(sorted(codes.items())),
            "valid calls": len(valid),
            "tracebacks": len(crash_events(self)),
            "stray replies": len(self.strays) + sum(len(s.strays) for s in self.sent),
            "seconds": round(self.seconds, 1),
        }


SUMMARIES: dict[str, dict[str, Any]] = {}
"""Filled by each campaign."""


def summary_lines() -> list[str]:
    """Each campaign's counts, for the end of the run (tests/conftest.py prints them)."""
    return [f"{target}: " + ", ".join(f"{k}: {v}" for k, v in counts.items()) for target, counts in SUMMARIES.items()]


# ---------------------------------------------------------------- log capture


class _StdlibRecorder(logging.Handler):
    def __init__(self, out: list[LogEvent]) -> None:
        super().__init__(logging.WARNING)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        exc = "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else ""
        self.out.append(
            LogEvent(
                time.monotonic(),
                record.levelname.lower(),
                f"stdlib:{record.name}",
                {"msg": record.getMessage()[:300]},
                exc,
            )
        )


@contextlib.contextmanager
def captured_logs(out: list[LogEvent]) -> Any:
    """Record every structlog event (and stdlib WARNING+ record) of this process into ``out``."""

    def record(_: Any, method: str, event: MutableMapping[str, Any]) -> Any:
        exc = ""
        info = event.pop("exc_info", None)
        if info:
            exc = traceback.format_exc() if info is True else "".join(traceback.format_exception(info))
        name = str(event.pop("event", ""))
        level = str(event.pop("level", method))
        fields = {k: str(v)[:200] for k, v in event.items()}
        out.append(LogEvent(time.monotonic(), level, name, fields, exc))
        raise structlog.DropEvent

    saved = structlog.get_config()
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level, record],
        cache_logger_on_first_use=False,
    )
    handler = _StdlibRecorder(out)
    logging.getLogger().addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
        structlog.configure(**saved)


def crash_events(report: Report) -> list[LogEvent]:
    """Log events that show a crash: a traceback, an error-level event, a callback exception (``nats.error``)."""
    return [
        e
        for e in report.logs
        if e.exc or e.level in ("error", "critical", "exception") or "crash" in e.event or e.event == "nats.error"
    ]


# ---------------------------------------------------------------- the campaign


class Caller:
    """An outside caller on a raw ``nats`` connection: publishes cases and collects every answer."""

    def __init__(self, report: Report, settings: Settings, nc: Any) -> None:
        self.report = report
        self.nc = nc
        self.js = nc.jetstream()
        self.ns = settings.namespace
        self.prefix = f"{self.ns}.a2a.v1.reply."
        self.instance = "fz" + nuid()
        self.inbox = "_FZ." + nuid()
        self.by_reply: dict[str, Sent] = {}
        self.by_token: dict[str, Sent] = {}
        self.changed = asyncio.Event()

    async def start(self) -> None:
        await self.nc.subscribe(self.prefix + ">", cb=self._on_reply)
        await self.nc.subscribe("zzfuzz.>", cb=self._on_reply)
        await self.nc.subscribe(self.inbox + ".>", cb=self._on_reply)

    async def _on_reply(self, msg: Any) -> None:
        answer = Answer(msg.subject, msg.data, dict(msg.headers or {}), time.monotonic())
        sent = self.by_reply.get(msg.subject)
        if sent is not None:
            sent.answers.append(answer)
        else:
            owner = next((s for t, s in self.by_token.items() if t in msg.subject), None)
            if owner is not None:
                owner.strays.append(answer)
            elif not valid_reply_grammar(msg.subject, self.prefix) and not msg.subject.startswith(self.inbox):
                self.report.strays.append(answer)
        self.changed.set()

    def render(self, spec: Spec, n: int, known_task: str) -> Sent:
        token = f"fz{n}x{nuid()[:10]}"
        body = spec.body.replace(b"@ns@", self.ns.encode()).replace(b"@known@", known_task.encode())
        while b"@fresh@" in body:
            body = body.replace(b"@fresh@", nuid().encode(), 1)
        headers = {"A2A-Version": "1.0"}
        if spec.target == "work":
            headers["Nats-Msg-Id"] = f"fuzz-{token}"
        reply: str | None = None
        if spec.target == "control":
            reply = f"{self.inbox}.{token}"
        elif spec.reply_to == "valid":
            reply = f"{self.prefix}{self.instance}.{self.report.name}.{token}"
            headers["A2A-Reply-To"] = reply
        elif spec.reply_to != "none":
            headers["A2A-Reply-To"] = spec.reply_to.replace("@prefix@", self.prefix).replace("@inst@", token)
        headers.update(dict(spec.headers))
        headers = {k: v for k, v in headers.items() if v != ""}
        name = self.report.name
        subject = f"{self.ns}.a2a.v1.agent.{'request' if spec.target == 'work' else 'control'}.{name}"
        return Sent(n, spec, subject, body, headers, reply, token)

    async def send(self, sent: Sent) -> None:
        self.report.sent.append(sent)
        if sent.reply is not None:
            self.by_reply[sent.reply] = sent
        self.by_token[sent.token] = sent
        sent.at = time.monotonic()
        try:
            if sent.spec.target == "work":
                ack = await self.js.publish(sent.subject, sent.body, headers=sent.headers, timeout=5)
                sent.seq, sent.duplicate = ack.seq, bool(ack.duplicate)
            elif sent.spec.target == "control":
                await self.nc.publish(sent.subject, sent.body, reply=sent.reply or "", headers=sent.headers)
            else:
                await self.nc.publish(sent.subject, sent.body, headers=sent.headers)
        except Exception as e:
            sent.send_error = f"{type(e).__name__}: {e}"

    async def wait_answers(self, batch: list[Sent], bound: float) -> None:
        """Until every message of ``batch`` that expects an answer has one, at most ``bound`` seconds."""
        deadline = time.monotonic() + bound
        while True:
            missing = [s for s in batch if s.expected == "one" and not s.done()]
            remaining = deadline - time.monotonic()
            if not missing or remaining <= 0:
                break
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        for s in batch:
            s.waited_until = time.monotonic()


def valid_reply_grammar(subject: str, prefix: str) -> bool:
    """``{ns}.a2a.v1.reply.{instance}.{callee}.{call_id}`` (an instance being ``nuid`` or ``scope.nuid``), every
    token of ``[A-Za-z0-9_-]+``."""
    if not subject.startswith(prefix):
        return False
    tokens = subject[len(prefix) :].split(".")
    return len(tokens) in (3, 4) and all(SUBJECT_TOKEN.match(t) for t in tokens)


def interleave(hostile_specs: list[Spec], valid: list[Spec]) -> list[Spec]:
    """The hostile cases with the valid ones spread evenly between them."""
    out: list[Spec] = []
    step = max(1, len(hostile_specs) // max(1, len(valid)))
    pending = list(valid)
    for i, spec in enumerate(hostile_specs):
        if i % step == 0 and pending:
            out.append(pending.pop(0))
        out.append(spec)
    return out + pending


@dataclass
class Plan:
    work: list[Spec]
    control: list[Spec]


def plan(target: str, max_payload: int) -> Plan:
    """The cases of one campaign: fixed ones from issue 28, then hypothesis draws, with valid calls between."""
    rand = 60 if target == "agent" else 40
    work_hostile = [
        *hostile.fixed_work_cases(),
        hostile.large_work_case(max_payload),
        *hostile.draw_specs(hostile.work_envelopes(), rand),
        *hostile.draw_specs(hostile.work_parts(), rand // 2),
        *hostile.draw_specs(hostile.work_headers(), rand // 2),
    ]
    work_valid = [hostile.valid_work(i, streaming=i % 3 == 0) for i in range(12 if target == "agent" else 8)]
    control_hostile = [
        *hostile.fixed_control_cases(),
        *hostile.draw_specs(hostile.control_envelopes(), rand),
        *hostile.draw_specs(hostile.control_headers(), 10),
    ]
    control_valid = [spec for i in range(4) for spec in hostile.valid_control(i)]
    return Plan(interleave(work_hostile, work_valid), interleave(control_hostile, control_valid))


async def _start(service: Any, what: str) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(service.run_until(stop))
    waiter = asyncio.create_task(service.ready.wait())
    done, _ = await asyncio.wait({waiter, task}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task in done:
        task.result()
    assert service.ready.is_set(), f"{what} did not become ready within 10s"
    return stop, task


async def run_campaign(target: str, servers: MeshServers, tmp: Path) -> Report:
    """Run one campaign against an agent (``target="agent"``) or a workflow (``"workflow"``)."""
    namespace = "fz" + uuid.uuid4().hex[:8]
    settings = Settings.load(
        environ={}, profile="test", nats_url=servers.nats_url, redis_url=servers.redis_url, namespace=namespace
    )
    report = Report(target, "echo" if target == "agent" else "wf", namespace)
    started = time.monotonic()
    with captured_logs(report.logs):
        await _campaign(report, settings, tmp)
    report.seconds = time.monotonic() - started
    SUMMARIES[target] = report.summary()
    return report


async def _campaign(report: Report, settings: Settings, tmp: Path) -> None:
    setup_bus = await Bus.connect(settings, name="fuzz-setup")
    await init_mesh(setup_bus, settings)
    services: list[tuple[str, asyncio.Event, asyncio.Task[None]]] = []
    closers: list[Any] = [setup_bus.close]
    assert settings.nats_url is not None
    nc = await nats.connect(settings.nats_url, name="fuzz-caller")
    closers.append(nc.close)
    try:
        agent_bus = await Bus.connect(settings, name="fuzz-agent")
        agent_redis = await connect_redis(settings)
        closers += [agent_bus.close, agent_redis.aclose]
        runtime = NodeHandler(PythonAgent(AgentDefinition(name="echo", handler="inline:handler"), echo))
        host = AgentHost(runtime, bus=agent_bus, redis=agent_redis, settings=settings)
        services.append(("agent host echo", *await _start(host, "the echo agent")))
        if report.target == "workflow":
            ex_bus = await Bus.connect(settings, name="fuzz-executor")
            ex_redis = await connect_redis(settings)
            closers += [ex_bus.close, ex_redis.aclose]
            folder = write_workflows(tmp / f"wf-{report.namespace}", {"wf": WORKFLOW})
            ex = WorkflowExecutor(folder, bus=ex_bus, redis=ex_redis, settings=settings, reload_interval=5)
            services.append(("executor", *await _start(ex, "the workflow executor")))
        await _traffic(report, settings, nc, setup_bus)
        for what, _, task in services:
            report.services_alive[what] = (
                "running"
                if not task.done()
                else f"stopped: {task.exception()!r}"
                if not task.cancelled()
                else "cancelled"
            )
    finally:
        for _, stop, _ in services:
            stop.set()
        for what, _, task in services:
            try:
                await asyncio.wait_for(task, 20)
            except Exception as e:
                report.services_alive.setdefault(what, f"shutdown failed: {e!r}")
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()


async def _traffic(report: Report, settings: Settings, nc: Any, bus: Bus) -> None:
    caller = Caller(report, settings, nc)
    await caller.start()
    warmup = caller.render(hostile.valid_work(10_000, streaming=False), 0, "")
    await caller.send(warmup)
    await caller.wait_answers([warmup], ANSWER_BOUND)
    body = warmup.answers[-1].json() if warmup.answers else None
    task = body.get("result", {}).get("task", {}) if isinstance(body, dict) else {}
    assert isinstance(task, dict), f"the warm-up call was not answered with a task: {body!r}"
    assert task.get("id"), f"the warm-up call was not answered with a task: {body!r}"
    report.known_task = str(task["id"])
    cases = plan(report.target, nc.max_payload)
    n = 1
    for phase in (cases.work, cases.control):
        batch = []
        for spec in phase:
            sent = caller.render(spec, n, report.known_task)
            n += 1
            await caller.send(sent)
            batch.append(sent)
        await caller.wait_answers(batch, ANSWER_BOUND)
    report.drained = await _drain(report, bus, settings)
    report.quiet_from = time.monotonic()
    await asyncio.sleep(QUIET_WINDOW)  # an observation window, not a synchronisation: logs are counted in it


async def _drain(report: Report, bus: Bus, settings: Settings) -> bool:
    deadline = time.monotonic() + DRAIN_BOUND
    while True:
        info = await bus.jsm.consumer_info(bus.subjects.tasks_stream, report.name)
        report.consumer = {
            "num_pending": int(info.num_pending or 0),
            "num_ack_pending": int(info.num_ack_pending or 0),
            "num_redelivered": int(info.num_redelivered or 0),
        }
        if not any(report.consumer.values()):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)


def run(target: str, servers: MeshServers, tmp: Path) -> Report:
    """Run a campaign from synchronous code (a module-scoped fixture) in its own event loop."""
    return asyncio.run(run_campaign(target, servers, tmp))
