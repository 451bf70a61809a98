"""``a2amesh demo``: start the one-machine mesh, call the example agents, print the results, stop."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from a2amesh.client import connect, make_message
from a2amesh.config import Settings
from a2amesh.mesh import Mesh
from a2amesh.protocol import TaskState

# Example inputs for the agents shipped in agent_cards/ (agents not present are skipped).
AGENT_CALLS: list[tuple[str, Any]] = [
    ("echo", {"hello": "mesh"}),
    (
        "order_validator",
        {"order_id": "A-1001", "total": 27.5, "items": [{"sku": "tea", "quantity": 5, "unit_price": 5.5}]},
    ),
    ("order_validator", {"order_id": "A-1002", "total": 10, "items": [{"sku": "mug", "quantity": 0, "unit_price": 4}]}),
    ("text_stats", {"text": "Agents publish cards.\nWorkflows are agents too."}),
]


def _line(label: str, value: Any) -> None:
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
    print(f"  {label:<16} {text}")


async def run_demo(settings: Settings, *, agents_dir: Path, workflows_dir: Path) -> int:
    """Run the demo; 0 when every call succeeded."""
    failures = 0
    has_workflows = await asyncio.to_thread(lambda: workflows_dir.is_dir() and any(workflows_dir.iterdir()))
    with tempfile.TemporaryDirectory(prefix="a2amesh-demo-") as tmp:
        mesh = Mesh(
            settings,
            agents_dir=agents_dir,
            workflows_dir=workflows_dir if has_workflows else None,
            state_dir=Path(tmp),
            log_file=Path(tmp) / "mesh.log",
        )
        t0 = time.monotonic()
        async with mesh:
            names = [d.name for _, d in mesh.definitions]
            print(f"mesh up in {time.monotonic() - t0:.1f}s: NATS {mesh.nats_url}, Redis {mesh.redis_url}")
            print(f"agents (one process per replica): {', '.join(names)}")
            async with connect(mesh.effective_settings(), name="a2amesh-demo") as client:
                print("\ncalls:")
                for agent, data in AGENT_CALLS:
                    if agent not in names:
                        continue
                    started = time.monotonic()
                    task = await client.send(agent, make_message(data=data), timeout=30)
                    ms = (time.monotonic() - started) * 1000
                    ok = task.status.state == TaskState.COMPLETED
                    failures += not ok
                    print(f"- {agent} ({ms:.0f} ms, {task.status.state.value})")
                    _line("input", data)
                    _line("output", task.output())
                for name, data in _workflow_calls(client, mesh):
                    started = time.monotonic()
                    task = await client.send(name, make_message(data=data), timeout=60)
                    ms = (time.monotonic() - started) * 1000
                    ok = task.status.state == TaskState.COMPLETED
                    failures += not ok
                    print(f"- workflow {name} ({ms:.0f} ms, {task.status.state.value})")
                    _line("input", data)
                    _line("output", task.output())
        print("\nmesh stopped: every process exited, ports freed.")
    if failures:
        print(f"{failures} call(s) did not complete")
    return 1 if failures else 0


def _workflow_calls(client: Any, mesh: Mesh) -> list[tuple[str, Any]]:
    """Example workflows to run, taken from the cards of live workflows that declare a demo input."""
    calls = []
    for card in client.cards():
        if card.agent_type != "workflow":
            continue
        definition = card.workflow_definition or {}
        demo = definition.get("demo_input") if isinstance(definition, dict) else None
        if demo is not None:
            calls.append((card.name, demo))
    return calls
