"""The base of every DAG node model and retry strategies (SPEC §5.1), shared by the node catalogues.

:mod:`a2amesh.workflow.dag.nodes` holds the orchestration nodes and the ``Node`` union;
:mod:`a2amesh.workflow.dag.agent_nodes` the agent nodes of seed 004.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeAlias

from pydantic import Field, field_validator

from a2amesh.durations import Duration
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.dag.spellings import DefinitionModel, also_accepts, as_list

__all__ = ["Backoff", "NodeBase", "RetryPolicy", "RetryStrategy", "node_type_name"]

RetryPolicy: TypeAlias = Literal["OnFailure", "OnError", "Always"]


class Backoff(DefinitionModel):
    """Exponential backoff between retries (Argo ``retryStrategy.backoff``)."""

    duration: Duration = Field(1.0, description="Delay before the first retry (seconds or 30s, 5m, 1h, 1d).")
    factor: float = Field(2.0, ge=1, description="Multiplier applied to the delay after each retry.")
    max_duration: Duration | None = Field(None, description="Upper bound of any single delay.")


class RetryStrategy(DefinitionModel):
    """When and how often a node is retried (node level over workflow level)."""

    limit: int = Field(3, ge=0, description="Retries after the first attempt (0 = no retry).")
    retry_policy: RetryPolicy = Field(
        "OnFailure",
        description="OnFailure: retry when the callee reported failure; OnError: when the call itself failed "
        "(timeout, transport, JSON-RPC error, redelivery limit); Always: both.",
    )
    backoff: Backoff | None = Field(None, description="Delay between attempts; none means retry at once.")

    def retries_on(self, outcome: Literal["failure", "error"]) -> bool:
        """Whether this policy retries a callee failure (``"failure"``) or a failed call (``"error"``)."""
        if self.retry_policy == "Always":
            return True
        return (self.retry_policy == "OnFailure") == (outcome == "failure")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        if self.backoff is None:
            return 0.0
        seconds = self.backoff.duration * self.backoff.factor ** max(retry - 1, 0)
        if self.backoff.max_duration is not None:
            seconds = min(seconds, self.backoff.max_duration)
        return float(seconds)


class NodeBase(DefinitionModel):
    field_aliases: ClassVar[Mapping[str, str]] = {"dependencies": "depends_on"}

    id: str = Field(min_length=1, description="Unique node id; templates read its output as {{id.output.field}}.")
    depends_on: list[str] = Field(
        default_factory=list,
        description="Nodes that must finish first (alias: dependencies). A node whose dependencies were all "
        "skipped is skipped.",
        json_schema_extra=also_accepts({"type": "string"}),
    )
    when: str | None = Field(None, description="Condition (SPEC §5.3); when false the node is skipped.")

    @field_validator("depends_on", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return as_list(value)

    @classmethod
    def _prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        if isinstance(data.get("type"), str):
            data["type"] = node_type_name(data["type"])
        return data

    @property
    def dependencies(self) -> tuple[str, ...]:
        """Every node this node waits for (``depends_on``, plus ``wait_for`` of a join), deduplicated."""
        return tuple(dict.fromkeys(self.depends_on))

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        """``(field path, value)`` of every field that may hold templates (conditions excluded)."""
        return []

    def condition_fields(self) -> list[tuple[str, str]]:
        """``(field path, condition)`` of every condition of this node."""
        return [("when", self.when)] if self.when is not None else []

    def branch_targets(self) -> list[tuple[str, str]]:
        """``(field path, node id)`` of the nodes this node routes to (switch, conditional, review)."""
        return []

    @property
    def inner_target(self) -> str | None:
        """The node a map or loop runs on each item/iteration, else ``None``."""
        return None


_SEED_TYPES = {
    "agent.llm": "llm",
    "agent.tool_executor": "tools",
    "agent.tool_loop": "tool_loop",
    "agent.prompt": "prompt",
    "agent.embed": "embed",
    "agent.memory.read": "memory_read",
    "agent.memory.write": "memory_write",
    "agent.rag": "rag",
    "agent.image_gen": "image",
}
"""Seed 004's spellings of the agent node types."""


def node_type_name(value: str) -> str:
    """Normalize a node type as written (``humanReview``, ``Human-Review``, ``agent.toolLoop``) to its name."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", value.strip()).replace("-", "_").lower()
    return _SEED_TYPES.get(snake, snake)
