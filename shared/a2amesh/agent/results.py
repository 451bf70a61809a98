"""The result contract's size rule (SPEC §3.5) for an agent's outcome: an output above the inline threshold is
stored as the artifact ``result`` and travels as its URL."""

from __future__ import annotations

import dataclasses

from a2amesh.agent.context import TaskOutcome
from a2amesh.protocol import TaskState
from a2amesh.store.artifacts import ArtifactScope, ArtifactStore
from a2amesh.worker.results import RESULT_ARTIFACT, encoded_size, url_part

__all__ = ["spill_large_output"]


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
