"""The result contract's size rule (SPEC §3.5): outputs above the inline threshold travel as artifact URLs."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from a2amesh.agent.context import TaskOutcome
from a2amesh.protocol import Part, TaskState
from a2amesh.store.artifacts import ArtifactMeta, ArtifactScope, ArtifactStore

__all__ = ["RESULT_ARTIFACT", "encoded_size", "spill_large_output", "url_part"]

RESULT_ARTIFACT = "result"
"""The name under which the host stores an output too large to send inline."""


def encoded_size(output: Any) -> int:
    """Bytes the output takes inline: UTF-8 text for a string, compact JSON otherwise."""
    if isinstance(output, str):
        return len(output.encode("utf-8"))
    return len(json.dumps(output, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))


def url_part(meta: ArtifactMeta) -> Part:
    """The URL part that stands for an artifact in a result: its URI, with ``metadata: {size, sha256}``."""
    return Part(
        url=meta.uri,
        media_type=meta.media_type,
        filename=meta.name,
        metadata={"size": meta.size, "sha256": meta.sha256},
    )


async def spill_large_output(
    outcome: TaskOutcome,
    *,
    store: ArtifactStore,
    scope: ArtifactScope,
    user: str | None,
    threshold: int,
) -> TaskOutcome:
    """Store an output above ``threshold`` bytes as the artifact ``result`` and point ``artifacts[0]`` at it.

    Outcomes that already carry a ``result_part``, carry no output, or did not complete are returned as
    they are.
    """
    if outcome.result_part is not None or outcome.output is None:
        return outcome
    if outcome.state not in (TaskState.COMPLETED, TaskState.INPUT_REQUIRED):
        return outcome
    if encoded_size(outcome.output) <= threshold:
        return outcome
    meta = await store.save(scope, RESULT_ARTIFACT, outcome.output, user=user)
    return dataclasses.replace(outcome, result_part=url_part(meta))
