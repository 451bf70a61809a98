"""The executor's pure work per node of a 10-node echo chain, in one process, with no I/O (issue 41).

    python bench/engine_step.py [--runs 300] [--repeat 15]

What the runner asks of the DAG engine per node: the first state and commands (once per execution), each
node's result applied (``advance``), the reply subject of the next call set, the node records, the split state
write and the events' JSON. Prints µs per node (the best of ``--repeat`` timings of ``--runs`` executions) and
the calls per node (Python and C, counted by cProfile over 100 executions: exact, unlike the time on a busy
machine). Compare two trees with ``PYTHONPATH=<tree>/shared``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from a2amesh.executor.runner import event_json
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.engine import Engine
from a2amesh.workflow.events import EmitEvent, NodeCall, NodeSucceeded
from a2amesh.workflow.loader import load_data
from bench.wfkit import chain_workflow

NODES = 10


def _engine() -> Engine:
    definition = load_data(chain_workflow("chain10", NODES), name="chain10")[0].definition
    assert isinstance(definition, WorkflowDefinition)
    return Engine(definition)


def execution(engine: Engine) -> None:
    """One execution of the chain, every node answered at once."""
    state, commands = engine.start(execution_id="e" * 26, input={"n": 1}, now=time.time(), task_id="t" * 26)
    for first in commands:
        if isinstance(first, NodeCall):
            engine.set_reply_to(state, first.path, f"_INBOX.reply.{first.path}")
    positions: dict[str, int] | None = None
    for i in range(1, NODES + 1):
        result = NodeSucceeded(path=f"n{i}", attempt=1, output={"n": 1}, task_id="x" * 30)
        step = engine.advance(state, [result], time.time)
        for command in step.commands:
            if isinstance(command, NodeCall):
                engine.set_reply_to(step.state, command.path, f"_INBOX.reply.{command.path}")
        records = engine.node_records(state, step.state, step.touched, time.time())
        positions = engine.state_write(state, step.state, step.touched, positions, records).positions
        for command in step.commands:
            if isinstance(command, EmitEvent):
                event_json(command)
        state = step.state
    assert state.finished, state.status


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=300, help="executions per timing")
    p.add_argument("--repeat", type=int, default=15, help="timings (the best is kept)")
    args = p.parse_args()
    engine = _engine()
    execution(engine)
    best = min(timeit.repeat(lambda: execution(engine), number=args.runs, repeat=args.repeat))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(100):
        execution(engine)
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    calls = sum(row[1] for row in stats.values())
    python = sum(row[1] for key, row in stats.items() if key[0] != "~")
    per_node = 100 * NODES
    print(
        f"{best / args.runs / NODES * 1e6:.1f} µs per node; calls per node: {calls / per_node:.1f}"
        f" ({python / per_node:.1f} of Python functions)"
    )


if __name__ == "__main__":
    main()
