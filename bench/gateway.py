"""The HTTP gateway: JSON-RPC ``SendMessage`` to the echo agent through the gateway vs ``Client.send`` over NATS.

Sequential calls, interleaved (gateway, NATS, gateway, …), p50/p99 of each and the gateway's added latency;
then throughput with 64 concurrent HTTP clients through one gateway process. Beside it, the peer figure: the
stock a2a-sdk server (``bench/sdk_echo_server.py``: ``DefaultRequestHandler``, an in-memory echo
``AgentExecutor``, no durability) with the same HTTP load. The gateway runs with ``A2AMESH_LOG_LEVEL=WARNING``
(no access log line per call). Targets (issue 20): ≤ 1 ms added at p50, ≥ 3,000 calls/s per gateway.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/gateway.py` from anywhere

import httpx

from a2amesh.client import Client
from a2amesh.ids import nuid
from bench.common import REPO, BenchContext, Child, Figure, Section, cpu_seconds, drop_namespace, main, ms_since
from bench.roundtrip import flood, mesh_call

ECHO = REPO / "agent_cards" / "echo.yaml"
IN_FLIGHT = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_http(child: Child, url: str, timeout: float = 30.0) -> None:
    """Until ``url`` answers 200 (bounded), or fail with the child's output."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2) as http:
        while True:
            try:
                if (await http.get(url)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if child.proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{child.label} did not answer {url} within {timeout:g}s:\n{child.tail()}")
            await asyncio.sleep(0.1)


def _body(i: int) -> dict[str, Any]:
    message = {"messageId": nuid(), "role": "ROLE_USER", "parts": [{"data": {"n": i}}]}
    return {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}}


async def http_call(http: httpx.AsyncClient, url: str, i: int) -> float:
    """One JSON-RPC SendMessage over HTTP; milliseconds. Raises when the answer is not a completed task."""
    t0 = time.perf_counter()
    r = await http.post(url, json=_body(i), headers={"A2A-Version": "1.0"})
    elapsed = ms_since(t0)
    state = r.json().get("result", {}).get("task", {}).get("status", {}).get("state")
    if state != "TASK_STATE_COMPLETED":
        raise RuntimeError(f"{url} answered {r.status_code} {r.text[:300]}")
    return elapsed


async def run(ctx: BenchContext) -> list[Figure]:
    """Interleaved sequential latency, then 64-client throughput, for the gateway and the stock SDK server."""
    ns = ctx.new_namespace("gw")
    agent, _ = await ctx.spawn_agent(ECHO, ns)
    port = _free_port()
    gateway = await ctx.spawn(
        f"gateway-{ns}",
        [sys.executable, "-m", "a2amesh", "gateway", "--port", str(port)],
        ctx.child_env(ns, A2AMESH_LOG_LEVEL="WARNING"),
    )
    peer_port = _free_port()
    peer = await ctx.spawn(
        f"sdk-echo-{ns}",
        [sys.executable, str(REPO / "bench" / "sdk_echo_server.py"), str(peer_port)],
        ctx.child_env(ns),
    )
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/agents/echo/"
    peer_url = f"http://127.0.0.1:{peer_port}/"
    client = await Client.connect(ctx.settings(ns), name="bench-gateway")
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    http = httpx.AsyncClient(timeout=30, limits=limits)
    figures: list[Figure] = []
    try:
        await _wait_http(gateway, f"{base}/readyz")
        await _wait_http(peer, f"{peer_url}.well-known/agent-card.json")
        for i in range(ctx.scale(200, 20)):
            await http_call(http, url, i)
            await mesh_call(client, i)
            await http_call(http, peer_url, i)

        n = ctx.scale(1000, 60)
        via_http: list[float] = []
        via_nats: list[float] = []
        via_peer: list[float] = []
        for i in range(n):
            via_http.append(await http_call(http, url, i))
            via_nats.append(await mesh_call(client, i))
            via_peer.append(await http_call(http, peer_url, i))
        g = Figure.from_samples("gateway.http_send", "gateway: HTTP JSON-RPC SendMessage → echo agent", via_http)
        m = Figure.from_samples("gateway.nats_send", "same call over NATS with Client.send (same run)", via_nats)
        p = Figure.from_samples("gateway.sdk_peer_send", "stock a2a-sdk server, in-memory echo (same run)", via_peer)
        g.note = f"+{g.value - m.value:.2f} ms p50 over NATS (target ≤ 1 ms)"
        g.extra = {"added_p50_ms": g.value - m.value}
        figures += [g, m, p]

        seconds = 1.0 if ctx.quick else 10.0
        for label, target, child in (("gateway", url, gateway), ("sdk_peer", peer_url, peer)):
            await flood(lambda i, t=target: http_call(http, t, i), IN_FLIGHT, seconds / 5)  # warm-up
            cpu0 = cpu_seconds(child.pid)
            rate, lat = await flood(lambda i, t=target: http_call(http, t, i), IN_FLIGHT, seconds)
            cpu1 = cpu_seconds(child.pid)
            cpu = (cpu1 - cpu0) * 1000 / len(lat) if cpu0 is not None and cpu1 is not None and lat else None
            title = (
                f"gateway throughput, {IN_FLIGHT} HTTP clients (target ≥ 3,000/s)"
                if label == "gateway"
                else f"stock a2a-sdk server throughput, {IN_FLIGHT} HTTP clients"
            )
            note = f"latency p50 {Figure.from_samples('', '', lat).value:.1f} ms"
            if cpu is not None:
                note += f", server CPU {cpu:.2f} ms/call"
            figures.append(Figure(f"gateway.{label}_throughput", title, rate, "calls/s", n=len(lat), note=note))
    finally:
        await http.aclose()
        await client.close()
        await gateway.stop()
        await peer.stop()
        await agent.stop()
        await drop_namespace(ctx, ns)
    return figures


SECTION = Section(
    "gateway", "gateway: HTTP JSON-RPC through the gateway vs NATS, and the stock SDK server", run, latency=True
)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "gateway", __doc__ or ""))
