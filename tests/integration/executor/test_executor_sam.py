"""SAM's own example workflows (../shared/compat/sam, levels 1–7) run unchanged with Python stand-in agents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from tests.support.waiting import within

COMPAT = Path(__file__).resolve().parents[3].parent / "shared" / "compat" / "sam"
calls: list[str] = []


def agent(name: str, fn: Any) -> tuple[str, Any]:
    async def handler(input: Any, ctx: Any) -> Any:
        calls.append(name)
        return fn(input)

    return name, handler


def classify(v: float) -> str:
    return "small" if v < 10 else "medium" if v < 100 else "large"


def operation(i: dict[str, Any]) -> Any:
    if i["mode"] == "failure":
        raise RuntimeError("simulated failure")
    return {"result": "operation completed", "status": "success"}


STAND_INS = dict(
    [
        agent("DataDoubler", lambda i: {"doubled_value": i["value"] * 2}),
        agent("ValueFormatter", lambda i: {"message": f"The final result is: {i['value']}"}),
        agent("NumberSquarer", lambda i: {"squared_value": i["value"] ** 2}),
        agent("NumberIncrementer", lambda i: {"incremented_value": i["value"] + 1}),
        agent("NumberAdder", lambda i: {"sum": i["value1"] + i["value2"]}),
        agent("ValueClassifier", lambda i: {"category": classify(i["value"]), "value": i["value"]}),
        agent("SmallValueHandler", lambda i: {"result": i["value"] * 10, "handler": "small"}),
        agent("MediumValueHandler", lambda i: {"result": i["value"] * 2, "handler": "medium"}),
        agent("LargeValueHandler", lambda i: {"result": i["value"] / 2, "handler": "large"}),
        agent(
            "ItemProcessor",
            lambda i: {"item_id": i["item_id"], "original_value": i["value"], "doubled_value": i["value"] * 2},
        ),
        agent(
            "StatusChecker",
            lambda i: {
                "iteration": i["iteration"],
                "ready": i["iteration"] >= i.get("max_iterations", 1) - 1,
                "status": "checking",
            },
        ),
        agent("DataTransformer", lambda i: {"original": i["value"], "transformed": i["value"] + 10}),
        agent(
            "SummaryGenerator",
            lambda i: {
                "summary": f"Value {i['original']} transformed to {i['transformed']} "
                f"(difference: {i['transformed'] - i['original']})",
                "original": i["original"],
                "transformed": i["transformed"],
                "difference": i["transformed"] - i["original"],
            },
        ),
        agent("OperationExecutor", operation),
        agent("SuccessNotifier", lambda i: {"notification": "Workflow completed successfully", "type": "success"}),
        agent(
            "FailureAlerter", lambda i: {"alert": "Workflow failed - check logs", "type": "failure", "severity": "high"}
        ),
        agent("CleanupService", lambda i: {"cleanup": "Resources cleaned up", "timestamp": "now"}),
    ]
)


@pytest.fixture
async def sam(agent_host: Any, executor: Any, client: Client) -> Client:
    calls.clear()
    for name, handler in STAND_INS.items():
        await agent_host(name, handler)
    await executor(COMPAT)
    for name in ("SimpleSequentialWorkflow", "ErrorHandlingWorkflow", "WorkflowCompositionParent"):
        await client.registry.wait_for(name, 10)
    return client


async def run(client: Client, workflow: str, data: Any, timeout: float = 20) -> Any:
    task = await within(client.send(workflow, data), timeout, f"{workflow} to finish")
    return task


async def test_sam_levels_1_to_7(sam: Client) -> None:
    """Levels 1–7 of SAM's examples give the results their descriptions promise."""
    assert COMPAT.is_dir(), f"the compatibility corpus must be beside the repository at {COMPAT}"
    task = await run(sam, "SimpleSequentialWorkflow", {"value": 21})
    assert task.output() == {"message": "The final result is: 42", "doubled_value": 42}

    task = await run(sam, "ParallelExecutionWorkflow", {"value": 3})
    assert task.output() == {"sum": 13, "squared": 9, "incremented": 4}

    for value, expected in ((5, (50, "small")), (50, (100, "medium")), (500, (250, "large"))):
        task = await run(sam, "ConditionalBranchingWorkflow", {"value": value})
        assert task.output() == {"result": expected[0], "handler": expected[1], "category": expected[1]}

    items = [{"id": f"i{n}", "value": n} for n in range(7)]
    task = await run(sam, "MapIterationWorkflow", {"items": items})
    assert task.output() == {
        "results": [{"item_id": f"i{n}", "original_value": n, "doubled_value": 2 * n} for n in range(7)]
    }

    task = await run(sam, "LoopPollingWorkflow", {"max_iterations": 3})
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"final_iteration": 2, "final_status": "checking", "ready": True}

    task = await run(sam, "WorkflowCompositionParent", {"value": 5})
    assert task.output() == {
        "summary": "Value 5 transformed to 15 (difference: 10)",
        "original": 5,
        "transformed": 15,
        "difference": 10,
    }

    calls.clear()
    task = await run(sam, "ErrorHandlingWorkflow", {"mode": "success"})
    assert task.status.state == TaskState.COMPLETED
    assert task.output() == {"result": "operation completed", "status": "success"}
    assert calls == ["OperationExecutor", "SuccessNotifier", "CleanupService"]
    calls.clear()
    task = await run(sam, "ErrorHandlingWorkflow", {"mode": "failure"})
    assert task.status.state == TaskState.FAILED
    assert calls == ["OperationExecutor", "FailureAlerter", "CleanupService"]
