"""Where a one-node workflow call spends its time: the executor's critical path, step by step (issue 41).

    python bench/trace_path.py [--calls 300] [--workflow chain1] [--monitor]

Starts the servers, the echo agent and an executor serving ``chain1`` (one echo node), makes ``--calls``
sequential calls and prints, per step of the executor's path, the median time since the request reached
the executor's intake (``Intake.handle``). The executor runs with a probe (a ``sitecustomize`` written to
a temporary folder put first on its ``PYTHONPATH``) that wraps the functions on the path and writes one
line of timestamps per execution when its final answer has been published. Each wrapper marks the first
call of its function in an execution (``name``) and its return (``name.done``); ``put``/``put2`` are the
first two mailbox puts (the reply handed to the call, then the result to the runner), ``woke`` the
runner waking on it. ``--monitor`` also records Valkey's ``MONITOR`` (server clock) and prints, per call,
the median time from the client's send to each script the executor and the agent run (the probe is
off then, and the monitor itself slows Valkey down).

Not a benchmark of totals (the probe costs a few µs per mark); for the order and size of the steps.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from a2amesh import logs
from a2amesh.client import Client
from bench.common import BenchContext, servers
from bench.wfkit import ECHO, chain_workflow, prepare_namespace, start_agents, start_executor, write_workflows

PROBE = """
import os
import time

if os.environ.get("A2AMESH_PATH_PROBE"):
    _T = {}
    _OUT = open(os.environ["A2AMESH_PATH_PROBE"], "a", buffering=1)

    def _wrap(cls, name, label, first=False, last=False):
        orig = getattr(cls, name)

        async def probe(*args, **kwargs):
            if first:
                _T.clear()
            _T.setdefault(label, time.perf_counter())
            result = await orig(*args, **kwargs)
            _T.setdefault(label + ".done", time.perf_counter())
            if last and "in" in _T:
                base = _T["in"]
                _OUT.write(" ".join(f"{k}={(v - base) * 1000:.3f}" for k, v in _T.items()) + "\\n")
            return result

        setattr(cls, name, probe)

    from a2amesh import client, mailbox
    from a2amesh.executor import runner
    from a2amesh.store import executions
    from a2amesh.worker import intake, replies

    _wrap(intake.Intake, "handle", "in", first=True)
    _wrap(executions.ExecutionStore, "create", "create")
    _wrap(client.Client, "dispatch", "dispatch")
    _wrap(runner.ExecutionRunner, "run", "run")
    _wrap(runner.ExecutionRunner, "_emit", "emit")
    _wrap(client.Client, "_on_reply", "reply")
    _wrap(runner.ExecutionRunner, "result_event", "result_event")
    _wrap(runner.ExecutionRunner, "_apply", "apply")
    _wrap(runner.ExecutionRunner, "checkpoint", "checkpoint")
    _wrap(runner.ExecutionRunner, "_final_for", "final_task")
    _wrap(runner.ExecutionRunner, "_write_step", "write_step")
    _wrap(executions.ExecutionStore, "commit", "commit")
    _wrap(replies.ReplyPublisher, "final", "final", last=True)
    _wrap(executions.ExecutionStore, "mark_published", "mark_published")

    _put = mailbox.Mailbox.put_nowait
    _wait = mailbox.Mailbox.wait

    def _probe_put(self, item):
        _T.setdefault("put2" if "put" in _T else "put", time.perf_counter())
        return _put(self, item)

    async def _probe_wait(self):
        await _wait(self)
        if "put2" in _T:
            _T.setdefault("woke", time.perf_counter())

    mailbox.Mailbox.put_nowait = _probe_put
    mailbox.Mailbox.wait = _probe_wait
"""


def medians(lines: list[str]) -> list[tuple[str, float, int]]:
    """The median of each mark over the executions, in the order of the medians."""
    marks: dict[str, list[float]] = collections.defaultdict(list)
    for line in lines:
        for item in line.split():
            key, _, value = item.partition("=")
            marks[key].append(float(value))
    rows = [(k, statistics.median(v), len(v)) for k, v in marks.items()]
    return sorted(rows, key=lambda r: r[1])


def monitor_rows(path: Path, windows: list[tuple[float, float]]) -> list[str]:
    """Per number of scripts seen in a call: median ms from the send to each script, and to the answer."""
    stamps: list[float] = []
    for line in path.read_text(errors="replace").splitlines():
        head, _, rest = line.partition(" ")
        if '"EVALSHA"' in rest or '"EVAL"' in rest:
            try:
                stamps.append(float(head))
            except ValueError:
                continue
    by_count: dict[int, list[list[float]]] = collections.defaultdict(list)
    for t0, t1 in windows:
        marks = [(t - t0) * 1000 for t in stamps if t0 <= t <= t1]
        by_count[len(marks)].append([*marks, (t1 - t0) * 1000])
    out = []
    for count, rows in sorted(by_count.items()):
        cols = " ".join(f"{statistics.median(c):6.2f}" for c in zip(*rows, strict=True))
        out.append(f"  {len(rows):4d} calls with {count} scripts before the answer: {cols} (last: the answer)")
    return out


async def trace(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="trace-path-"))
    probe_dir = tmp / "probe"
    probe_dir.mkdir()
    (probe_dir / "sitecustomize.py").write_text(PROBE)
    probe_out = tmp / "probe.txt"
    async with servers(tmp) as srv:
        ctx = BenchContext(srv=srv, quick=False, tmp=tmp)
        try:
            ns = ctx.new_namespace("trace")
            await prepare_namespace(ctx, ns)
            folder = write_workflows(tmp / "wf", [chain_workflow("chain1", 1)])
            await start_agents(ctx, ECHO, ns)
            env = {}
            if not args.monitor:
                path = os.pathsep.join(filter(None, [str(probe_dir), os.environ.get("PYTHONPATH", "")]))
                env = {"A2AMESH_PATH_PROBE": str(probe_out), "PYTHONPATH": path}
            await start_executor(ctx, folder, ns, env=env)
            client = await Client.connect(ctx.settings(ns), name="trace-path")
            monitor = None
            skip = 0
            try:
                for i in range(20):  # warm-up
                    await client.send(args.workflow, {"i": i}, timeout=60)
                skip = len(probe_out.read_text().splitlines()) if probe_out.exists() else 0
                if args.monitor:
                    log = os.open(tmp / "monitor.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        monitor = await asyncio.create_subprocess_exec(
                            "redis-cli", "-u", srv.redis_url, "monitor", stdout=log
                        )
                    finally:
                        os.close(log)
                    await asyncio.sleep(0.5)
                windows = []
                for i in range(args.calls):
                    t0 = time.time()
                    await client.send(args.workflow, {"i": i}, timeout=60)
                    windows.append((t0, time.time()))
                    await asyncio.sleep(0.02)
            finally:
                await client.close()
                if monitor is not None:
                    monitor.terminate()
                    await monitor.wait()
            if args.monitor:
                print("\n".join(monitor_rows(tmp / "monitor.txt", windows)))
            else:
                print(f"{args.calls} calls of {args.workflow}; median ms since the executor's intake got the request:")
                for key, value, n in medians(probe_out.read_text().splitlines()[skip:]):
                    print(f"  {key:20} {value:7.3f}  (n={n})")
        finally:
            await ctx.stop_children()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=300, help="sequential calls traced")
    p.add_argument("--workflow", default="chain1", help="the workflow called (chain1: one echo node)")
    p.add_argument("--monitor", action="store_true", help="Valkey MONITOR instead of the executor probe")
    args = p.parse_args()
    logs.configure("WARNING", "console")
    asyncio.run(trace(args))


if __name__ == "__main__":
    main()
