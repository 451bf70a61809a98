"""In-run A/B of the gateway: the gateway as it was against the gateway as it is, on one echo agent, call by call.

    git worktree add /tmp/gw-before <commit>
    python bench/gateway_ab.py --before /tmp/gw-before/shared --before-h11    # --rounds N (default 300)

Two gateway processes serve the same namespace and echo agent: "before" imports ``a2amesh`` from ``--before``
(a folder holding the package), "after" from this tree. ``--before-h11`` hides ``httptools`` from the before
side (a folder on its ``PYTHONPATH`` whose ``httptools`` fails to import), as it was installed before
httptools became a dependency: its uvicorn then parses HTTP with h11. Latency: rounds of one HTTP JSON-RPC
``SendMessage`` through each gateway and one over NATS with ``Client``, the gateways' order swapped every
round. Throughput: floods of 64 concurrent HTTP clients, before and after alternately, with each gateway's CPU
per call. The machine drifts (2× within minutes on the shared 2-core one); alternating is what makes the
pairs comparable.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/gateway_ab.py` from anywhere

from a2amesh.client import Client
from bench.common import BenchContext, Child, Figure, Section, cpu_seconds, drop_namespace, main
from bench.gateway import ECHO, IN_FLIGHT, RawHttp, _free_port, _wait_http, http_call
from bench.roundtrip import flood, mesh_call

SIDES = ("before", "after")


def _before_path(ctx: BenchContext, before: Path, h11: bool) -> str:
    """The before side's ``PYTHONPATH``: the old package, and with ``h11`` a folder hiding httptools."""
    path = [str(before)]
    if h11:
        shim = ctx.tmp / "no-httptools" / "httptools"
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "__init__.py").write_text('raise ImportError("hidden: this side runs on h11")\n')
        path.append(str(shim.parent))
    return ":".join(path)


async def _latency(ctx: BenchContext, http: dict[str, RawHttp], client: Client, rounds: int) -> list[Figure]:
    """Sequential calls: before and after (order swapped every round), then NATS; p50/p99 of each."""
    for i in range(ctx.scale(50, 10)):  # warm-up
        for side in SIDES:
            await http_call(http[side], i)
        await mesh_call(client, i)
    lat: dict[str, list[float]] = {side: [] for side in (*SIDES, "nats")}
    order = list(SIDES)
    for i in range(ctx.scale(rounds, 30)):
        order.reverse()
        for side in order:
            lat[side].append(await http_call(http[side], i))
        lat["nats"].append(await mesh_call(client, i))
    nats = Figure.from_samples("gateway_ab.send.nats", "same call over NATS with Client", lat["nats"])
    figures = []
    for side in SIDES:
        fig = Figure.from_samples(f"gateway_ab.send.{side}", f"HTTP SendMessage via the {side} gateway", lat[side])
        fig.note = f"+{fig.value - nats.value:.2f} ms p50 over NATS"
        fig.extra = {"added_p50_ms": fig.value - nats.value}
        figures.append(fig)
    return [*figures, nats]


async def _throughput(ctx: BenchContext, gateways: dict[str, Child], http: dict[str, RawHttp]) -> list[Figure]:
    """Floods of 64 clients, before and after alternately; the median rate and gateway CPU per call of each."""
    seconds = 1.0 if ctx.quick else 3.0
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    for side in SIDES:  # warm-up
        await flood(lambda i, s=side: http_call(http[s], i), IN_FLIGHT, seconds / 3)
    for r in range(ctx.scale(4, 2)):
        for side in SIDES if r % 2 == 0 else SIDES[::-1]:
            c0 = cpu_seconds(gateways[side].pid)
            rate, done = await flood(lambda i, s=side: http_call(http[s], i), IN_FLIGHT, seconds)
            c1 = cpu_seconds(gateways[side].pid)
            rates[side].append(rate)
            if c0 is not None and c1 is not None and done:
                cpu[side].append((c1 - c0) * 1000 / len(done))
    figures = []
    for side in SIDES:
        note = f"rounds: {', '.join(f'{x:.0f}' for x in rates[side])}"
        if cpu[side]:
            note += f"; gateway CPU {statistics.median(cpu[side]):.2f} ms/call"
        figures.append(
            Figure(
                f"gateway_ab.throughput.{side}",
                f"{side} gateway, {IN_FLIGHT} HTTP clients (median of rounds)",
                statistics.median(rates[side]),
                "calls/s",
                n=len(rates[side]),
                note=note,
                extra={"cpu_ms_per_call": statistics.median(cpu[side]) if cpu[side] else None},
            )
        )
    return figures


def section(before: Path, rounds: int, *, before_h11: bool) -> Section:
    """The gateway A/B section for the package folder ``before``."""

    async def run(ctx: BenchContext) -> list[Figure]:
        ns = ctx.new_namespace("gwab")
        agent, _ = await ctx.spawn_agent(ECHO, ns)
        gateways: dict[str, Child] = {}
        http: dict[str, RawHttp] = {}
        client = await Client.connect(ctx.settings(ns), name="bench-gateway-ab")
        try:
            for side in SIDES:
                port = _free_port()
                env = ctx.child_env(ns, A2AMESH_LOG_LEVEL="WARNING")
                if side == "before":
                    env["PYTHONPATH"] = _before_path(ctx, before, before_h11)
                gateways[side] = await ctx.spawn(
                    f"gateway-{side}-{ns}", [sys.executable, "-m", "a2amesh", "gateway", "--port", str(port)], env
                )
                await _wait_http(gateways[side], f"http://127.0.0.1:{port}/readyz")
                http[side] = RawHttp(f"http://127.0.0.1:{port}/agents/echo/")
            return [*await _latency(ctx, http, client, rounds), *await _throughput(ctx, gateways, http)]
        finally:
            for conn in http.values():
                await conn.aclose()
            await client.close()
            for gateway in gateways.values():
                await gateway.stop()
            await agent.stop()
            await drop_namespace(ctx, ns)

    return Section("gateway_ab", f"gateway A/B: {before} (before) against this tree (after)", run, latency=True)


if __name__ == "__main__":
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--before", type=Path, required=True, help="folder holding the `a2amesh` package to compare")
    pre.add_argument("--rounds", type=int, default=300, help="latency rounds (default 300)")
    pre.add_argument("--before-h11", action="store_true", help="hide httptools from the before side (h11 parser)")
    known, rest = pre.parse_known_args()
    package = known.before.resolve()
    if not (package / "a2amesh" / "__init__.py").is_file():
        raise SystemExit(f"--before: {package} holds no a2amesh package (give a checkout's shared/ folder)")
    section_ = section(package, known.rounds, before_h11=known.before_h11)
    raise SystemExit(main([section_], "gateway_ab", __doc__ or "", rest))
