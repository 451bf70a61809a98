"""The proxy hop of a remote A2A agent (docs/interop.md): a call through the mesh to a remote, beside a direct
HTTP call to the same remote, measured in the same run.

Remote = the stock a2a-sdk echo server (``bench/sdk_echo_server.py``, its own process). Direct = an a2a-sdk
client's ``SendMessage`` (JSON-RPC, not streaming) to it from the bench process. Through the mesh =
``Client.send("echo_remote", …)``: JetStream to the proxy process (``a2amesh remote serve``), claim and final in
Redis, the same a2a-sdk call from the proxy (streaming, as the card offers), the reply back over NATS. Calls are
interleaved one by one; the hop's cost is the difference of the medians, and the CPU per call of the proxy (and of
nats-server and Valkey) in a mesh-only phase.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/remote_hop.py` from anywhere

from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client
from a2amesh.protocol import TaskState
from a2amesh.registry import Registry
from bench.common import REPO, BenchContext, Figure, Section, cpu_seconds, drop_namespace, main, ms_since

AGENT = "echo_remote"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.perf_counter() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the echo server did not listen on {port} within {timeout:g}s") from None
            await asyncio.sleep(0.05)


async def run(ctx: BenchContext) -> list[Figure]:
    """Interleaved direct and proxied calls, then CPU per proxied call."""
    ns = ctx.new_namespace("hop")
    port = _free_port()
    server = await ctx.spawn(
        "sdk-echo", [sys.executable, str(REPO / "bench" / "sdk_echo_server.py"), str(port)], ctx.child_env(ns)
    )
    await _wait_port(port)
    declared = ctx.tmp / "echo_remote.yaml"
    declared.write_text(yaml.safe_dump({"remote": {"url": f"http://127.0.0.1:{port}", "name": AGENT}}))
    settings = ctx.settings(ns)
    bus = await Bus.connect(settings, name="bench-hop-init")
    try:
        await init_mesh(bus, settings)
        registry = Registry(bus, card_ttl=settings.card_ttl)
        await registry.start()
        proxy = await ctx.spawn(
            "proxy", [sys.executable, "-m", "a2amesh", "remote", "serve", str(declared)], ctx.child_env(ns)
        )
        try:
            await registry.wait_for(AGENT, 60)
        except TimeoutError as e:
            raise RuntimeError(f"the proxy published no card:\n{proxy.tail()}") from e
        await registry.stop()
    finally:
        await bus.close()
    client = await Client.connect(settings, name="bench-hop")
    http = httpx.AsyncClient(timeout=30)
    direct_client = await ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create_from_url(
        f"http://127.0.0.1:{port}"
    )
    figures: list[Figure] = []

    async def direct(i: int) -> float:
        message = pb.Message(message_id=f"d{i}-{time.monotonic_ns()}", role=pb.ROLE_USER)
        message.parts.add().data.struct_value.update({"n": i})
        t0 = time.perf_counter()
        async for _ in direct_client.send_message(pb.SendMessageRequest(message=message)):
            pass
        return ms_since(t0)

    async def proxied(i: int) -> float:
        t0 = time.perf_counter()
        task = await client.send(AGENT, {"n": i}, timeout=30)
        elapsed = ms_since(t0)
        if task.status.state != TaskState.COMPLETED or task.output() != {"n": i}:
            raise RuntimeError(f"{AGENT} answered {task.status.state.value} with {task.output()!r}")
        return elapsed

    try:
        for i in range(ctx.scale(50, 5)):
            await direct(i)
            await proxied(i)
        d: list[float] = []
        p: list[float] = []
        for i in range(ctx.scale(500, 30)):
            if i % 2:
                d.append(await direct(i))
                p.append(await proxied(i))
            else:
                p.append(await proxied(i))
                d.append(await direct(i))
        fd = Figure.from_samples("remote_hop.direct", "direct a2a-sdk SendMessage to the remote (same run)", d)
        fp = Figure.from_samples("remote_hop.proxied", "Client.send → proxy → the same remote → back", p)
        added = Figure("remote_hop.added_p50", "added p50 of the proxy hop", fp.value - fd.value, "ms", n=len(p))
        figures += [fd, fp, added]

        pids = {"proxy": proxy.pid, "remote": server.pid, **ctx.srv.pids()}
        calls = ctx.scale(300, 20)
        before = {k: cpu_seconds(v) for k, v in pids.items()}
        client_before = time.process_time()
        for i in range(calls):
            await proxied(i)
        after = {k: cpu_seconds(v) for k, v in pids.items()}
        per_call = {
            k: (a - b) * 1000 / calls for k, b in before.items() if (a := after.get(k)) is not None and b is not None
        }
        per_call["client"] = (time.process_time() - client_before) * 1000 / calls
        hop = sum(v for k, v in per_call.items() if k != "remote")
        detail = ", ".join(f"{k.split(' ')[0]} {v:.2f}" for k, v in per_call.items())
        figures.append(
            Figure(
                "remote_hop.cpu_per_call",
                "CPU per proxied call, mesh side (proxy, client, NATS, Valkey)",
                hop,
                "ms",
                n=calls,
                note=detail,
                extra={"per_process_ms": per_call},
            )
        )
        before_remote = cpu_seconds(server.pid)
        direct_before = time.process_time()
        for i in range(calls):
            await direct(i)
        after_remote = cpu_seconds(server.pid)
        if before_remote is not None and after_remote is not None:
            figures.append(
                Figure(
                    "remote_hop.direct_cpu_per_call",
                    "CPU per direct call (caller + remote)",
                    (after_remote - before_remote + time.process_time() - direct_before) * 1000 / calls,
                    "ms",
                    n=calls,
                )
            )
    finally:
        await direct_client.close()
        await http.aclose()
        await client.close()
        await drop_namespace(ctx, ns)
    return figures


SECTION = Section(
    "remote_hop", "remote_hop: a remote A2A agent through the proxy vs a direct HTTP call", run, latency=True
)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "remote_hop", __doc__ or ""))
