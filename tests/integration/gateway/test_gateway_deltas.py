"""Token deltas of a workflow's ``llm`` node reach an HTTP SSE caller of SendStreamingMessage through the gateway
(docs/gateway.md "Streams"), over JSON-RPC and HTTP+JSON, with a2a-sdk's own client.

Real NATS + Valkey, the executor, the built-in agents and the real ``openai`` client against the fake server
(which streams its answer in small chunks).
"""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict

from a2amesh.client import Client
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.integration.executor.test_node_deltas import QUIET, STREAMED
from tests.integration.gateway.test_gateway import collect, message
from tests.support.gateway import sdk_client
from tests.support.waiting import within


def stream_chunks(events: list[pb.StreamResponse]) -> list[tuple[int, bool, str]]:
    """``(position, append, text)`` of each update of the ``stream`` artifact."""
    return [
        (i, ev.artifact_update.append, ev.artifact_update.artifact.parts[0].text)
        for i, ev in enumerate(events)
        if ev.HasField("artifact_update") and ev.artifact_update.artifact.name == "stream"
    ]


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_llm_deltas_reach_an_sse_caller_before_the_final(
    builtins: Any, executor: Any, gateway: Any, client: Client, fake_llm: FakeOpenAIServer, binding: str
) -> None:
    """The llm node's text arrives as appends to the task's ``stream`` artifact, in order and before the final
    event; the final task holds the whole text in ``artifacts[0]``. A workflow without streamingEnabled sends
    no delta."""
    text = "".join(f"word{i} " for i in range(40))
    await builtins(fake_llm.base_url)
    await executor({"streamed": STREAMED, "quiet": QUIET})
    await client.registry.wait_for("streamed", 5)
    url = await gateway()
    fake_llm.script(Reply(text, chunk_size=3, chunk_delay=0.004), Reply("quiet answer", chunk_size=3))

    async with sdk_client(f"{url}/agents/streamed", binding) as c:
        events = await within(collect(c.send_message(message({"text": "write"}))), 30, "the streamed workflow")
    chunks = stream_chunks(events)
    assert chunks, [MessageToDict(e) for e in events]
    assert "".join(t for _, _, t in chunks) == text
    assert [a for _, a, _ in chunks] == [False] + [True] * (len(chunks) - 1)
    assert chunks[-1][0] < len(events) - 1, "a delta came after the final event"
    task_id = events[0].task.id
    assert {e.artifact_update.task_id for e in events if e.HasField("artifact_update")} == {task_id}
    async with sdk_client(f"{url}/agents/streamed", binding, streaming=False) as c:
        whole = await c.get_task(pb.GetTaskRequest(id=task_id))
    assert whole.status.state == pb.TASK_STATE_COMPLETED, whole.status
    assert [a.name for a in whole.artifacts] == ["result"]
    assert MessageToDict(whole.artifacts[0].parts[0])["data"] == {"text": text}

    async with sdk_client(f"{url}/agents/quiet", binding) as c:
        quiet = await within(collect(c.send_message(message({"text": "hush"}))), 30, "the quiet workflow")
    assert not stream_chunks(quiet), [MessageToDict(e) for e in quiet]
    assert fake_llm.requests[1].get("stream") is not True
