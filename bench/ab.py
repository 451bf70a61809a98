"""In-run A/B: the library as it was against the library as it is, on the same servers, call by call.

    git worktree add /tmp/before <commit>
    python bench/ab.py --before /tmp/before/shared          # 300 rounds; --rounds N for more or fewer

Each side gets its own namespace, its own echo agent process and its own executor process; the
"before" side's processes import ``a2amesh`` from ``--before`` (a folder holding the package), the
"after" side's from this tree. The bench then alternates between the sides, swapping which goes first
every round: one plain call (``Client.send("echo")``), one run of a 1-node and one of a 10-node chain
and, every fifth round, one run of a 50-node chain. Alternating keeps both meshes' caches colder than a
single mesh's, so the absolute figures are higher than ``workflows.py``'s; the pairs are what count. The
client is this tree's on both sides.

``--load SECONDS`` adds a load phase after the rounds (``--rounds 0``: the load phase alone): the two
sides take turns, ``--load-pairs`` times each, at keeping 100 executions of the 10-node chain in flight
for SECONDS (the throughput section's closed loop), with each side's executor and agent CPU measured
over its own turn; ``--replicas K`` starts K echo agent processes per side. The figures: node
executions/s and executor and agent CPU per node (the agents' summed), the median of the turns; and the servers'
CPU per node (nats-server and Valkey, shared by the sides but metered turn by turn) and the whole mesh's.

``--trace-after`` turns OpenTelemetry tracing on in the "after" side's processes, every trace sampled,
exporting over OTLP/HTTP to a sink in the bench (``bench/otlp_sink.py``): with ``--before`` this tree's own
``shared/``, the pairs measure what tracing costs (docs/observability.md). The endpoint variable asks for
metrics too, so that side sets ``OTEL_METRICS_EXPORTER=none``: ``--metrics-after`` measures metrics (recorded,
exported over OTLP to the sink) alone, and both flags together measure both. ``--trace-before`` (with
``--trace-after``) traces the "before" side alike: with ``--before`` another tree, the pairs compare what each
tree's tracing costs. ``--trace-only agent`` (or ``executor``) gives that environment to that role's processes
alone: what one role's spans cost it, and what they cost the other through the rate of the closed loop.

``--llm ROUNDS`` adds an LLM phase: each side also runs the LLM benchmark agent (``bench/llm_node.py``'s
``llmnode``, its own process) on one shared fake model, and the sides alternate runs of a 10-LLM-node
chain; per node: the run time and the CPU of that side's LLM agent and executor over the run.
``--llm-sizes 1,10`` runs chains of each size in turn (a 1-node chain ten times as often as a 10-node one).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/ab.py` from anywhere

from a2amesh.client import Client
from a2amesh.errors import TransportError
from bench.common import BenchContext, Child, Figure, Section, main, ms_since
from bench.llm_node import fake_base_url, llm_env, run_llm_chain, write_llm_agent
from bench.throughput import closed_loop
from bench.wfkit import (
    ECHO,
    CpuMeter,
    chain_workflow,
    prepare_namespace,
    start_agents,
    start_executor,
    write_workflows,
)
from bench.workflows import run_chain

SIDES = ("before", "after")
AFTER_ENV: dict[str, str] = {}
"""Extra environment of the "after" side's processes (``--trace-after``)."""
BEFORE_ENV: dict[str, str] = {}
"""Extra environment of the "before" side's processes (``--trace-before``: the after side's tracing)."""
TRACE_ONLY = ""
"""``--trace-only``: the one role (``agent`` or ``executor``) that gets the sides' extra environment."""
MEASURES = {
    "call": "plain call",
    "chain1": "1-node workflow",
    "chain10": "10-node chain, per node",
    "chain50": "50-node chain, per node",
}


LOAD = {
    "rate": ("node executions/s under load", "nodes/s"),
    "executor_cpu": ("executor CPU per node under load", "ms"),
    "agent_cpu": ("agent CPU per node under load (all replicas)", "ms"),
    "servers_cpu": ("nats-server and Valkey CPU per node under load (shared by the sides, metered per turn)", "ms"),
    "mesh_cpu": ("CPU per node under load, every process of the mesh (executor, agents, servers)", "ms"),
}
IN_FLIGHT = 100
CALL_TIMEOUT = 30.0
LLM_NODES = 10


async def load_phase(
    ctx: BenchContext, clients: dict[str, Client], procs: dict[str, dict[str, list[Child]]], seconds: float, pairs: int
) -> list[Figure]:
    """The sides take turns at the closed loop; rate and CPU per node of each turn (see the module docstring)."""
    samples: dict[str, dict[str, list[float]]] = {s: {m: [] for m in LOAD} for s in SIDES}
    for side in SIDES:  # warm-up under load
        await closed_loop(clients[side], "chain10", IN_FLIGHT, min(seconds, 2.0))
    order = list(SIDES)
    for _ in range(pairs):
        order.reverse()
        for side in order:
            pids = {f"{role}{i}": c.pid for role, children in procs[side].items() for i, c in enumerate(children)}
            meter = CpuMeter({**pids, **ctx.srv.pids()})
            meter.start()
            done, elapsed, _ = await closed_loop(clients[side], "chain10", IN_FLIGHT, seconds)
            cpu = meter.stop()
            nodes = done * 10
            samples[side]["rate"].append(nodes / elapsed)
            samples[side]["executor_cpu"].append(
                sum(v for k, v in cpu.items() if k.startswith("executor")) * 1000 / nodes
            )
            samples[side]["agent_cpu"].append(sum(v for k, v in cpu.items() if k.startswith("agent")) * 1000 / nodes)
            servers = sum(v for k, v in cpu.items() if k in ("nats-server", "valkey-server")) * 1000 / nodes
            samples[side]["servers_cpu"].append(servers)
            own = samples[side]["executor_cpu"][-1] + samples[side]["agent_cpu"][-1]
            samples[side]["mesh_cpu"].append(own + servers)
    figures = []
    for measure, (label, unit) in LOAD.items():
        for side in SIDES:
            values = samples[side][measure]
            note = "turns: " + ", ".join(f"{v:.3g}" for v in values)
            figures.append(Figure.from_samples(f"ab.load.{measure}.{side}", f"{label}: {side}", values, unit, note))
    return figures


async def llm_phase(
    ctx: BenchContext,
    clients: dict[str, Client],
    procs: dict[str, dict[str, list[Child]]],
    rounds: int,
    sizes: tuple[int, ...] = (LLM_NODES,),
) -> list[Figure]:
    """The sides alternate runs of each LLM chain; per node: run time (median), LLM agent and executor CPU
    (each side's total over its runs ÷ its nodes: /proc counts CPU in 10 ms ticks, too coarse for one run)."""
    figures: list[Figure] = []
    for size in sizes:
        latency: dict[str, list[float]] = {s: [] for s in SIDES}
        cpu: dict[str, dict[str, float]] = {s: {"agent": 0.0, "executor": 0.0} for s in SIDES}
        for i in range(ctx.scale(5, 1)):  # warm-up
            for side in SIDES:
                await run_llm_chain(clients[side], size, i)
        order = list(SIDES)
        n = ctx.scale(rounds * max(LLM_NODES // size, 1), 2)
        for i in range(n):
            order.reverse()
            for side in order:
                meter = CpuMeter({"agent": procs[side]["llm"][0].pid, "executor": procs[side]["executor"][0].pid})
                meter.start()
                latency[side].append(await run_llm_chain(clients[side], size, i) / size)
                for name, seconds in meter.stop().items():
                    if name in cpu[side]:
                        cpu[side][name] += seconds
        tag = "" if size == LLM_NODES else f".n{size}"
        figures += [
            Figure.from_samples(f"ab.llm{tag}.{side}", f"{size}-LLM-node chain, per node: {side}", latency[side])
            for side in SIDES
        ]
        for name in ("agent", "executor"):
            for side in SIDES:
                value = cpu[side][name] * 1000 / (n * size)
                label = f"{'LLM agent' if name == 'agent' else 'executor'} CPU per LLM node ({size}-node chain): {side}"
                figures.append(Figure(f"ab.llm_{name}_cpu{tag}.{side}", label, value, "ms", n=n * size, note="mean"))
    return figures


async def start_side(
    ctx: BenchContext,
    side: str,
    before: Path,
    replicas: int,
    llm_url: str | None,
    llm_sizes: tuple[int, ...] = (LLM_NODES,),
) -> tuple[Client, dict[str, list[Child]]]:
    """One side's namespace, echo agents, executor (and LLM agent with ``llm_url``); its client once all serve."""
    ns = ctx.new_namespace(side)
    env = {"PYTHONPATH": str(before), **BEFORE_ENV} if side == "before" else dict(AFTER_ENV)
    workflows = [chain_workflow(f"chain{n}", n) for n in (1, 10, 50)]
    names = ["echo", "chain1", "chain10", "chain50"]
    if llm_url is not None:
        for size in llm_sizes:
            workflows.append(chain_workflow(f"llm{size}", size, agent="llmnode"))
            names.append(f"llm{size}")
    folder = write_workflows(ctx.tmp / f"wf-{ns}", workflows)
    await prepare_namespace(ctx, ns)
    untraced = {"PYTHONPATH": str(before)} if side == "before" else {}
    agents = await start_agents(ctx, ECHO, ns, replicas, env=untraced if TRACE_ONLY == "executor" else env)
    executor, _ = await start_executor(ctx, folder, ns, env=untraced if TRACE_ONLY == "agent" else env)
    procs = {"executor": [executor], "agent": agents}
    if llm_url is not None:
        llm_yaml = write_llm_agent(ctx.tmp / f"agents-{ns}")
        procs["llm"] = await start_agents(ctx, llm_yaml, ns, env={**env, **llm_env(llm_url)})
    client = await Client.connect(ctx.settings(ns), name=f"bench-ab-{side}")
    for name in names:
        await client.registry.wait_for(name, 30)
    return client, procs


async def plain_call(client: Client, side: str, i: int) -> None:
    """One call of the echo agent, bounded: a "before" tree that does not speak this tree's wire (an older
    reply subject, say) would otherwise leave the bench waiting for ever."""
    try:
        await client.send("echo", {"i": i}, timeout=CALL_TIMEOUT)
    except TransportError as e:
        raise RuntimeError(
            f"the {side} side's echo agent did not answer within {CALL_TIMEOUT:.0f} s: is that tree's wire "
            "the same as this one's? (its agent log is in the bench's temporary folder)"
        ) from e


async def latency_rounds(ctx: BenchContext, clients: dict[str, Client], rounds: int) -> list[Figure]:
    """The latency rounds (see the module docstring)."""
    samples: dict[str, dict[str, list[float]]] = {s: {m: [] for m in MEASURES} for s in SIDES}
    for i in range(ctx.scale(30, 1)):  # warm-up
        for side in SIDES:
            await plain_call(clients[side], side, i)
            await run_chain(clients[side], "chain10", i)
    order = list(SIDES)
    for i in range(ctx.scale(rounds, 3)):
        order.reverse()
        for side in order:
            t0 = time.perf_counter()
            await plain_call(clients[side], side, i)
            samples[side]["call"].append(ms_since(t0))
        for side in order:
            samples[side]["chain1"].append(await run_chain(clients[side], "chain1", i))
        for side in order:
            samples[side]["chain10"].append(await run_chain(clients[side], "chain10", i) / 10)
        if i % 5 == 0:
            for side in order:
                samples[side]["chain50"].append(await run_chain(clients[side], "chain50", i) / 50)
    return [
        Figure.from_samples(f"ab.{measure}.{side}", f"{label}: {side}", samples[side][measure])
        for measure, label in MEASURES.items()
        for side in SIDES
        if samples[side][measure]
    ]


def section(
    before: Path,
    rounds: int,
    load: float = 0.0,
    pairs: int = 3,
    replicas: int = 1,
    llm: int = 0,
    llm_sizes: tuple[int, ...] = (LLM_NODES,),
) -> Section:
    """The A/B section for the package folder ``before``."""

    async def run(ctx: BenchContext) -> list[Figure]:
        clients: dict[str, Client] = {}
        procs: dict[str, dict[str, list[Child]]] = {}
        figures: list[Figure] = []
        llm_url = (await fake_base_url(ctx))[1] if llm > 0 else None
        try:
            for side in SIDES:
                clients[side], procs[side] = await start_side(ctx, side, before, replicas, llm_url, llm_sizes)
            figures += await latency_rounds(ctx, clients, rounds)
            if llm > 0:
                figures += await llm_phase(ctx, clients, procs, llm, llm_sizes)
            if load > 0:
                figures += await load_phase(ctx, clients, procs, 1.0 if ctx.quick else load, pairs)
        finally:
            for client in clients.values():
                await client.close()
        return figures

    ratio = AFTER_ENV.get("OTEL_TRACES_SAMPLER_ARG")
    traced = ""
    if AFTER_ENV.get("OTEL_TRACES_EXPORTER") != "none" and AFTER_ENV:
        traced = f" traced (OTLP, {'every call' if ratio is None else f'{float(ratio):.0%} of calls'})"
        traced += ", both sides" if BEFORE_ENV else ""
        traced += f", the {TRACE_ONLY} only" if TRACE_ONLY else ""
    if AFTER_ENV.get("OTEL_METRICS_EXPORTER") != "none" and AFTER_ENV:
        traced += " with metrics (OTLP)"
    return Section("ab", f"A/B: {before} (before) against this tree{traced} (after)", run, latency=True)


if __name__ == "__main__":
    from bench import floors

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--before", type=Path, required=True, help="folder holding the `a2amesh` package to compare")
    pre.add_argument("--rounds", type=int, default=300, help="rounds of the comparison (default 300)")
    pre.add_argument("--load", type=float, default=0.0, help="seconds of each closed-loop turn (default 0: none)")
    pre.add_argument("--load-pairs", type=int, default=3, help="turns of each side in the load phase (default 3)")
    pre.add_argument("--replicas", type=int, default=1, help="echo agent processes per side (default 1)")
    pre.add_argument("--llm", type=int, default=0, help="rounds of the LLM phase (default 0: none)")
    pre.add_argument(
        "--llm-sizes",
        default=str(LLM_NODES),
        help=f"LLM chain sizes of the LLM phase, comma-separated (default {LLM_NODES}); a chain of N nodes runs "
        f"{LLM_NODES}/N times as often, so each size runs about as many nodes",
    )
    pre.add_argument("--trace-after", action="store_true", help="the after side traces every call (OTLP to a sink)")
    pre.add_argument(
        "--trace-before", action="store_true", help="with --trace-after: the before side traces as the after side"
    )
    pre.add_argument("--trace-ratio", type=float, default=1.0, help="with --trace-after: the share of new traces kept")
    pre.add_argument(
        "--trace-only",
        choices=("agent", "executor"),
        default="",
        help="with --trace-after: only that role's processes traced (what one role's spans cost the other)",
    )
    pre.add_argument(
        "--metrics-after", action="store_true", help="the after side records metrics and exports them (OTLP to a sink)"
    )
    known, rest = pre.parse_known_args()
    if known.trace_after or known.metrics_after:
        from bench.otlp_sink import OtlpSink

        sink = OtlpSink()
        AFTER_ENV.update(sink.env(traces=known.trace_after, metrics=known.metrics_after, ratio=known.trace_ratio))
    TRACE_ONLY = known.trace_only
    if known.trace_before:
        if not known.trace_after:
            raise SystemExit("--trace-before goes with --trace-after (both sides traced alike)")
        BEFORE_ENV.update(AFTER_ENV)
    package = known.before.resolve()
    if not (package / "a2amesh" / "__init__.py").is_file():
        raise SystemExit(f"--before: {package} holds no a2amesh package (give a checkout's shared/ folder)")
    sizes = tuple(int(v) for v in known.llm_sizes.split(",") if v.strip())
    ab = section(package, known.rounds, known.load, known.load_pairs, known.replicas, known.llm, sizes)
    raise SystemExit(main([floors.SECTION, ab], "ab", __doc__ or "", rest))
