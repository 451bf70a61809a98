"""Handler of the ``tck`` agent: the behaviour each A2A TCK scenario asks for, picked by messageId prefix.

Our agents' result contract (SPEC §3.5) makes ``artifacts[0]`` a text part for text output, a data part for JSON
output, or the file part a handler returns; every call is a task, so the scenario that wants a bare Message is
not served.

Called as the node of the ``tck_flow`` workflow, the agent gets a messageId of the workflow's own (SPEC §3.3),
so it reads the TCK's from the workflow's task: the latest message of its history (the one that started the
run, or the one that resumed it).
"""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

from a2amesh import Part
from a2amesh.errors import InputRequired

STREAM_TEXT = {
    "tck-stream-001": "Stream hello from TCK",
    "tck-stream-003": "Stream task lifecycle",
    "tck-stream-ordering-001": "Ordered output",
    "tck-stream-artifact-text": "Streamed text content",
}


def _long_run_seconds() -> float:
    """The resubscribe scenario's task lives for twice the TCK's streaming timeout (default 2 s)."""
    return 2 * float(os.environ.get("TCK_STREAMING_TIMEOUT") or 2.0)


FLOW = "tck_flow"


async def _scenario(ctx: Any) -> str:
    """The TCK's messageId of this call: the message's own, or the latest caller's message of ``tck_flow``."""
    if ctx.execution_id is None:
        return str(ctx.message.message_id)
    task = await ctx.client.get_task(FLOW, ctx.execution_id)
    return str(task.history[-1].message_id) if task.history else ""


async def tck(input: Any, ctx: Any) -> Any:
    """Answer one TCK message."""
    message_id = await _scenario(ctx)
    if message_id.startswith("tck-input-required"):
        raise InputRequired("the TCK asks for more input")
    if message_id.startswith("tck-artifact-file-url"):
        return Part(url="https://example.com/output.txt", filename="output.txt", media_type="text/plain")
    if message_id.startswith("tck-artifact-file"):
        raw = base64.b64encode(b"Generated file content").decode()
        return Part(raw=raw, filename="output.txt", media_type="text/plain")
    if message_id.startswith("tck-artifact-data"):
        return {"key": "value", "count": 42}
    if message_id.startswith("tck-artifact-text"):
        return "Generated text content"
    if message_id.startswith("test-resubscribe-message-id"):
        await ctx.emit_status("working")
        await asyncio.sleep(_long_run_seconds())
        return "done"
    if message_id.startswith("tck-stream-artifact-chunked"):
        await ctx.emit_status("working")
        return "chunk-1 chunk-2"
    for prefix, text in STREAM_TEXT.items():
        if message_id.startswith(prefix):
            await ctx.emit_status("working")
            return text
    if message_id.startswith("tck-stream-002"):
        return "completed"
    if message_id.startswith("tck-complete-task"):
        return "Hello from TCK"
    return f"Unhandled messageId prefix: {message_id}"
