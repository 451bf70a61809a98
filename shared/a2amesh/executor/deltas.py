"""Token deltas of node calls passed on to the workflow's streaming caller (``streaming_enabled``, SPEC §3.5).

A built-in ``llm`` / ``tool_loop`` node called for a streaming caller is asked (``stream_deltas`` in its
``workflow_node_request``) to publish its deltas on the delta subject of the executor's own reply subject;
the relay hears ``delta.{instance}.*`` and republishes each text on the caller's delta subject, as deltas of
the workflow's task (one ``index`` sequence per task). Best effort, as every delta: the final task holds
the whole text.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from a2amesh.bus.nats import Bus, Received, Subscription
from a2amesh.logs import get_logger
from a2amesh.protocol import Message, Part
from a2amesh.protocol.vocabulary import NODE_REQUEST
from a2amesh.worker.deltas import DeltaSink
from a2amesh.workflow.dag.agent_nodes import BUILTIN_AGENTS

__all__ = ["STREAMING_BUILTINS", "DeltaRelay", "with_stream_deltas"]

STREAMING_BUILTINS = frozenset({BUILTIN_AGENTS["llm"], BUILTIN_AGENTS["tool_loop"]})
"""The built-in agents whose token deltas reach a workflow's streaming caller."""

log = get_logger("executor.deltas")


@dataclass
class DeltaRelay:
    """Routes the deltas of this replica's calls (by call id) to the sinks of the workflows' callers."""

    bus: Bus
    instance: str
    _routes: dict[str, DeltaSink] = field(default_factory=dict)
    _subscription: Subscription | None = None
    _subscribing: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def route(self, call_id: str, sink: DeltaSink) -> None:
        """Pass the deltas of the call ``call_id`` to ``sink`` (listening from the first route on)."""
        async with self._subscribing:
            if self._subscription is None:
                subject = self.bus.subjects.delta(self.instance, "*", "*")
                self._subscription = await self.bus.subscribe(subject, self._heard)
        self._routes[call_id] = sink

    def unroute(self, call_id: str) -> None:
        """Stop passing on the deltas of ``call_id`` (its call ended)."""
        self._routes.pop(call_id, None)

    async def close(self) -> None:
        """Stop listening."""
        self._routes.clear()
        if self._subscription is not None:
            subscription, self._subscription = self._subscription, None
            await subscription.unsubscribe()

    async def _heard(self, msg: Received) -> None:
        sink = self._routes.get(msg.subject.rsplit(".", 1)[-1])
        if sink is None:
            return
        try:
            text = json.loads(msg.data).get("text")
            if isinstance(text, str) and text:
                await sink(text)
        except Exception as e:  # deltas are best effort: a bad one is dropped, the final holds the text
            log.debug("executor.delta_dropped", error=str(e) or type(e).__name__)


def with_stream_deltas(message: Message) -> Message:
    """The node call ``message`` asking its agent to publish token deltas (``stream_deltas`` in the control part)."""
    parts = [
        Part.of_data({**part.data, "stream_deltas": True})
        if isinstance(part.data, dict) and part.data.get("type") == NODE_REQUEST
        else part
        for part in message.parts
    ]
    return message.model_copy(update={"parts": parts})
