"""``GET /api/events`` over real HTTP: server-sent lifecycle events, filters, keep-alives, and a client that
disconnects and comes back with ``Last-Event-ID`` without missing anything."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.waiting import within

FLOW = """
name: flow
nodes:
  - {id: a, type: agent, agent_name: double, input: "{{workflow.input}}"}
  - {id: b, type: agent, agent_name: double, depends_on: [a], input: "{{a.output}}"}
output_mapping: {n: "{{b.output.n}}"}
"""

OTHER = """
name: other
nodes:
  - {id: a, type: agent, agent_name: double, input: "{{workflow.input}}"}
"""


async def double(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"n": input["n"] * 2}


@dataclass
class Sse:
    """One parsed server-sent event (or a comment)."""

    id: int | None = None
    event: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    comment: str | None = None


class Feed:
    """Reads one SSE response, event by event."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.seen: list[Sse] = []

    async def next(self) -> Sse:
        current = Sse()
        async for line in self._lines:
            if line == "":
                if current.comment is not None or current.event is not None:
                    self.seen.append(current)
                    return current
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                current.comment = value
            elif name == "id":
                current.id = int(value)
            elif name == "event":
                current.event = value
            elif name == "data":
                current.data = json.loads(value)
        raise AssertionError("the event stream ended")

    async def next_event(self) -> Sse:
        """The next event, past any keep-alive comments (a loaded machine can be slower than the keep-alive)."""
        while (item := await self.next()).comment is not None:
            pass
        return item

    async def until(self, done: Callable[[Sse], bool]) -> list[Sse]:
        out = []
        while True:
            item = await self.next()
            if item.comment is None:
                out.append(item)
            if done(item):
                return out


@contextlib.asynccontextmanager
async def feed(http: httpx.AsyncClient, **params: Any) -> AsyncIterator[Feed]:
    headers = params.pop("headers", {})
    async with http.stream("GET", "/api/events", params=params, headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        f = Feed(r)
        first = await within(f.next(), 10, "the feed's ready comment")
        assert first.comment == "ready"
        yield f


@pytest.fixture
async def http(agent_host: Any, executor: Any, gateway: Any, client: Any) -> AsyncIterator[httpx.AsyncClient]:
    await agent_host("double", double)
    await executor({"flow": FLOW, "other": OTHER})
    await client.registry.wait_for("flow", 5)
    await client.registry.wait_for("other", 5)
    url = await gateway(events_keepalive=0.3)
    async with httpx.AsyncClient(base_url=url, timeout=30) as h:
        yield h


async def run(http: httpx.AsyncClient, workflow: str, n: int) -> str:
    r = await http.post(f"/api/workflows/{workflow}/execute", params={"wait": "true"}, json={"input": {"n": n}})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "completed"
    return str(r.json()["id"])


def finished(execution_id: str) -> Callable[[Sse], bool]:
    return lambda e: e.event == "workflow.completed" and e.data.get("execution_id") == execution_id


async def test_reconnect_with_last_event_id_misses_nothing(http: httpx.AsyncClient) -> None:
    """A client that drops mid-run and reconnects with Last-Event-ID gets every event it missed, once."""
    async with feed(http, workflow="flow") as control:
        async with feed(http, workflow="flow") as dropped:
            first = await run(http, "flow", 1)
            before = [await within(dropped.next_event(), 10, "an event") for _ in range(3)]
        assert all(e.id is not None for e in before)
        last_id = before[-1].id
        second = await run(http, "flow", 2)  # while the client is away
        await run(http, "other", 5)  # filtered out
        async with feed(http, workflow="flow", headers={"Last-Event-ID": str(last_id)}) as back:
            third = await run(http, "flow", 3)
            after = await within(back.until(finished(third)), 10, "the events after the reconnect")
        reference = await within(control.until(finished(third)), 10, "the uninterrupted feed")
    got = [e.id for e in before + after]
    assert got == [e.id for e in reference], "the reconnected client's events differ from the uninterrupted feed"
    assert len(got) == len(set(got))
    executions = {e.data["execution_id"] for e in reference}
    assert executions == {first, second, third}
    kinds = [e.event for e in reference if e.data["execution_id"] == second]
    assert kinds[0] == "workflow.started"
    assert kinds[-1] == "workflow.completed"
    assert kinds.count("node.completed") == 2
    assert all(e.data["workflow"] == "flow" for e in reference)


async def test_filters_by_type_and_execution_and_pings(http: httpx.AsyncClient) -> None:
    """type and execution filters let only their events through; an idle feed sends keep-alive comments."""
    async with feed(http, type="workflow.completed") as completions, feed(http, type=["node"]) as nodes:
        one = await run(http, "other", 1)
        two = await run(http, "flow", 2)
        got = await within(completions.until(finished(two)), 10, "the completions")
        assert [(e.event, e.data["execution_id"]) for e in got] == [
            ("workflow.completed", one),
            ("workflow.completed", two),
        ]
        node_events = await within(
            nodes.until(
                lambda e: (
                    e.data.get("execution_id") == two and e.data.get("node_id") == "b" and e.event == "node.completed"
                )
            ),
            10,
            "the node events",
        )
        assert {(e.event or "").split(".")[0] for e in node_events} == {"node"}
        async with feed(http, execution=two, after=0) as replay:
            again = await within(replay.until(finished(two)), 10, "the replay of one execution")
        assert {e.data["execution_id"] for e in again} == {two}
        assert again[0].event == "workflow.started"
        ping = await within(completions.next(), 5, "a keep-alive comment")
        assert ping.comment == "ping"


async def test_bad_event_requests_are_precise(http: httpx.AsyncClient) -> None:
    """A bad type, a bad Last-Event-ID and a bad workflow name are 422 naming the field."""
    r = await http.get("/api/events", params={"type": "workflow.done,tasks"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["path"] == "query.type"
    assert "'tasks' is not an event type" in r.json()["detail"]
    r = await http.get("/api/events", headers={"Last-Event-ID": "abc"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["path"] == "header.last-event-id"
    r = await http.get("/api/events", params={"workflow": "no.dots"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["path"] == "query.workflow"


async def test_an_open_stream_ends_when_the_gateway_stops(bus: Any, settings: Any, redis: Any) -> None:
    """Stopping the gateway ends an open /api/events stream at once: the client sees the end, and the gateway
    stops well inside its grace period instead of waiting for the stream."""
    import asyncio

    from a2amesh.gateway import Gateway, GatewaySettings
    from a2amesh.gateway.server import SHUTDOWN_GRACE

    gw = Gateway(settings, GatewaySettings(host="127.0.0.1", port=0), bus=bus, redis=redis)
    stop = asyncio.Event()
    serving = asyncio.create_task(gw.run_until(stop))
    await within(gw.ready.wait(), 10, "the gateway to listen")
    async with (
        httpx.AsyncClient(base_url=gw.url, timeout=30) as http,
        http.stream("GET", "/api/events") as response,
    ):
        feed = Feed(response)
        assert (await within(feed.next(), 10, "the ready comment")).comment == "ready"
        stop.set()
        limit = SHUTDOWN_GRACE - 2
        await within(serving, limit, f"the gateway to stop within {limit}s with a stream open")
        rest = [line async for line in feed._lines]  # the stream has ended: no more events
        assert all(not line.startswith("data:") for line in rest)
