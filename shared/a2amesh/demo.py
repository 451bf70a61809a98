"""``a2amesh demo``: start the one-machine mesh, call the example agents, print the results, stop."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from a2amesh.client import connect, make_message
from a2amesh.config import Settings
from a2amesh.gateway.settings import GatewaySettings
from a2amesh.ids import nuid
from a2amesh.mesh import Mesh
from a2amesh.protocol import Task, TaskState
from a2amesh.protocol.states import state_word

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


# Example runs of the workflows shipped in workflows/ (order_pipeline shows composition, a map and a switch).
WORKFLOW_CALLS: list[tuple[str, Any]] = [
    (
        "order_pipeline",
        {
            "order_id": "A-1003",
            "total": 49.5,
            "items": [
                {"sku": "tea", "quantity": 5, "unit_price": 5.5},
                {"sku": "mug", "quantity": 1, "unit_price": 12},
                {"sku": "pot", "quantity": 1, "unit_price": 10},
            ],
        },
    ),
    ("restock_poll", {"job": "R-7"}),
]

# The agent-node examples: they run in the built-in agents, which need a model endpoint.
MODEL_CALLS: list[tuple[str, Any]] = [
    ("support_assistant", {"question": "Is order A-9 (2 x tea at 5.0, total 30) valid?"}),
    ("agent_standard", {"text": "How many words are in 'agents publish cards'?", "user": "the demo"}),
    ("measure_text", {"text": "Workflows are agents too."}),
    ("embed_texts", {"texts": ["green tea", "black coffee"]}),
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
            gateway=GatewaySettings(host="127.0.0.1", port=0),
        )
        t0 = time.monotonic()
        async with mesh:
            names = [d.name for _, d in mesh.definitions]
            print(f"mesh up in {time.monotonic() - t0:.1f}s: NATS {mesh.nats_url}, Redis {mesh.redis_url}")
            print(f"agents (one process per replica): {', '.join(names)}")
            async with connect(mesh.effective_settings(), name="a2amesh-demo") as client:
                print("\ncalls:")
                for agent, data in AGENT_CALLS:
                    if agent in names:
                        failures += not await _call(client, agent, agent, data, timeout=30)
                calls, unserved = await _workflow_calls(client, has_workflows)
                failures += unserved
                for name, data in calls:
                    failures += not await _call(client, f"workflow {name}", name, data, timeout=60)
                if settings.llm_base_url and has_workflows:
                    for name, data in MODEL_CALLS:
                        failures += not await _call(client, f"workflow {name}", name, data, timeout=120)
                elif has_workflows:
                    llm_workflows = ", ".join(name for name, _ in MODEL_CALLS)
                    print(
                        f"- skipped the agent-node workflows ({llm_workflows}): they need a model. Run the demo with "
                        "OPENAI_BASE_URL (and A2AMESH_LLM_MODEL, OPENAI_API_KEY) set to run them."
                    )
                print(f"\nthrough the HTTP gateway at {mesh.gateway_url}/agents (A2A JSON-RPC):")
                http_calls = [(a, d) for a, d in AGENT_CALLS[:1] if a in names] + calls[:1]
                for name, data in http_calls:
                    failures += not await _http_call(mesh.gateway_url, name, data, timeout=60)
            if failures:
                log = await asyncio.to_thread(_tail, mesh.log_file)
                print(f"\nlast lines of the mesh log:\n{log}")
        print("\nmesh stopped: every process exited, ports freed.")
    if failures:
        print(f"{failures} call(s) did not complete")
    return 1 if failures else 0


async def _call(client: Any, label: str, name: str, data: Any, *, timeout: float) -> bool:
    """Call one agent or workflow, print what it did; True when it completed."""
    started = time.monotonic()
    task = await client.send(name, make_message(data=data), timeout=timeout)
    ms = (time.monotonic() - started) * 1000
    print(f"- {label} ({ms:.0f} ms, {state_word(task.status.state)})")
    _line("input", data)
    _line("output", task.output())
    return bool(task.status.state == TaskState.COMPLETED)


async def _http_call(base_url: str, name: str, data: Any, *, timeout: float) -> bool:
    """Call one agent or workflow with JSON-RPC ``SendMessage`` over HTTP, as any A2A client would."""
    url = f"{base_url}/agents/{name}/"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": nuid(), "role": "ROLE_USER", "parts": [{"data": data}]}},
    }
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=timeout) as http:
        reply = (await http.post(url, json=body, headers={"A2A-Version": "1.0"})).json()
    ms = (time.monotonic() - started) * 1000
    if "error" in reply:
        print(f"- POST {url} ({ms:.0f} ms): error {reply['error'].get('code')} {reply['error'].get('message')}")
        return False
    task = Task.model_validate(reply["result"]["task"])
    print(f"- POST {url} ({ms:.0f} ms, {state_word(task.status.state)})")
    _line("output", task.output())
    return bool(task.status.state == TaskState.COMPLETED)


def _tail(path: Path | None, lines: int = 25) -> str:
    if path is None:
        return ""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no mesh log)"


async def _workflow_calls(client: Any, has_workflows: bool) -> tuple[list[tuple[str, Any]], int]:
    """The example workflows to run (those of WORKFLOW_CALLS whose card goes live within 20 s),
    and how many never went live."""
    if not has_workflows:
        return [], 0
    calls = []
    unserved = 0
    for name, data in WORKFLOW_CALLS:
        try:
            await client.registry.wait_for(name, 20)
        except TimeoutError:
            print(f"- workflow {name}: not served")
            unserved += 1
            continue
        calls.append((name, data))
    return calls, unserved
