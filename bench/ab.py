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
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/ab.py` from anywhere

from a2amesh.client import Client
from bench.common import BenchContext, Figure, Section, main, ms_since
from bench.wfkit import ECHO, chain_workflow, prepare_namespace, start_agents, start_executor, write_workflows
from bench.workflows import run_chain

SIDES = ("before", "after")
MEASURES = {
    "call": "plain call",
    "chain1": "1-node workflow",
    "chain10": "10-node chain, per node",
    "chain50": "50-node chain, per node",
}


def section(before: Path, rounds: int) -> Section:
    """The A/B section for the package folder ``before``."""

    async def run(ctx: BenchContext) -> list[Figure]:
        clients: dict[str, Client] = {}
        try:
            for side in SIDES:
                ns = ctx.new_namespace(side)
                env = {"PYTHONPATH": str(before)} if side == "before" else {}
                folder = write_workflows(ctx.tmp / f"wf-{ns}", [chain_workflow(f"chain{n}", n) for n in (1, 10, 50)])
                await prepare_namespace(ctx, ns)
                await start_agents(ctx, ECHO, ns, env=env)
                await start_executor(ctx, folder, ns, env=env)
                clients[side] = await Client.connect(ctx.settings(ns), name=f"bench-ab-{side}")
                for name in ("echo", "chain1", "chain10", "chain50"):
                    await clients[side].registry.wait_for(name, 30)
            samples: dict[str, dict[str, list[float]]] = {s: {m: [] for m in MEASURES} for s in SIDES}
            for i in range(ctx.scale(30, 1)):  # warm-up
                for side in SIDES:
                    await clients[side].send("echo", {"i": i})
                    await run_chain(clients[side], "chain10", i)
            order = list(SIDES)
            for i in range(ctx.scale(rounds, 3)):
                order.reverse()
                for side in order:
                    t0 = time.perf_counter()
                    await clients[side].send("echo", {"i": i})
                    samples[side]["call"].append(ms_since(t0))
                for side in order:
                    samples[side]["chain1"].append(await run_chain(clients[side], "chain1", i))
                for side in order:
                    samples[side]["chain10"].append(await run_chain(clients[side], "chain10", i) / 10)
                if i % 5 == 0:
                    for side in order:
                        samples[side]["chain50"].append(await run_chain(clients[side], "chain50", i) / 50)
        finally:
            for client in clients.values():
                await client.close()
        return [
            Figure.from_samples(f"ab.{measure}.{side}", f"{label}: {side}", samples[side][measure])
            for measure, label in MEASURES.items()
            for side in SIDES
        ]

    return Section("ab", f"A/B: {before} (before) against this tree (after)", run, latency=True)


if __name__ == "__main__":
    from bench import floors

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--before", type=Path, required=True, help="folder holding the `a2amesh` package to compare")
    pre.add_argument("--rounds", type=int, default=300, help="rounds of the comparison (default 300)")
    known, rest = pre.parse_known_args()
    package = known.before.resolve()
    if not (package / "a2amesh" / "__init__.py").is_file():
        raise SystemExit(f"--before: {package} holds no a2amesh package (give a checkout's shared/ folder)")
    raise SystemExit(main([floors.SECTION, section(package, known.rounds)], "ab", __doc__ or "", rest))
