"""LLM nodes: sequential workflows of 1, 3 and 10 LLM-agent nodes on a local fake OpenAI-compatible model, and
the same workflows of ``llm`` nodes (the built-in agent ``builtin-llm`` of ``a2amesh builtins``), in one run.

The model is ``bench/fake_openai.py`` (``tests/fakes/openai_server.py`` in its own process, answering
each node call in two model turns: a ``save_artifact`` tool call, then the ``«result:artifact=…»``
embed — the same two turns SAM's fake model gives its nodes in ``shared/bench/sam/``). One LLM agent
process (the real ``openai`` client, ``OPENAI_BASE_URL`` pointed at the fake), one executor process,
production settings. Per node = run time / N, model time included; the model's own time per call is
measured alone (a raw HTTP chat completion to the same fake) so the overhead can be read off.
The per-node figure is read the way SAM's harness reads its own (``shared/bench/sam/summarize.py``):
a least-squares line T(N) = a + b·N through the median run times at N = 1, 3, 10; b is what a node
costs, a what one execution costs on top (its start and answer), for a2amesh and SAM alike.
Set beside SAM's per-node figure under the same kind of fake model: with ``SAM_PYTHON`` naming a Python
that has ``solace-agent-mesh`` installed, SAM itself is measured in the same run by its harness
(``shared/bench/sam/bench_sam.py`` on its own fake model, ``fake_llm.py``), in ``SAM_ROUNDS`` rounds
bracketed by ours (ours, SAM, ours, SAM, …, ours; our mesh idles while SAM runs), since this machine
drifts by up to 2× over minutes: each round's ratio is SAM's b over the mean of the two b of ours around
it, and the figure is the median of those ratios. Without it, the fixed ``SAM_MS_PER_NODE`` (about 100 ms
on this machine per the issue and ``shared/bench/sam/README.md``: 70–100 ms).

The ``llm`` node chains run right after, against the same fake (a request without tools is answered in one
turn) with one ``a2amesh builtins`` process, so the orchestration overhead of an ``llm`` node (per node minus
its one model call) reads beside that of today's LLM-agent node (per node minus its two model calls).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/llm_node.py` from anywhere

import httpx
import yaml

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from a2amesh.servers import free_port
from bench.common import REPO, BenchContext, Child, Figure, Section, drop_namespace, main, ms_since, percentile, ratio
from bench.wfkit import (
    CpuMeter,
    chain_workflow,
    cpu_note,
    prepare_namespace,
    start_agents,
    start_executor,
    write_workflows,
)

SAM_MS_PER_NODE = 100.0
SAM_ROUNDS = 3
SIZES = (1, 3, 10)
SAM_HARNESS = REPO.parent / "shared" / "bench" / "sam"


def llm_chain(name: str, n: int) -> dict[str, Any]:
    """A sequential workflow of ``n`` ``llm`` nodes, each sending the previous node's text to the model."""
    nodes: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        text = "{{workflow.input.question}}" if i == 1 else f"{{{{n{i - 1}.output.text}}}}"
        node: dict[str, Any] = {"id": f"n{i}", "type": "llm", "messages": text}
        if i > 1:
            node["depends_on"] = [f"n{i - 1}"]
        nodes.append(node)
    return {
        "name": name,
        "description": f"{n} llm nodes in a line (benchmark)",
        "version": "1.0.0",
        "nodes": nodes,
        "output_mapping": {"out": f"{{{{n{n}.output.text}}}}"},
    }


async def interleaved(
    agent_run: Callable[[int, int], Awaitable[float]],
    node_run: Callable[[int, int], Awaitable[float]],
    base_url: str,
    rounds: int,
    n: int = 10,
) -> Figure:
    """Both kinds of node side by side: rounds of one N-node LLM-agent run, one N-node ``llm`` run and one raw
    model call, so the load of the machine weighs on all three alike; each run's per-node time minus its model
    calls (2 for the LLM agent, 1 for the llm node) at the round's model time is its orchestration overhead."""
    agent_over: list[float] = []
    node_over: list[float] = []
    model_ms: list[float] = []
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(base_url=base_url) as http:
        for i in range(rounds):
            a = await agent_run(n, 1000 + i) / n
            b = await node_run(n, 1000 + i) / n
            t0 = time.perf_counter()
            resp = await http.post("/chat/completions", json=body, headers={"Authorization": "Bearer x"})
            resp.raise_for_status()
            m = ms_since(t0)
            model_ms.append(m)
            agent_over.append(a - 2 * m)
            node_over.append(b - m)
    f = Figure.from_samples(
        "llm.node.overhead",
        f"llm node beside LLM-agent node, interleaved at N = {n}: overhead per node (minus its model call)",
        node_over,
    )
    agent = percentile(agent_over, 50)
    f.note = f"LLM-agent node minus its 2 model calls: {agent:.2f} ms; model call p50 {percentile(model_ms, 50):.2f} ms"
    f.extra = {"agent_overhead_ms": agent_over, "node_overhead_ms": node_over, "model_ms": model_ms}
    return f


def line_fit(points: dict[int, float]) -> tuple[float, float]:
    """Least-squares ``T(N) = a + b·N`` through ``{N: T}``; returns ``(a, b)`` (NaN with fewer than two N)."""
    if len(points) < 2:
        return math.nan, math.nan
    xs, ys = list(points), list(points.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def fit_b(runs: dict[int, list[float]]) -> float:
    """b of the line fit through the median run time of each size."""
    return line_fit({n: percentile(t, 50) for n, t in runs.items()})[1]


def sam_python(ctx: BenchContext) -> str | None:
    """The Python of SAM's harness (``SAM_PYTHON``), when SAM is to be measured in this run."""
    python = os.environ.get("SAM_PYTHON")
    if ctx.quick or not python or not (SAM_HARNESS / "bench_sam.py").is_file():
        return None  # in quick mode too: SAM takes about 15 s to boot
    return python


async def sam_same_run(
    ctx: BenchContext, sizes: tuple[int, ...], python: str, round_: int = 0
) -> dict[int, list[float]]:
    """SAM's per-node times (ms) for each workflow size, measured now by its own harness."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    port = free_port()
    fake = await ctx.spawn("sam-fake-llm", [python, str(SAM_HARNESS / "fake_llm.py"), "--port", str(port)], env)
    try:
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/stats")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if fake.proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"SAM's fake model did not start:\n{fake.tail()}")
                await asyncio.sleep(0.1)
        out = ctx.tmp / f"sam-llm-{round_}.json"
        argv = [python, str(SAM_HARNESS / "bench_sam.py"), "--llm-port", str(port), "--out", str(out)]
        argv += ["--nodes", *map(str, sizes), "--warmup", "3", "--runs", "20", "--batches", "0", "--agents", "1"]
        argv += ["--artifact-dir", str(ctx.tmp / "sam-artifacts")]
        sam = await ctx.spawn("sam-bench", argv, env)
        try:
            code = await asyncio.wait_for(sam.proc.wait(), 600)
        except TimeoutError:
            raise RuntimeError(f"SAM's harness did not finish within 600 s:\n{sam.tail()}") from None
        if code != 0 or not out.is_file():
            raise RuntimeError(f"SAM's harness exited {code}:\n{sam.tail()}")
        per_n = json.loads(out.read_text())["per_n"]
        return {n: [s * 1000 / n for s in per_n[str(n)]["seq_runs_s"]] for n in sizes}
    finally:
        await fake.stop()


def write_llm_agent(folder: Path) -> Path:
    """The benchmark's LLM agent ``llmnode`` (model ``fake-model``) as a YAML file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llmnode.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "llmnode",
                "description": "an LLM agent answering from the benchmark's fake model",
                "version": "1.0.0",
                "llm": {"model": "fake-model"},
                "max_concurrency": 16,
            }
        )
    )
    return path


def llm_env(base_url: str) -> dict[str, str]:
    """The environment of an ``llmnode`` process pointed at the fake model."""
    return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "x"}


async def run_llm_chain(client: Client, n: int, i: int) -> float:
    """One execution of ``llm{n}``; milliseconds. Raises unless every node answered in its two turns."""
    t0 = time.perf_counter()
    task = await client.send(f"llm{n}", {"question": i}, timeout=60)
    elapsed = ms_since(t0)
    if task.status.state != TaskState.COMPLETED or task.output() != {"out": {"ok": True, "turns": 2}}:
        text = task.status.message.text() if task.status.message else ""
        raise RuntimeError(f"llm{n} ended {task.status.state.value}: {text} {task.output()!r}")
    return elapsed


async def fake_base_url(ctx: BenchContext) -> tuple[Child, str]:
    child = await ctx.spawn("fake-openai", [sys.executable, str(REPO / "bench" / "fake_openai.py")], ctx.child_env("x"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for line in child.log_path.read_text(errors="replace").splitlines():
            if line.startswith("BASE_URL "):
                return child, line.split(" ", 1)[1].strip()
        if child.proc.returncode is not None:
            break
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the fake OpenAI server did not start:\n{child.tail()}")


async def run(ctx: BenchContext) -> list[Figure]:
    ns = ctx.new_namespace("llm")
    fake, base_url = await fake_base_url(ctx)
    agent_yaml = write_llm_agent(ctx.tmp / f"agents-{ns}")
    chains = [chain_workflow(f"llm{n}", n, agent="llmnode") for n in SIZES]
    folder = write_workflows(ctx.tmp / f"wf-{ns}", [*chains, *(llm_chain(f"node{n}", n) for n in SIZES)])
    await prepare_namespace(ctx, ns)
    (agent,) = await start_agents(ctx, agent_yaml, ns, env=llm_env(base_url))
    model_env = {**llm_env(base_url), "A2AMESH_LLM_MODEL": "fake-model"}
    builtins = await ctx.spawn(
        f"builtins-{ns}", [sys.executable, "-m", "a2amesh", "builtins"], ctx.child_env(ns, **model_env)
    )
    executor, _ = await start_executor(ctx, folder, ns)
    client = await Client.connect(ctx.settings(ns), name="bench-llm")
    figures: list[Figure] = []
    node_runs: dict[int, list[float]] = {}
    sam_runs: dict[int, list[float]] = {}
    sam_rounds: dict[int, dict[int, list[float]]] = {}
    ours_b: list[float] = []
    try:
        for n in SIZES:
            await client.registry.wait_for(f"llm{n}", 30)
            await client.registry.wait_for(f"node{n}", 30)
        await client.registry.wait_for("builtin-llm", 60)

        async def once(n: int, i: int) -> float:
            return await run_llm_chain(client, n, i)

        async def node_once(n: int, i: int) -> float:
            t0 = time.perf_counter()
            task = await client.send(f"node{n}", {"question": f"q{i}"}, timeout=60)
            elapsed = ms_since(t0)
            if task.status.state != TaskState.COMPLETED or task.output() != {"out": "ok"}:
                text = task.status.message.text() if task.status.message else ""
                raise RuntimeError(f"node{n} ended {task.status.state.value}: {text} {task.output()!r}")
            return elapsed

        for n in SIZES:
            for i in range(ctx.scale(5, 1)):
                await once(n, i)
                await node_once(n, i)
        # the model alone: one raw chat completion (turn 1) to the same fake
        model_ms: list[float] = []
        async with httpx.AsyncClient(base_url=base_url) as http:
            body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
            for _ in range(ctx.scale(200, 10)):
                t0 = time.perf_counter()
                resp = await http.post("/chat/completions", json=body, headers={"Authorization": "Bearer x"})
                resp.raise_for_status()
                model_ms.append(ms_since(t0))
        model = percentile(model_ms, 50)
        figures.append(
            Figure.from_samples("llm.model_call", "fake model alone: one chat completion over HTTP", model_ms)
        )
        pids = {"executor": executor.pid, "agent": agent.pid, "builtins": builtins.pid, "fake model": fake.pid}
        pids.update(ctx.srv.pids())

        async def metered(n: int, call: Callable[[int, int], Awaitable[float]]) -> tuple[list[float], dict[str, float]]:
            """Runs of a workflow of ``n`` nodes one after the other, and the CPU the mesh's processes spent."""
            meter = CpuMeter(pids)
            meter.start()
            totals = [await call(n, i) for i in range(ctx.scale({1: 60, 3: 30}.get(n, 20), 2))]
            return totals, meter.stop()

        runs: dict[int, list[float]] = {}
        for n in SIZES:
            totals, cpu = await metered(n, once)
            runs[n] = totals
            reps = len(totals)
            per_node = [t / n for t in totals]
            f = Figure.from_samples(
                f"llm.chain.n{n}", f"workflow of {n} LLM nodes (2 model turns each): per node", per_node
            )
            overhead = f.value - 2 * model
            f.note = (
                f"{ratio(SAM_MS_PER_NODE, f.value)} faster than SAM's ~{SAM_MS_PER_NODE:.0f} ms/node; "
                f"minus 2 model calls: {overhead:.2f} ms; " + cpu_note(cpu, n * reps)
            )
            f.extra = {
                "run_ms": totals,
                "sam_ms_per_node": SAM_MS_PER_NODE,
                "speedup_vs_sam": SAM_MS_PER_NODE / f.value,
                "overhead_ms_per_node": overhead,
                "cpu_ms_per_node": {k: v * 1000 / (n * reps) for k, v in cpu.items()},
            }
            figures.append(f)
        for n in SIZES:
            totals, cpu = await metered(n, node_once)
            node_runs[n] = totals
            reps = len(totals)
            f = Figure.from_samples(
                f"llm.node.n{n}", f"workflow of {n} llm nodes (builtin-llm, 1 model turn each): per node",
                [t / n for t in totals],
            )  # fmt: skip
            agent_based = next(g for g in figures if g.key == f"llm.chain.n{n}")
            overhead = f.value - model
            f.note = (
                f"minus 1 model call: {overhead:.2f} ms (LLM-agent node minus 2: "
                f"{agent_based.extra['overhead_ms_per_node']:.2f} ms); " + cpu_note(cpu, n * reps)
            )
            f.extra = {
                "run_ms": totals,
                "overhead_ms_per_node": overhead,
                "agent_node_overhead_ms_per_node": agent_based.extra["overhead_ms_per_node"],
                "cpu_ms_per_node": {k: v * 1000 / (n * reps) for k, v in cpu.items()},
            }
            figures.append(f)
        figures.append(await interleaved(once, node_once, base_url, ctx.scale(20, 2)))
        python = sam_python(ctx)
        ours_b = [fit_b(runs)]
        for r in range(SAM_ROUNDS if python else 0):
            assert python is not None
            for n, samples in (await sam_same_run(ctx, SIZES, python, r)).items():
                sam_runs.setdefault(n, []).extend(samples)
                sam_rounds.setdefault(r, {})[n] = samples
            again = {n: (await metered(n, once))[0] for n in SIZES}
            for n, totals in again.items():
                runs[n].extend(totals)
            ours_b.append(fit_b(again))
    finally:
        await client.close()
        await executor.stop()
        await agent.stop()
        await builtins.stop()
        await drop_namespace(ctx, ns)
    medians = {n: percentile(t, 50) for n, t in runs.items()}
    a, b = line_fit(medians)
    per_execution = f"a = {a:.2f} ms per execution"
    vs_fixed = f"{ratio(SAM_MS_PER_NODE, b)} faster than SAM's ~{SAM_MS_PER_NODE:.0f} ms/node"
    fit = Figure(
        "llm.fit",
        "LLM node, line fit T(N) = a + b·N over N = 1, 3, 10: b per node",
        b,
        "ms",
        n=sum(len(t) for t in runs.values()),
        note=f"{per_execution}; {vs_fixed}",
        extra={"a_ms": a, "b_ms": b, "medians_ms": medians},
    )
    figures.append(fit)
    node_a, node_b = line_fit({n: percentile(t, 50) for n, t in node_runs.items()})
    figures.append(
        Figure(
            "llm.node.fit",
            "llm node (builtin-llm), line fit T(N) = a + b·N: b per node",
            node_b,
            "ms",
            n=sum(len(t) for t in node_runs.values()),
            note=f"a = {node_a:.2f} ms per execution; minus 1 model call: {node_b - model:.2f} ms "
            f"(LLM-agent node: b minus 2 model calls = {b - 2 * model:.2f} ms)",
            extra={"a_ms": node_a, "b_ms": node_b, "overhead_ms_per_node": node_b - model},
        )
    )
    add_sam_figures(figures, fit, sam_runs, sam_rounds, ours_b, f"{per_execution}; {{}}; {vs_fixed}")
    return figures


def add_sam_figures(
    figures: list[Figure],
    fit: Figure,
    sam_runs: dict[int, list[float]],
    sam_rounds: dict[int, dict[int, list[float]]],
    ours_b: list[float],
    fit_note: str,
) -> None:
    """SAM's figures of this run, and the speedup read off the rounds (SAM's b over the mean b of ours around
    each round); ``fit_note`` gets the speedup in its ``{}``."""
    for n, samples in sam_runs.items():
        label = f"  SAM 1.28.8, same run: workflow of {n} LLM nodes, per node"
        s = Figure.from_samples(f"llm.sam.n{n}", label, samples)
        ours = next(f for f in figures if f.key == f"llm.chain.n{n}")
        ours.note = f"{ratio(s.value, ours.value)} faster than SAM in this run ({s.value:.1f} ms/node); " + ours.note
        ours.extra.update(sam_same_run_ms_per_node=s.value, speedup_vs_sam_same_run=s.value / ours.value)
        figures.append(s)
    if sam_runs:
        sam_a, sam_b = line_fit({n: percentile([v * n for v in samples], 50) for n, samples in sam_runs.items()})
        pairs = []
        for r, per_n in sorted(sam_rounds.items()):
            round_b = line_fit({n: percentile([v * n for v in samples], 50) for n, samples in per_n.items()})[1]
            pairs.append((round_b, (ours_b[r] + ours_b[r + 1]) / 2))
        ratios = [sam / ours for sam, ours in pairs]
        speedup = percentile(ratios, 50)
        rounds = ", ".join(f"{sam:.1f}/{ours:.2f} = {sam / ours:.1f}x" for sam, ours in pairs)
        vs_same_run = f"{speedup:.1f}x faster than SAM in this run (median of {len(pairs)} bracketed rounds)"
        fit.note = fit_note.format(vs_same_run)
        fit.extra.update(
            sam_a_ms=sam_a, sam_b_ms=sam_b, speedup_vs_sam_same_run=speedup, rounds=pairs, ours_b_ms=ours_b
        )
        figures.append(
            Figure(
                "llm.sam.fit",
                "  SAM 1.28.8, same run: line fit over every round, b per node",
                sam_b,
                "ms",
                n=sum(len(v) for v in sam_runs.values()),
                note=f"a = {sam_a:.1f} ms per execution; per round, SAM's b / the mean b of ours around it: {rounds}",
                extra={"a_ms": sam_a, "b_ms": sam_b, "rounds": pairs},
            )
        )


SECTION = Section(
    "llm", "llm: workflows of 1, 3 and 10 LLM-agent nodes on a local fake model (vs SAM)", run, latency=True
)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "llm_node", __doc__ or ""))
