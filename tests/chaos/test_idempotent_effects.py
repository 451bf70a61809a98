"""The limit of fencing, and how a handler's idempotency key closes it (docs/agents.md, "Effects outside the
mesh"): an agent replica is SIGSTOPped after its handler charged a payment on an outside HTTP service and
before its result was stored; another replica takes the task over and runs the handler again. The service
de-duplicates by ``Idempotency-Key`` (``ctx.idempotency_key``, the same on both runs), so the payment is made
once; the woken replica's final is fenced, and the caller gets one answer, the taken-over run's."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from a2amesh.bus.nats import Bus
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from tests.chaos.conftest import ChaosSummary
from tests.chaos.test_starvation import agent_instance, log_count, stop
from tests.support.processes import ProcessFactory, write_agent
from tests.support.waiting import eventually, within

Report = Callable[[ChaosSummary], None]


@dataclass
class Payments:
    """An outside payment service over real HTTP that applies a charge once per ``Idempotency-Key``."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    applied: dict[str, str] = field(default_factory=dict)  # idempotency key -> payment id
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def charge(self, request: web.Request) -> web.Response:
        key = request.headers.get("Idempotency-Key", "")
        body = await request.json()
        self.requests.append({"key": key, "pid": body["pid"], "at": time.monotonic()})
        self.arrived.set()
        if not key:
            return web.json_response({"error": "Idempotency-Key required"}, status=400)
        payment = self.applied.setdefault(key, f"pay-{len(self.applied) + 1}")  # a replay answers the first
        return web.json_response({"payment": payment})


@pytest.fixture
async def payments() -> AsyncIterator[Payments]:
    service = Payments()
    app = web.Application()
    app.router.add_post("/charge", service.charge)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    service.url = f"http://127.0.0.1:{port}/charge"
    try:
        yield service
    finally:
        await runner.cleanup()


async def test_handler_paused_past_its_effect_is_fenced_and_its_effect_made_once(
    processes: ProcessFactory,
    bus: Bus,
    client: Client,
    settings: Settings,
    tmp_path: Path,
    payments: Payments,
    report: Report,
) -> None:
    path = write_agent(tmp_path, "payer", "paid_effect", max_concurrency=4)
    env = {"A2AMESH_TEST_EFFECTS_URL": payments.url}
    replicas = [await processes.start("agent", str(path), env=env) for _ in range(2)]

    async def both_ready() -> bool:
        return all(agent_instance(p) for p in replicas)

    await eventually(both_ready, timeout=30, what="two payer replicas")
    await eventually(lambda: client.registry.get("payer") is not None, timeout=10, what="the payer card")
    # past the effect: the handler sleeps after it long enough to be stopped there
    call = await client.dispatch("payer", make_message(data={"amount": 5, "seconds_after": 2.0}), timeout=120)
    await within(payments.arrived.wait(), 30, "the first charge")
    first = payments.requests[0]
    victim = next(p for p in replicas if p.pid == first["pid"])
    stopped_at = await stop(victim)
    try:
        # past the claim and JetStream's ack wait: the other replica takes the task over and runs it again
        task = await within(call.result(), 60, "the taken-over run's answer")
    finally:
        victim.signal(signal.SIGCONT)
    recovery = time.monotonic() - stopped_at
    await eventually(lambda: log_count(victim, "task.fenced") >= 1 or None, timeout=15, what="the woken final fenced")

    assert task.status.state == TaskState.COMPLETED
    assert len(payments.requests) == 2, payments.requests
    assert {r["pid"] for r in payments.requests} == {p.pid for p in replicas}, "the handler ran on both replicas"
    assert payments.requests[0]["key"] == payments.requests[1]["key"], "a takeover changed the idempotency key"
    assert len(payments.applied) == 1, "the outside effect happened twice"
    assert task.output()["payment"] == "pay-1"
    assert log_count(victim, "task.fenced") == 1, "the fenced run is counted and logged once"
    finished = [
        json.loads(line)
        for line in victim.output().splitlines()
        if line.startswith("{") and '"task.finished"' in line and call.task_id in line
    ]
    assert not finished, "the woken replica finished (stored and answered) the task"
    handler_effects = len(payments.requests)  # the handler reached its effect on both replicas: the limit case
    # a new call (a new messageId) is another invocation: another key, another payment
    second = await within(client.send("payer", {"amount": 5, "seconds_after": 0}, timeout=30), 30, "a second call")
    assert second.output()["payment"] == "pay-2"
    assert payments.requests[-1]["key"] != payments.requests[0]["key"]
    report(
        ChaosSummary(
            scenario="agent-sigstop-past-effect-idempotency-key",
            runs=1,
            completed=1,
            lost=0,
            duplicated=handler_effects - 1,
            max_recovery_s=recovery,
            fenced=log_count(victim, "task.fenced"),
            limit=1,
        )
    )
