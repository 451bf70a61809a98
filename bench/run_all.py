"""Run every benchmark on one pair of servers, print one table, write one JSON file.

    python bench/run_all.py            # the full run (a few minutes)
    python bench/run_all.py --quick    # smoke mode: seconds (CI runs this)
    python bench/run_all.py --only floors,roundtrip

A benchmark is a module exposing ``SECTION`` (see ``bench/common.py``); add it to ``SECTIONS``. Order
matters: later sections read earlier figures (the round trip reports its ratio to the floors), and the
latency sections run before the load sections.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/run_all.py` from anywhere

from bench import api, concurrency, fanout, floors, gateway, llm_node, peers, recovery, roundtrip, throughput, workflows
from bench.common import Section, main

SECTIONS: list[Section] = [
    floors.SECTION,
    roundtrip.SECTION,
    peers.SECTION,
    workflows.SECTION,
    llm_node.SECTION,
    gateway.SECTION,
    api.SECTION,
    # the load sections last: they leave the servers and the kernel (write-back of the file store) busy
    # for a while, which the latency sections above would measure
    throughput.SECTION,
    fanout.SECTION,
    concurrency.SECTION,
    recovery.SECTION,
]

if __name__ == "__main__":
    raise SystemExit(main(SECTIONS, "run_all", __doc__ or ""))
