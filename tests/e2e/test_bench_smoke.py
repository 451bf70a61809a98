"""The benchmark's smoke mode runs end to end, so `bench/` never rots (timings are never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The benchmarks keep most of a core busy for a minute under their own deadlines (never timings): beside the other
# quiet tests, not beside the parallel phase.
pytestmark = pytest.mark.quiet


@pytest.mark.timeout(150)
def test_run_all_quick_writes_results(tmp_path: Path) -> None:
    """`python bench/run_all.py --quick` exits 0 and writes a results JSON with machine info and figures."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run_all.py"), "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"run_all --quick exited {proc.returncode}\n{output}"
    files = list(out.glob("run_all-*.json"))
    assert len(files) == 1, f"expected one results file in {out}, found {files}\n{proc.stdout[-2000:]}"
    result = json.loads(files[0].read_text())
    assert result["quick"] is True
    assert result["errors"] == {}
    assert result["machine"]["jetstream_sync"]["setting"]
    keys = {f["key"] for f in result["figures"]}
    assert {"floors.core", "floors.durable", "floors.node", "roundtrip.mesh", "roundtrip.mesh_throughput"} <= keys
    assert {
        "workflow.chain.n10",
        "workflow.floors.n10",
        "throughput.r2",
        "fanout.total",
        "concurrency.completed",
        "concurrency.rss_per_execution",
        "recovery.takeover",
        "llm.chain.n3",
        "llm.chain.n10",
        "llm.fit",
        "llm.node.n10",
        "llm.node.fit",
        "llm.node.overhead",
    } <= keys
    chain = next(f for f in result["figures"] if f["key"] == "workflow.chain.n10")
    floors = chain["extra"]["floors_interleaved_ms"]
    assert all(floors[k] > 0 for k in ("durable", "node", "core")), f"floors not measured beside the runs: {floors}"
    assert chain["extra"]["ratio_p50_durable"] == chain["value"] / floors["durable"]
    fit = next(f for f in result["figures"] if f["key"] == "llm.fit")
    assert fit["value"] is not None, f"no line fit: {fit}"
    assert fit["value"] > 0, f"a node cannot cost nothing: {fit}"
    assert fit["extra"]["a_ms"] is not None, f"no per-execution part: {fit}"


@pytest.mark.timeout(120)
def test_ab_quick_compares_two_trees(tmp_path: Path) -> None:
    """`python bench/ab.py --before DIR --quick` (this tree against itself) exits 0 with both sides' figures."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "ab.py"),
            "--before",
            str(REPO / "shared"),
            "--quick",
            "--only",
            "ab",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, f"ab --quick exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    (results,) = out.glob("ab-*.json")
    keys = {f["key"] for f in json.loads(results.read_text())["figures"]}
    assert {f"ab.{m}.{s}" for m in ("call", "chain10", "chain50") for s in ("before", "after")} <= keys
