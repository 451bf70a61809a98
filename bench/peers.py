"""Peers, per node: Celery chains and chords, and LangGraph StateGraph chains, of no-op nodes.

- **Celery** (``bench/celery_app.py``): Redis broker and result backend on the run's Valkey, one worker
  in a separate process (``--pool=threads --concurrency=2``, fitting 2 cores; gossip, mingle and
  heartbeats off: there is one worker). A chain of N no-op tasks (each passes its result to the
  next), and a chord (fan-out of N no-op tasks, then one callback). Celery's defaults otherwise,
  so tasks are acked on receipt (``acks_late=False``): less durable than a2amesh's ack-after-persist.
- **LangGraph**: one process, a compiled ``StateGraph`` of N no-op nodes in a line; without a
  checkpointer, and with the in-memory ``InMemorySaver`` (a checkpoint per step, nothing durable).

Per-node time = median over runs of (run time / N); the "marginal" row is the slope between the
smallest and largest N, i.e. the cost one more node adds. Skipped with a clear line when the
``bench`` extras are not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/peers.py` from anywhere

from bench.common import BenchContext, Child, Figure, Section, main, ms_since, percentile

SIZES = (1, 10, 50)
QUICK_SIZES = (1, 10)
INSTALL_HINT = "pip install -e '.[bench]'"


def _per_node(key: str, label: str, totals: dict[int, list[float]]) -> list[Figure]:
    """Rows: per-node time for each N, then the marginal cost of one more node."""
    rows = []
    for n, samples in totals.items():
        per_node = [t / n for t in samples]
        f = Figure.from_samples(f"{key}.n{n}", f"{label}, N={n}: per node", per_node)
        f.note = f"run {percentile(samples, 50):.2f} ms"
        f.extra = {"n_nodes": n, "run_ms": samples}
        rows.append(f)
    lo, hi = min(totals), max(totals)
    if hi > lo:
        slope = (percentile(totals[hi], 50) - percentile(totals[lo], 50)) / (hi - lo)
        rows.append(Figure(f"{key}.marginal", f"{label}: marginal per node (N={lo}→{hi})", slope, "ms"))
    return rows


def _skipped(key: str, label: str, missing: str) -> Figure:
    line = f"skipped: {missing} is not installed ({INSTALL_HINT})"
    print(f"  {label}: {line}", flush=True)
    return Figure(key, label, float("nan"), "ms", note=line)


# Celery ---------------------------------------------------------------------------------------------


def celery_chain_ms(n: int) -> float:
    """One Celery chain of ``n`` no-op tasks, run to its result (blocking); milliseconds."""
    from celery import chain

    from bench.celery_app import noop

    t0 = time.perf_counter()
    result = chain(noop.s(0), *(noop.s() for _ in range(n - 1))).apply_async()
    if result.get(timeout=60) != 0:
        raise RuntimeError("the Celery chain returned a wrong value")
    return ms_since(t0)


def _celery_chord_ms(n: int) -> float:
    from celery import chord

    from bench.celery_app import collect, noop

    t0 = time.perf_counter()
    result = chord(noop.s(i) for i in range(n))(collect.s())
    if result.get(timeout=60) != n:
        raise RuntimeError("the Celery chord's callback saw a wrong number of results")
    return ms_since(t0)


def _celery_measure(sizes: tuple[int, ...], reps: Callable[[int], int]) -> tuple[dict[int, list[float]], ...]:
    """Chains and chords against the running worker (blocking: run in a thread)."""
    chains: dict[int, list[float]] = {}
    chords: dict[int, list[float]] = {}
    for n in sizes:
        for _ in range(max(2, reps(n) // 5)):  # warm-up
            celery_chain_ms(n)
            _celery_chord_ms(n)
        chains[n], chords[n] = [], []
        for _ in range(reps(n)):
            chains[n].append(celery_chain_ms(n))
            chords[n].append(_celery_chord_ms(n))
    return chains, chords


def celery_installed() -> bool:
    """Whether the ``bench`` extras' Celery is importable."""
    return importlib.util.find_spec("celery") is not None


@contextlib.asynccontextmanager
async def celery_worker(ctx: BenchContext) -> AsyncIterator[Child]:
    """A Celery worker process on the run's Valkey, its own queue, and this process's app pointed at it."""
    from bench import celery_app

    queue = ctx.new_namespace("celery")
    url = ctx.srv.redis_url
    celery_app.configure(url, queue)
    worker = await ctx.spawn(
        f"celery-{queue}",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.celery_app:app",
            "worker",
            "--pool=threads",
            "--concurrency=2",
            "-Q",
            queue,
            "-n",
            f"{queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=WARNING",
        ],
        ctx.child_env(queue, BENCH_CELERY_URL=url, BENCH_CELERY_QUEUE=queue),
    )
    try:
        await asyncio.wait_for(asyncio.to_thread(lambda: celery_app.noop.delay(1).get(timeout=60)), 90)
        yield worker
    except Exception as e:
        raise RuntimeError(f"{e}\ncelery worker output:\n{worker.tail()}") from e
    finally:
        await worker.stop()
        celery_app.app.close()
        await _drop_celery_keys(url, queue)


async def celery_figures(ctx: BenchContext, sizes: tuple[int, ...]) -> list[Figure]:
    """Start a worker process, measure chains and chords, stop the worker."""
    if not celery_installed():
        return [_skipped("peers.celery", "Celery chain / chord", "celery")]
    reps = (lambda n: 3) if ctx.quick else (lambda n: {1: 50, 10: 20}.get(n, 10))
    async with celery_worker(ctx):
        chains, chords = await asyncio.wait_for(asyncio.to_thread(_celery_measure, sizes, reps), 600)
    return [
        *_per_node("peers.celery_chain", "Celery chain", chains),
        *_per_node("peers.celery_chord", "Celery chord (fan-out)", chords),
    ]


async def _drop_celery_keys(url: str, queue: str) -> None:
    import redis.asyncio as aioredis

    r = aioredis.from_url(url)
    try:
        await r.delete(queue, f"_kombu.binding.{queue}")
    finally:
        await r.aclose()


# LangGraph ------------------------------------------------------------------------------------------


class _State(TypedDict):
    n: int


def _step(state: _State) -> dict[str, int]:
    return {"n": state["n"] + 1}


def _langgraph_measure(sizes: tuple[int, ...], reps: Callable[[int], int], checkpoint: bool) -> dict[int, list[float]]:
    """Invoke a compiled chain graph per size (blocking: run in a thread)."""
    from langgraph.graph import END, START, StateGraph

    saver: Any = None
    if checkpoint:
        from langgraph.checkpoint.memory import InMemorySaver

        saver = InMemorySaver()
    totals: dict[int, list[float]] = {}
    run_id = 0
    for n in sizes:
        g = StateGraph(_State)
        prev = START
        for i in range(n):
            g.add_node(f"n{i}", _step)
            g.add_edge(prev, f"n{i}")
            prev = f"n{i}"
        g.add_edge(prev, END)
        graph = g.compile(checkpointer=saver)

        def once(graph: Any = graph, n: int = n) -> float:
            nonlocal run_id
            run_id += 1
            config: dict[str, Any] = {"recursion_limit": n + 10, "configurable": {"thread_id": f"t{run_id}"}}
            t0 = time.perf_counter()
            out = graph.invoke({"n": 0}, config)
            elapsed = ms_since(t0)
            if out["n"] != n:
                raise RuntimeError(f"the LangGraph chain of {n} returned {out!r}")
            return elapsed

        for _ in range(max(3, reps(n) // 5)):
            once()
        totals[n] = [once() for _ in range(reps(n))]
    return totals


async def langgraph_figures(ctx: BenchContext, sizes: tuple[int, ...]) -> list[Figure]:
    """LangGraph chains in this process, without and with an in-memory checkpointer."""
    if importlib.util.find_spec("langgraph") is None:
        return [_skipped("peers.langgraph", "LangGraph StateGraph chain", "langgraph")]
    reps = (lambda n: 10) if ctx.quick else (lambda n: {1: 300, 10: 200}.get(n, 100))
    plain = await asyncio.to_thread(_langgraph_measure, sizes, reps, False)
    saved = await asyncio.to_thread(_langgraph_measure, sizes, reps, True)
    return [
        *_per_node("peers.langgraph", "LangGraph chain (in process)", plain),
        *_per_node("peers.langgraph_ckpt", "LangGraph chain + InMemorySaver", saved),
    ]


async def run(ctx: BenchContext) -> list[Figure]:
    """Celery, then LangGraph."""
    sizes = QUICK_SIZES if ctx.quick else SIZES
    return [*(await celery_figures(ctx, sizes)), *(await langgraph_figures(ctx, sizes))]


SECTION = Section("peers", "peers: Celery chain/chord and LangGraph chain, per node", run, latency=True)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "peers", __doc__ or ""))
