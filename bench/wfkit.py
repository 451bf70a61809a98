"""What the workflow sections share: workflow and agent files, executor and agent processes, CPU and RSS.

Executors run as ``python -m a2amesh executor DIR`` and agents as ``python -m a2amesh agent FILE``,
each in its own process with the production profile (``A2AMESH_PROFILE=default``) unless a section
passes other settings in ``env``. Readiness is read from the process's JSON log (``executor.ready`` /
``agent.ready``), so several replicas of one agent can be waited for.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from bench.common import REPO, BenchContext, Child, cpu_seconds, rss_mb

ECHO = REPO / "agent_cards" / "echo.yaml"

AGENTS_PY = '''
"""Handlers of the benchmark's agents (written by bench/wfkit.py)."""

import asyncio
import os
import time
from pathlib import Path


async def echo(input, ctx):
    return input


_gate = None


async def _watch_gate(path, event):
    while not path.exists():
        await asyncio.sleep(0.05)
    event.set()


async def sleeper(input, ctx):
    """Sleep 1 s (or input["sleep"]); then, when BENCH_GATE names a file, wait until it exists (one poller)."""
    global _gate
    await asyncio.sleep(float((input or {}).get("sleep", 1.0)) if isinstance(input, dict) else 1.0)
    gate = os.environ.get("BENCH_GATE")
    if gate and not Path(gate).exists():
        if _gate is None or _gate.is_set():
            _gate = asyncio.Event()
            asyncio.get_running_loop().create_task(_watch_gate(Path(gate), _gate))
        await _gate.wait()
    return input
'''


def write_agent(folder: Path, name: str, handler: str, *, max_concurrency: int = 64) -> Path:
    """An agent YAML (and the shared handler module) in ``folder``; returns the YAML path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench_agents.py").write_text(AGENTS_PY)
    path = folder / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "description": f"benchmark agent {name}",
                "version": "1.0.0",
                "skills": [{"id": name, "name": name, "description": name, "tags": ["bench"]}],
                "handler": f"bench_agents:{handler}",
                "max_concurrency": max_concurrency,
            },
            sort_keys=False,
        )
    )
    return path


def chain_workflow(name: str, n: int, agent: str = "echo") -> dict[str, Any]:
    """A sequential workflow of ``n`` agent nodes, each passing its output to the next."""
    nodes: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        node: dict[str, Any] = {"id": f"n{i}", "type": "agent", "agent_name": agent}
        if i == 1:
            node["input"] = "{{workflow.input}}"
        else:
            node["depends_on"] = [f"n{i - 1}"]
            node["input"] = f"{{{{n{i - 1}.output}}}}"
        nodes.append(node)
    return {
        "name": name,
        "description": f"{n} {agent} nodes in a line (benchmark)",
        "version": "1.0.0",
        "nodes": nodes,
        "output_mapping": {"out": f"{{{{n{n}.output}}}}"},
    }


def map_workflow(
    name: str, agent: str = "echo", concurrency_limit: int = 100, max_items: int = 10_000
) -> dict[str, Any]:
    """A map over ``workflow.input.items`` calling ``agent`` once per item."""
    return {
        "name": name,
        "description": "a map over the input's items (benchmark)",
        "version": "1.0.0",
        "nodes": [
            {
                "id": "each",
                "type": "map",
                "items": "{{workflow.input.items}}",
                "node": "item",
                "concurrency_limit": concurrency_limit,
                "max_items": max_items,
            },
            {"id": "item", "type": "agent", "agent_name": agent, "input": "{{_map_item}}"},
        ],
        "output_mapping": {"results": "{{each.output.results}}"},
    }


def write_workflows(folder: Path, workflows: Sequence[dict[str, Any]]) -> Path:
    """Write each workflow as ``{name}.yaml`` in ``folder``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for wf in workflows:
        (folder / f"{wf['name']}.yaml").write_text(yaml.safe_dump(wf, sort_keys=False))
    return folder


async def wait_log(child: Child, event: str, timeout: float = 60.0, *, count: int = 1) -> dict[str, Any]:
    """Wait until the child's JSON log holds ``count`` lines with ``"event": event``; returns the last one."""
    deadline = time.monotonic() + timeout
    while True:
        found: list[dict[str, Any]] = []
        try:
            for line in child.log_path.read_text(errors="replace").splitlines():
                if event in line:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("event") == event:
                        found.append(rec)
        except OSError:
            pass
        if len(found) >= count:
            return found[-1]
        if child.proc.returncode is not None:
            raise RuntimeError(f"{child.label} exited ({child.proc.returncode}) before {event}:\n{child.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{child.label}: no {event} within {timeout:g}s:\n{child.tail()}")
        await asyncio.sleep(0.05)


async def prepare_namespace(ctx: BenchContext, namespace: str) -> None:
    """Create the namespace's streams and buckets first (what `a2amesh up` does), so processes start together."""
    bus = await Bus.connect(ctx.settings(namespace), name="bench-init")
    try:
        await init_mesh(bus, ctx.settings(namespace))
    finally:
        await bus.close()


async def start_agents(
    ctx: BenchContext, yaml_file: Path, namespace: str, replicas: int = 1, env: dict[str, str] | None = None
) -> list[Child]:
    """Start ``replicas`` processes of an agent and wait until each logs ``agent.ready``."""
    children = []
    for i in range(replicas):
        children.append(
            await ctx.spawn(
                f"agent-{yaml_file.stem}-{namespace}-{i}",
                [sys.executable, "-m", "a2amesh", "agent", str(yaml_file)],
                ctx.child_env(namespace, **(env or {})),
            )
        )
    await asyncio.gather(*(wait_log(c, "agent.ready") for c in children))
    return children


async def start_executor(
    ctx: BenchContext, folder: Path, namespace: str, label: str = "executor", env: dict[str, str] | None = None
) -> tuple[Child, str]:
    """Start ``python -m a2amesh executor DIR``; returns the child and its instance id (from its ready line)."""
    child = await ctx.spawn(
        f"{label}-{namespace}",
        [sys.executable, "-m", "a2amesh", "executor", str(folder)],
        ctx.child_env(namespace, **(env or {})),
    )
    rec = await wait_log(child, "executor.ready")
    return child, str(rec.get("instance", ""))


@dataclass
class CpuMeter:
    """CPU seconds of a set of processes (and of this bench process) between start() and stop()."""

    pids: dict[str, int]

    def read(self) -> dict[str, float]:
        out = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        res = {k: v for k, v in out.items() if v is not None}
        res["bench client"] = time.process_time()
        return res

    def start(self) -> None:
        self._before = self.read()

    def stop(self) -> dict[str, float]:
        after = self.read()
        return {k: after[k] - v for k, v in self._before.items() if k in after}


def cpu_note(cpu: dict[str, float], per: int | None = None, unit: str = "node") -> str:
    """``executor 1.23 s, agent 0.98 s, …`` (and ms per ``unit`` when ``per`` is given)."""
    parts = []
    for k, v in cpu.items():
        name = k.split(" ")[0]
        parts.append(f"{name} {v * 1000 / per:.2f}" if per else f"{name} {v:.2f}s")
    suffix = f" ms CPU/{unit}" if per else " CPU"
    return ", ".join(parts) + suffix


def hwm_mb(pid: int) -> float | None:
    """Peak resident set size (VmHWM) of a process in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


__all__ = [
    "ECHO",
    "CpuMeter",
    "chain_workflow",
    "cpu_note",
    "hwm_mb",
    "map_workflow",
    "prepare_namespace",
    "rss_mb",
    "start_agents",
    "start_executor",
    "wait_log",
    "write_agent",
    "write_workflows",
]
