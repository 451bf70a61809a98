"""Helpers for node-handler and LLM-agent tests: node-call messages, node results, in-process LLM agents."""

from __future__ import annotations

from typing import Any

from a2amesh.agent.definition import parse_agent
from a2amesh.agent.llm_agent import LlmAgent
from a2amesh.client import make_message
from a2amesh.config import Settings
from a2amesh.protocol import Message, Part, Task


def node_message(
    value: Any = None,
    *,
    parts: list[Part] | None = None,
    first: bool = True,
    context_id: str | None = None,
    **request: Any,
) -> Message:
    """A workflow node call: the ``workflow_node_request`` control part and the input (a DataPart or ``parts``)."""
    control = Part.of_data(
        {"type": "workflow_node_request", "execution_id": "exec-1", "node_id": "n1", "workflow_name": "wf", **request}
    )
    body = parts if parts is not None else [Part.of_data(value)]
    return make_message(parts=[control, *body] if first else [*body, control], context_id=context_id)


def node_result(task: Task) -> dict[str, Any]:
    """The ``workflow_node_result`` DataPart of a task's final status message."""
    assert task.status.message is not None, f"the final status carries no message (state {task.status.state})"
    for p in task.status.message.parts:
        if isinstance(p.data, dict) and p.data.get("type") == "workflow_node_result":
            return p.data
    raise AssertionError(f"no workflow_node_result in {task.status.message.parts}")


def llm_agent(
    settings: Settings, base_url: str, name: str = "writer", *, llm: dict[str, Any] | None = None, **fields: Any
) -> LlmAgent:
    """An LLM agent whose endpoint is ``base_url`` (the fake server), built as ``a2amesh agent`` builds one."""
    definition = parse_agent({"name": name, "llm": {"model": "fake-model", **(llm or {})}, **fields}, f"{name}.yaml")
    return LlmAgent.from_definition(
        definition,
        settings=settings.model_copy(update={"llm_base_url": base_url}),
        base_dir=None,
        source=f"{name}.yaml",
    )
