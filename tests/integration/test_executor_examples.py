"""The example workflows in workflows/ run end to end with the example agents in agent_cards/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from a2amesh.agent.definition import load_agent_file
from a2amesh.client import Client
from a2amesh.protocol import TaskState
from a2amesh.workflow.loader import LoadedWorkflow, load_file
from tests.support.waiting import within

REPO = Path(__file__).resolve().parents[2]
AGENTS = REPO / "agent_cards"
WORKFLOWS = REPO / "workflows"

ORDER = {
    "order_id": "A-1",
    "total": 49.5,
    "items": [
        {"sku": "tea", "quantity": 5, "unit_price": 5.5},
        {"sku": "mug", "quantity": 1, "unit_price": 12},
        {"sku": "pot", "quantity": 1, "unit_price": 10},
    ],
}


@pytest.fixture
async def examples(agent_host: Any, executor: Any, client: Client) -> Client:
    sys.path.insert(0, str(AGENTS))
    try:
        for path in sorted(AGENTS.glob("*.yaml")):
            definition = load_agent_file(path)
            if definition.handler is None:
                continue
            module_name, _, attr = definition.handler.partition(":")
            module = __import__(module_name)
            await agent_host(definition.name, getattr(module, attr), input_schema=definition.input_schema)
    finally:
        sys.path.remove(str(AGENTS))
    await executor(WORKFLOWS)
    for name in ("order_pipeline", "notify_customer", "restock_poll"):
        await client.registry.wait_for(name, 10)
    return client


def test_examples_use_every_node_type() -> None:
    """Together the example workflows use every node type."""
    types: set[str] = set()
    for path in WORKFLOWS.glob("*.yaml"):
        for workflow in load_file(path):
            if isinstance(workflow, LoadedWorkflow):
                types.update(node.type for node in workflow.definition.nodes)
    assert types == {"agent", "workflow", "switch", "conditional", "map", "fork", "join", "loop", "human_review"}


async def test_order_pipeline_composes_maps_and_switches(examples: Client) -> None:
    """order_pipeline: a map feeding a switch, then a sub-workflow with a fork and a join."""
    task = await within(examples.send("order_pipeline", ORDER), 20, "order_pipeline")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()
    assert out["valid"] is True
    assert out["tier"] == "bulk"
    assert [line["line_total"] for line in out["lines"]] == [27.5, 12.0, 10.0]
    assert out["notified"] == ["email", "sms"]
    bad = {**ORDER, "total": 1}
    task = await within(examples.send("order_pipeline", bad), 20, "the rejected order")
    assert task.status.state == TaskState.COMPLETED
    assert task.output()["valid"] is False
    assert task.output()["tier"] is None


async def test_restock_poll_loops_until_ready(examples: Client) -> None:
    """restock_poll: the loop stops when the job is ready and the exit handler runs."""
    task = await within(examples.send("restock_poll", {"job": "R-7"}), 20, "restock_poll")
    assert task.output() == {"job": "R-7", "ready": True, "checks": 3, "stopped_reason": "condition_false"}
