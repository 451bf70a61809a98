"""Handler of the ``tck`` agent: the behaviour each A2A TCK scenario asks for, picked by messageId prefix.

Our agents' result contract (SPEC §3.5) makes ``artifacts[0]`` a text part for text output, a data part for JSON
output, or the file part a handler returns; every call is a task, so the scenario that wants a bare Message is
not served.
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


async def tck(input: Any, ctx: Any) -> Any:
    """Answer one TCK message."""
    message_id: str = ctx.message.message_id
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
