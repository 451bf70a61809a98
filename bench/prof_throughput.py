"""Profile the executor and an agent under the throughput load: the closed loop of ``bench/throughput.py``
(executions of a 10-node echo chain kept in flight), one window recorded in each profiled process.

    python bench/prof_throughput.py [--replicas 2] [--executors 1] [--seconds 8] [--in-flight 100]
                                    [--profile cpu|calls|cprof] [--out PREFIX] [--top 30] [--trace]

Prints each process's CPU per node (user and system, from ``/proc``) and, with ``--profile``, a summary per
profiled process (the first executor and the first agent replica), scaled to one node:

- ``cpu``: a CPU-time sampler (SIGPROF, one sample per millisecond of CPU the process used, so shares are
  shares of CPU, not of wall time as py-spy's are on a busy machine; time in C code is charged to the
  Python frame running when it returns). Self and inclusive µs of CPU per node per function. On uvloop the
  event loop's own C code (socket reads and writes, callbacks) runs between Python frames, so its time lands
  on whichever Python function is called next: a cheap function called right after a loop turn (a
  ``finished`` property, ``crash_point``) can show 10 µs it does not spend. Check such a figure with
  ``cprof`` or a micro-benchmark before acting on it.
- ``calls``: every Python and C call counted (slow, but exact): calls per node.
- ``cprof``: cProfile, time per function with C functions apart (inflated by the profiler: compare
  shares, not absolute figures).

The raw recordings stay in ``PREFIX.executor.0`` / ``PREFIX.agent.0`` (collapsed stacks, counts, or a pstats
file); ``bench/llmprof/sitecustomize.py`` does the recording in the child processes. ``--trace``: every
process traces every call, exported over OTLP/HTTP to a sink in the bench (as ``bench/ab.py --trace-after``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import pstats
import re
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from a2amesh import logs
from a2amesh.client import Client
from bench.common import REPO, BenchContext, Child, servers, stat_cpu_seconds
from bench.prof_llm import PROFILER, Counts
from bench.throughput import NODES, closed_loop
from bench.wfkit import ECHO, chain_workflow, prepare_namespace, start_agents, start_executor, write_workflows

_LINE = re.compile(r":\d+$")


def _frame(raw: str) -> str:
    return _LINE.sub("", raw)


def thread_cpu(pid: int) -> float:
    """Seconds of CPU the process's threads other than its main one have used so far (an exporter's thread; a
    thread that has ended is no longer listed, its CPU counted in the process's alone)."""
    threads = (stat_cpu_seconds(task / "stat") for task in Path(f"/proc/{pid}/task").iterdir() if task.name != str(pid))
    return sum(seconds for seconds in threads if seconds is not None)  # (None: ended meanwhile)


def cpu_summary(path: Path, cpu_us_per_node: float, top: int) -> list[str]:
    """Self and inclusive CPU per node per function from a collapsed-stack recording."""
    own: collections.Counter[str] = collections.Counter()
    within: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            within[f] += n
    if not total:
        return ["  (no samples)"]
    scale = cpu_us_per_node / total
    out = [f"  {total} samples; self µs of CPU per node:"]
    out += [f"  {n * scale:7.1f}  {f}" for f, n in own.most_common(top)]
    out.append("  inclusive (a2amesh functions):")
    ours = [(f, n) for f, n in within.most_common() if "a2amesh/" in f][:top]
    out += [f"  {n * scale:7.1f}  {f}" for f, n in ours]
    return out


def calls_summary(path: Path, nodes: int, top: int) -> list[str]:
    """Calls per node per function from a call-count recording."""
    counts: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        name, _, count = line.rpartition(" ")
        counts[name] += int(count)
    python = sum(v for k, v in counts.items() if not k.startswith("C "))
    out = [f"  calls per node: {sum(counts.values()) / nodes:.0f} ({python / nodes:.0f} of Python functions)"]
    out += [f"  {v / nodes:7.2f}  {k}" for k, v in counts.most_common(top)]
    return out


def cprof_summary(path: Path, nodes: int, top: int) -> list[str]:
    """Own time per node per function (C functions apart) from a pstats file."""
    stats = pstats.Stats(str(path))
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    out = [f"  cProfile: {stats.total_tt * 1e6 / nodes:.0f} µs per node in all (inflated by the profiler)"]  # type: ignore[attr-defined]
    for (file, line, name), (_, calls, own, _, _) in rows[:top]:
        where = file.rsplit("site-packages/", 1)[-1].rsplit("shared/", 1)[-1]
        out.append(f"  {own * 1e6 / nodes:7.1f} µs {calls / nodes:6.1f}/node  {name} ({where}:{line})")
    return out


async def profile(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="prof-tp-"))
    name = f"chain{NODES}"
    async with servers(tmp) as srv:
        ctx = BenchContext(srv=srv, quick=False, tmp=tmp)
        try:
            ns = ctx.new_namespace("proftp")
            folder = write_workflows(tmp / "wf", [chain_workflow(name, NODES)])
            await prepare_namespace(ctx, ns)

            def env(role: str) -> dict[str, str]:
                if not args.profile:
                    return {}
                path = os.pathsep.join(filter(None, [str(REPO), str(PROFILER), os.environ.get("PYTHONPATH", "")]))
                return {"LLMPROF": args.profile, "LLMPROF_OUT": f"{args.out}.{role}", "PYTHONPATH": path}

            agents = await start_agents(ctx, ECHO, ns, 1, env=env("agent"))
            agents += await start_agents(ctx, ECHO, ns, args.replicas - 1) if args.replicas > 1 else []
            executors = [(await start_executor(ctx, folder, ns, env=env("executor")))[0]]
            for i in range(1, args.executors):
                executors.append((await start_executor(ctx, folder, ns, label=f"executor{i}"))[0])
            profiled: dict[str, Child] = {"executor": executors[0], "agent": agents[0]}
            processes = {
                **{f"executor{i}": c.pid for i, c in enumerate(executors)},
                **{f"agent{i}": c.pid for i, c in enumerate(agents)},
            }
            client = await Client.connect(ctx.settings(ns), name="prof-throughput")
            try:
                await client.registry.wait_for(name, 30)
                await closed_loop(client, name, args.in_flight, args.seconds / 4)  # warm-up
                before = {k: Counts.of(pid) for k, pid in processes.items()}
                threads_before = {k: thread_cpu(pid) for k, pid in processes.items()}
                if args.profile:
                    for child in profiled.values():
                        os.kill(child.pid, signal.SIGUSR2)  # start
                done, elapsed, _ = await closed_loop(client, name, args.in_flight, args.seconds)
                if args.profile:
                    for child in profiled.values():
                        os.kill(child.pid, signal.SIGUSR2)  # stop and write
                after = {k: Counts.of(pid) for k, pid in processes.items()}
                threads = {k: (thread_cpu(pid) - threads_before[k]) * 1e6 for k, pid in processes.items()}
                nodes = done * NODES
                print(f"{nodes} nodes in {elapsed:.1f} s: {nodes / elapsed:.0f} nodes/s under --profile {args.profile}")
                cpu_us: dict[str, float] = {}
                for k in processes:
                    user = (after[k].user - before[k].user) * 1e6 / nodes
                    system = (after[k].system - before[k].system) * 1e6 / nodes
                    cpu_us[k] = user + system
                    print(
                        f"  {k}: {user + system:.0f} µs CPU per node (user {user:.0f}, system {system:.0f}; "
                        f"threads other than the main one {threads[k] / nodes:.0f})"
                    )
                if not args.profile:
                    return
                await asyncio.sleep(1.5)  # the recordings are written by signal handlers
                for role, key, sharing in (("executor", "executor0", len(executors)), ("agent", "agent0", len(agents))):
                    path = Path(f"{args.out}.{role}.0")
                    handled = nodes // sharing  # about the nodes this one of `sharing` replicas handled
                    print(f"\n{role} ({path}), per node it handled (≈ {handled}):")
                    if args.profile == "cpu":
                        lines = cpu_summary(path, cpu_us[key] * sharing, args.top)
                    elif args.profile == "calls":
                        lines = calls_summary(path, handled, args.top)
                    else:
                        lines = cprof_summary(path, handled, args.top)
                    print("\n".join(lines))
            finally:
                await client.close()
        finally:
            await ctx.stop_children()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=2, help="echo agent replicas")
    p.add_argument("--executors", type=int, default=1, help="executor replicas")
    p.add_argument("--seconds", type=float, default=8, help="seconds of the recorded window")
    p.add_argument("--in-flight", type=int, default=100, help="executions kept in flight")
    p.add_argument("--profile", choices=("cpu", "calls", "cprof"), default=None, help="record executor0 and agent0")
    p.add_argument("--out", default="/tmp/proftp", help="prefix of the raw recordings")
    p.add_argument("--top", type=int, default=30, help="rows per table")
    p.add_argument("--trace", action="store_true", help="every process traces every call (OTLP to a sink, as ab.py)")
    args = p.parse_args()
    logs.configure("WARNING", "console")
    if args.trace:
        from bench.otlp_sink import OtlpSink

        sink = OtlpSink()  # the children inherit this environment (BenchContext.child_env)
        os.environ.update(sink.env(traces=True, metrics=False))
    asyncio.run(profile(args))


if __name__ == "__main__":
    main()
