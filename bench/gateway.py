"""The HTTP gateway: JSON-RPC ``SendMessage`` to the echo agent through the gateway vs ``Client.send`` over NATS.

Sequential calls, interleaved (gateway, NATS, gateway, …), p50/p99 of each and the gateway's added latency;
then throughput with 64 concurrent HTTP clients through one gateway process. Beside it, the peer figure: the
stock a2a-sdk server (``bench/sdk_echo_server.py``: ``DefaultRequestHandler``, an in-memory echo
``AgentExecutor``, no durability) with the same HTTP load. The gateway runs with ``A2AMESH_LOG_LEVEL=WARNING``
(no access log line per call). Targets (issue 20): ≤ 1 ms added at p50, ≥ 3,000 calls/s per gateway.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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


class RawHttp:
    """A bare HTTP/1.1 keep-alive client for one URL: a pool of connections, ``Content-Length`` answers only.

    httpx costs the bench process ~10–16 ms of CPU per call on the 2-core machine, more than the servers it
    measures, so with it the throughput figure was the load generator's and the latency figure carried the
    client's own time (which the NATS call beside it does not). This client writes a pre-encoded request and
    reads the status line, the headers and the body: tens of microseconds.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path or "/"
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._all: list[asyncio.StreamWriter] = []

    async def post(self, body: bytes, headers: str = "") -> tuple[int, bytes]:
        """POST ``body`` as JSON; returns (status, body). A kept-alive connection the server has closed since
        (uvicorn closes them after 5 s idle) is replaced by a new one."""
        request = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"{headers}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return await self._send(request)

    async def get(self, query: str = "") -> tuple[int, bytes]:
        """GET the URL with ``query`` appended (``?a=b``); returns (status, body)."""
        return await self._send(f"GET {self.path}{query} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n\r\n".encode())

    async def _send(self, request: bytes) -> tuple[int, bytes]:
        while self._idle:
            reader, writer = self._idle.pop()
            if reader.at_eof():
                writer.close()
                continue
            try:
                return await self._exchange(reader, writer, request)
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()  # closed by the server while idle: nothing was answered, send it again
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self._all.append(writer)
        return await self._exchange(reader, writer, request)

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
    ) -> tuple[int, bytes]:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        data = await reader.readexactly(length)
        self._idle.append((reader, writer))
        return status, data

    async def aclose(self) -> None:
        """Close every connection."""
        for writer in self._all:
            writer.close()
        self._all.clear()
        self._idle.clear()


def _body(i: int) -> bytes:
    message = {"messageId": nuid(), "role": "ROLE_USER", "parts": [{"data": {"n": i}}]}
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}}).encode()


async def http_call(http: RawHttp, i: int) -> float:
    """One JSON-RPC SendMessage over HTTP; milliseconds. Raises when the answer is not a completed task."""
    t0 = time.perf_counter()
    status, data = await http.post(_body(i), "A2A-Version: 1.0\r\n")
    elapsed = ms_since(t0)
    if b'"TASK_STATE_COMPLETED"' not in data:
        raise RuntimeError(f"{http.path} answered {status} {data[:300]!r}")
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
    via_gw, via_sdk = RawHttp(url), RawHttp(peer_url)
    figures: list[Figure] = []
    try:
        await _wait_http(gateway, f"{base}/readyz")
        await _wait_http(peer, f"{peer_url}.well-known/agent-card.json")
        for i in range(ctx.scale(200, 20)):
            await http_call(via_gw, i)
            await mesh_call(client, i)
            await http_call(via_sdk, i)

        n = ctx.scale(1000, 60)
        via_http: list[float] = []
        via_nats: list[float] = []
        via_peer: list[float] = []
        for i in range(n):
            via_http.append(await http_call(via_gw, i))
            via_nats.append(await mesh_call(client, i))
            via_peer.append(await http_call(via_sdk, i))
        g = Figure.from_samples("gateway.http_send", "gateway: HTTP JSON-RPC SendMessage → echo agent", via_http)
        m = Figure.from_samples("gateway.nats_send", "same call over NATS with Client.send (same run)", via_nats)
        p = Figure.from_samples("gateway.sdk_peer_send", "stock a2a-sdk server, in-memory echo (same run)", via_peer)
        g.note = f"+{g.value - m.value:.2f} ms p50 over NATS (target ≤ 1 ms)"
        g.extra = {"added_p50_ms": g.value - m.value}
        figures += [g, m, p]

        seconds = 1.0 if ctx.quick else 10.0
        for label, target, child in (("gateway", via_gw, gateway), ("sdk_peer", via_sdk, peer)):
            await flood(lambda i, t=target: http_call(t, i), IN_FLIGHT, seconds / 5)  # warm-up
            cpu0, own0 = cpu_seconds(child.pid), time.process_time()
            rate, lat = await flood(lambda i, t=target: http_call(t, i), IN_FLIGHT, seconds)
            cpu1, own1 = cpu_seconds(child.pid), time.process_time()
            cpu = (cpu1 - cpu0) * 1000 / len(lat) if cpu0 is not None and cpu1 is not None and lat else None
            title = (
                f"gateway throughput, {IN_FLIGHT} HTTP clients (target ≥ 3,000/s)"
                if label == "gateway"
                else f"stock a2a-sdk server throughput, {IN_FLIGHT} HTTP clients"
            )
            note = f"latency p50 {Figure.from_samples('', '', lat).value:.1f} ms"
            if cpu is not None:
                note += f", server CPU {cpu:.2f} ms/call"
            if lat:
                note += f", bench client CPU {(own1 - own0) * 1000 / len(lat):.2f} ms/call"
            figures.append(Figure(f"gateway.{label}_throughput", title, rate, "calls/s", n=len(lat), note=note))
    finally:
        await via_gw.aclose()
        await via_sdk.aclose()
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
