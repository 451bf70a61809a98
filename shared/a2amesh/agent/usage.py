"""Token usage of one task: per model call and in total (``urn:a2amesh:ext:usage:v1``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Usage"]


@dataclass
class Usage:
    """Token counts of one task, as the endpoint reported them.

    Attributes:
        prompt_tokens: total prompt tokens of every call.
        completion_tokens: total completion tokens of every call.
        total_tokens: total tokens of every call.
        calls: one entry per model call: ``{model, purpose, prompt_tokens, completion_tokens, total_tokens}``.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self, *, model: str, purpose: str, prompt_tokens: int, completion_tokens: int, total_tokens: int | None = None
    ) -> None:
        """Record one model call."""
        total = prompt_tokens + completion_tokens if total_tokens is None else total_tokens
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.total_tokens += total
        self.calls.append(
            {
                "model": model,
                "purpose": purpose,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": total,
            }
        )

    def __bool__(self) -> bool:
        return bool(self.calls)

    def to_json(self) -> dict[str, Any]:
        """The usage object of ``Task.metadata["urn:a2amesh:ext:usage:v1"]`` and ``workflow_node_result.usage``."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "calls": [dict(c) for c in self.calls],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage:
        """Rebuild from :meth:`to_json` (e.g. from a checkpoint)."""
        if not data:
            return cls()
        return cls(
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            total_tokens=int(data.get("total_tokens", 0)),
            calls=[dict(c) for c in data.get("calls", [])],
        )

    def restore(self, other: Usage) -> None:
        """Replace these counts with ``other``'s (in place, so holders of this object see them)."""
        self.prompt_tokens = other.prompt_tokens
        self.completion_tokens = other.completion_tokens
        self.total_tokens = other.total_tokens
        self.calls = [dict(c) for c in other.calls]
