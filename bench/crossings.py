"""One HTTP call to a one-node workflow, walked: the a2amesh units each process enters, and the crossings.

    python bench/crossings.py [--calls 5] [--warmup 1] [--functions]

Starts the servers, the echo agent, an executor serving ``chain1`` (one echo node) and the gateway as
``a2amesh up`` starts them (``python -m a2amesh agent|executor|gateway``), each with a probe first on its
``PYTHONPATH`` (``bench/crossprobe/sitecustomize.py``: a ``sys.setprofile`` recorder toggled by SIGUSR2;
nothing in ``shared/``, and nothing at all without ``CROSSINGS_OUT``). After ``--warmup`` calls, two idle
windows of 0.5 s are recorded (what the processes do with no call: timers, heartbeats), then ``--calls``
calls one at a time, each one JSON-RPC ``SendMessage`` to ``/agents/chain1/`` (httpx) recorded in the three
processes from just before the request until 50 ms after the answer. The executor's 0.25 s tick lands in
some of those windows; the call with the fewest functions entered is shown in full.

A unit is the first name after ``a2amesh.`` (``executor``, ``workflow``; a top-level module is its own:
``client``, ``mailbox``). A crossing is a call from a function of one unit into a function of another
(library frames between the two passed through: a2amesh → pydantic → a2amesh is one call), or a task made by
one unit running a coroutine of another. A function entered from the event loop, or from a library with no
a2amesh caller (a NATS message callback, the HTTP server calling the app), is an entry, not a crossing; a
coroutine resumed is not a call. The walk is the sequence of units entered, repeats collapsed; the spine is
the same without the units that call no other unit (``protocol``, ``jsontext``, ``ids``, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/crossings.py` from anywhere

import httpx

from a2amesh import logs
from a2amesh.ids import nuid
from bench.common import REPO, BenchContext, Child, servers, write_results
from bench.gateway import _free_port, _wait_http
from bench.wfkit import ECHO, chain_workflow, prepare_namespace, start_agents, start_executor, write_workflows

PROBE = REPO / "bench" / "crossprobe"
SETTLE = 0.05
"""Seconds recorded after the answer: the executor's and the agent's work after their reply (acks, marks)."""

FOUNDATION = frozenset(
    "protocol errors ids jsontext config logs faults eventloop mailbox lifecycle rpc diagnostics durations schedules"
    " tracing otlp_spans metrics".split()
)
"""The foundation layer of tests/unit/test_layers.py: crossings with neither end in it are shown apart."""

Row = list[str]  # [unit, module:function, caller unit (or the library it came from), call|task|entry, root]


def probe_env(out: Path) -> dict[str, str]:
    """A child's environment additions: the probe first on its path, and where it writes."""
    path = os.pathsep.join(filter(None, [str(PROBE), str(REPO), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path, "CROSSINGS_OUT": str(out)}


def _files(out: Path) -> tuple[Path, Path]:
    """Where a probe acknowledges its start, and where it writes its rows."""
    return out.with_name(out.name + ".on"), out.with_name(out.name + ".json")


def _clear(out: Path) -> None:
    for path in _files(out):
        path.unlink(missing_ok=True)


def _rows(out: Path) -> list[Row] | None:
    path = _files(out)[1]
    return json.loads(path.read_text()) if path.exists() else None  # the probe renames it there when complete


async def _until(child: Child, ready: Any, what: str, timeout: float = 10.0) -> Any:
    """Poll ``ready()`` until it answers something other than None or False (bounded), and return it."""
    deadline = time.monotonic() + timeout
    while (found := ready()) is None or found is False:
        if child.proc.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{child.label}: no {what} within {timeout:g}s:\n{child.tail()}")
        await asyncio.sleep(0.01)
    return found


async def record(children: dict[str, tuple[Child, Path]], during: Any) -> tuple[dict[str, list[Row]], float]:
    """Start the recorders, await ``during()``, wait SETTLE s, stop them; the rows per process and the seconds."""
    for child, out in children.values():
        _clear(out)
        os.kill(child.pid, signal.SIGUSR2)
    for child, out in children.values():
        await _until(child, _files(out)[0].exists, "recorder start")
    t0 = time.perf_counter()
    await during()
    await asyncio.sleep(SETTLE)
    for child, _ in children.values():
        os.kill(child.pid, signal.SIGUSR2)
    elapsed = time.perf_counter() - t0
    rows = {}
    for label, (child, out) in children.items():
        rows[label] = await _until(child, lambda out=out: _rows(out), "recorder output")
    return rows, elapsed


def body(i: int) -> dict[str, Any]:
    message = {"messageId": nuid(), "role": "ROLE_USER", "parts": [{"data": {"n": i}}]}
    return {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}}


async def call(http: httpx.AsyncClient, url: str, i: int) -> None:
    """One SendMessage; raises unless the answer is a completed task echoing the input."""
    r = await http.post(url, json=body(i), headers={"A2A-Version": "1.0"})
    if r.status_code != 200 or "TASK_STATE_COMPLETED" not in r.text or f'"n":{i}' not in r.text.replace(" ", ""):
        raise RuntimeError(f"{url} answered {r.status_code} {r.text[:300]}")


def walk(units: list[str]) -> list[str]:
    """The units in order, consecutive repeats collapsed."""
    out: list[str] = []
    for unit in units:
        if not out or out[-1] != unit:
            out.append(unit)
    return out


def counts(rows: list[Row]) -> dict[str, Any]:
    """One process's figures: functions entered, crossings by pair, entries, the walk and its spine."""
    crossings = [r for r in rows if r[3] != "entry" and r[2] != r[0]]
    pairs = collections.Counter(f"{r[2]}→{r[0]}" for r in crossings)
    callers = {r[2] for r in crossings}
    return {
        "functions": len(rows),
        "crossings": len(crossings),
        "above_foundation": sum(1 for r in crossings if r[0] not in FOUNDATION and r[2] not in FOUNDATION),
        "pairs": dict(pairs.most_common()),
        "entries": dict(collections.Counter(f"{r[2]}→{r[0]}" for r in rows if r[3] == "entry").most_common()),
        "walk": walk([r[0] for r in rows]),
        "spine": walk([r[0] for r in rows if r[0] in callers]),
        "roots": dict(collections.Counter(r[4] for r in rows).most_common()),
    }


def show(label: str, c: dict[str, Any], idle_roots: set[str], rows: list[Row], functions: bool) -> None:
    print(f"\n{label}: {c['functions']} a2amesh functions entered, {c['crossings']} crossings", end="")
    print(f" in {len(c['pairs'])} pairs")
    print(f"  ({c['above_foundation']} of them with neither end in the foundation layer),")
    print(f"  {sum(c['entries'].values())} entries from outside")
    print("  crossings: " + ", ".join(f"{k} {v}" for k, v in c["pairs"].items()))
    print("  entries:   " + ", ".join(f"{k} {v}" for k, v in c["entries"].items()))
    print(f"  walk ({len(c['walk'])} steps): " + " › ".join(c["walk"]))
    print(f"  spine ({len(c['spine'])} steps, units that call no other unit left out): " + " › ".join(c["spine"]))
    print("  roots (the outermost a2amesh function of each stack; * also seen in the idle windows):")
    for root, n in c["roots"].items():
        print(f"    {n:5d} {'*' if root in idle_roots else ' '} {root}")
    if functions:
        for unit, name, caller, kind, _ in rows:
            mark = "" if caller == unit else f"  ({kind} from {caller})"
            print(f"    {unit:10} {name}{mark}")


async def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="crossings-"))
    async with servers(tmp) as srv:
        ctx = BenchContext(srv=srv, quick=False, tmp=tmp)
        try:
            ns = ctx.new_namespace("walk")
            await prepare_namespace(ctx, ns)
            folder = write_workflows(tmp / "wf", [chain_workflow("chain1", 1)])
            (agent,) = await start_agents(ctx, ECHO, ns, env=probe_env(tmp / "agent"))
            executor, _ = await start_executor(ctx, folder, ns, env=probe_env(tmp / "executor"))
            port = _free_port()
            gateway = await ctx.spawn(
                f"gateway-{ns}",
                [sys.executable, "-m", "a2amesh", "gateway", "--port", str(port)],
                ctx.child_env(ns, **probe_env(tmp / "gateway")),
            )
            await _wait_http(gateway, f"http://127.0.0.1:{port}/readyz")
            children = {"gateway": (gateway, tmp / "gateway"), "executor": (executor, tmp / "executor")}
            children["agent"] = (agent, tmp / "agent")
            url = f"http://127.0.0.1:{port}/agents/{args.workflow}/"
            async with httpx.AsyncClient(timeout=30) as http:
                deadline = time.monotonic() + 30
                while True:  # the gateway may not have seen the workflow's card yet
                    try:
                        await call(http, url, -1)
                        break
                    except RuntimeError:
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.2)
                for i in range(args.warmup - 1):
                    await call(http, url, i)
                idle_roots: dict[str, set[str]] = collections.defaultdict(set)
                for _ in range(2):
                    idle, _seconds = await record(children, lambda: asyncio.sleep(0.5))
                    for label, seen in idle.items():
                        idle_roots[label] |= {r[4] for r in seen}
                calls: list[dict[str, list[Row]]] = []
                for i in range(args.calls):
                    rows, elapsed = await record(children, lambda i=i: call(http, url, 1000 + i))
                    calls.append(rows)
                    per = {k: counts(v) for k, v in rows.items()}
                    line = ", ".join(f"{k} {c['crossings']} ({c['functions']} functions)" for k, c in per.items())
                    total = sum(c["crossings"] for c in per.values())
                    print(f"call {i + 1}: {total} crossings: {line}; {elapsed * 1000:.0f} ms recorded")
        finally:
            await ctx.stop_children()
    best = min(range(len(calls)), key=lambda i: sum(len(v) for v in calls[i].values()))
    print(f"\n=== call {best + 1} (the fewest functions entered: the least background work in its window)")
    print(f"HTTP JSON-RPC SendMessage to /agents/{args.workflow}/ (one echo node), after {args.warmup} warm-up call(s)")
    result = {k: counts(v) for k, v in calls[best].items()}
    for label, c in result.items():
        show(label, c, idle_roots[label], calls[best][label], args.functions)
    total = sum(c["crossings"] for c in result.values())
    pairs = sum(len(c["pairs"]) for c in result.values())
    distinct = len({p for c in result.values() for p in c["pairs"]})
    above = sum(c["above_foundation"] for c in result.values())
    print(f"\ntotal: {total} crossings ({above} above the foundation); {pairs} (process, pair)s, {distinct} pairs")
    payload = {"workflow": args.workflow, "call": best + 1, "processes": result, "total": total, "above": above}
    print(f"results: {write_results('crossings', payload)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=5, help="calls recorded, one at a time (the cleanest shown)")
    p.add_argument("--warmup", type=int, default=1, help="calls made before (not recorded)")
    p.add_argument("--workflow", default="chain1", help="the workflow called (chain1: one echo node)")
    p.add_argument("--functions", action="store_true", help="also list every function entered")
    args = p.parse_args()
    if args.calls < 1 or args.warmup < 1:
        p.error("--calls and --warmup take 1 or more")
    logs.configure("WARNING", "console")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
