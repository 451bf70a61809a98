"""Profile the LLM agent: one ``llmnode`` agent and one executor on the benchmark's fake model, runs of LLM chains
of each size for a while, and per node: the agent's CPU (user, system), context switches and the executor's CPU.

    python bench/prof_llm.py [--seconds 20] [--sizes 1,10] [--repeat 2] [--profile cpu|calls --out PREFIX]
                             [--pyspy DIR]

``--profile cpu`` samples the agent's stacks by CPU time (SIGPROF, one sample per scheduler tick of CPU
used, so shares are shares of CPU, not of wall time as py-spy's are on a busy machine); ``--profile calls``
counts every Python and C call the agent makes (slow, but exact: two runs doing the same work count the same).
Each size's window is written to ``PREFIX.<k>`` (``bench/llmprof/sitecustomize.py`` does the recording in
the agent). ``--pyspy DIR`` also runs ``py-spy record --format raw`` on the agent per window.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from a2amesh import logs
from a2amesh.client import Client
from bench.common import REPO, BenchContext, Child, servers
from bench.llm_node import fake_base_url, llm_env, run_llm_chain, write_llm_agent
from bench.wfkit import chain_workflow, prepare_namespace, start_agents, start_executor, write_workflows

PROFILER = Path(__file__).resolve().parent / "llmprof"


@dataclass
class Counts:
    """A process's CPU and context switches so far (``/proc``)."""

    user: float
    system: float
    voluntary: int
    involuntary: int

    @classmethod
    def of(cls, pid: int) -> Counts:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        tick = os.sysconf("SC_CLK_TCK")
        return cls(
            int(fields[11]) / tick,
            int(fields[12]) / tick,
            int(status["voluntary_ctxt_switches"]),
            int(status["nonvoluntary_ctxt_switches"]),
        )


async def window(client: Client, agent: Child, executor: Child, n: int, seconds: float) -> str:
    """Runs of the ``n``-node chain for ``seconds``; the per-node line."""
    a0, e0, t0 = Counts.of(agent.pid), Counts.of(executor.pid), time.monotonic()
    nodes = 0
    while time.monotonic() - t0 < seconds:
        await run_llm_chain(client, n, nodes)
        nodes += n
    a1, e1 = Counts.of(agent.pid), Counts.of(executor.pid)
    wall = (time.monotonic() - t0) * 1000 / nodes
    user, system = (a1.user - a0.user) * 1000 / nodes, (a1.system - a0.system) * 1000 / nodes
    executor_cpu = (e1.user + e1.system - e0.user - e0.system) * 1000 / nodes
    return (
        f"n={n}: {nodes} nodes, agent CPU {user + system:.2f} ms/node (user {user:.2f}, system {system:.2f}), "
        f"context switches {(a1.voluntary - a0.voluntary) / nodes:.1f} voluntary, "
        f"{(a1.involuntary - a0.involuntary) / nodes:.1f} involuntary; executor CPU {executor_cpu:.2f} ms/node; "
        f"wall {wall:.2f} ms/node"
    )


async def profile(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="prof-llm-"))
    async with servers(tmp) as srv:
        ctx = BenchContext(srv=srv, quick=False, tmp=tmp)
        try:
            _, base_url = await fake_base_url(ctx)
            ns = ctx.new_namespace("prof")
            agent_yaml = write_llm_agent(tmp / "agents")
            folder = write_workflows(tmp / "wf", [chain_workflow(f"llm{n}", n, agent="llmnode") for n in sizes])
            await prepare_namespace(ctx, ns)
            env = llm_env(base_url)
            if args.profile:
                env.update(LLMPROF=args.profile, LLMPROF_OUT=args.out, PYTHONPATH=f"{REPO}:{PROFILER}")
            (agent,) = await start_agents(ctx, agent_yaml, ns, env=env)
            executor, _ = await start_executor(ctx, folder, ns)
            client = await Client.connect(ctx.settings(ns), name="prof")
            try:
                for n in sizes:
                    await client.registry.wait_for(f"llm{n}", 30)
                    for i in range(5):
                        await run_llm_chain(client, n, i)
                print(f"agent pid {agent.pid}", flush=True)
                for rep in range(args.repeat):
                    for n in sizes:
                        spy = None
                        if args.pyspy:
                            out = Path(args.pyspy) / f"agent-n{n}-r{rep}.txt"
                            argv = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw"]
                            argv += ["-r", "250", "-o", str(out), "-p", str(agent.pid), "--nonblocking"]
                            spy = await asyncio.create_subprocess_exec(
                                *argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                            )
                            await asyncio.sleep(1.0)
                        if args.profile:
                            os.kill(agent.pid, signal.SIGUSR2)  # start
                        print(await window(client, agent, executor, n, args.seconds), flush=True)
                        if args.profile:
                            os.kill(agent.pid, signal.SIGUSR2)  # stop and write
                            await asyncio.sleep(1.5)
                        if spy is not None:
                            spy.send_signal(signal.SIGINT)
                            await spy.wait()
            finally:
                await client.close()
        finally:
            await ctx.stop_children()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20, help="seconds of runs per size and repeat")
    p.add_argument("--sizes", default="1,10", help="chain sizes, comma-separated")
    p.add_argument("--repeat", type=int, default=2, help="rounds over the sizes")
    p.add_argument("--profile", choices=("cpu", "calls"), default=None, help="record the agent in each window")
    p.add_argument("--out", default="/tmp/llmprof", help="output prefix of --profile")
    p.add_argument("--pyspy", default="", help="folder for py-spy raw profiles of each window")
    args = p.parse_args()
    logs.configure("WARNING", "console")
    asyncio.run(profile(args))


if __name__ == "__main__":
    main()
