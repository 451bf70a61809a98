"""A handler may return a file (a ``Part`` holding bytes or a URL): it is ``artifacts[0]``'s part, over NATS and
over HTTP; bytes above the inline threshold are stored as an artifact the part points at."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from a2a.types import a2a_pb2 as pb

from a2amesh import Part
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.support.gateway import sdk_client
from tests.support.waiting import within

SMALL = b"small file \x00\x01\x02"
LARGE = bytes(range(256)) * 16
REPORT_URL = "https://example.com/report.pdf"

FLOW = """
name: fileflow
nodes:
  - {id: f, type: agent, agent_name: files, input: {kind: small}}
  - {id: g, type: agent, agent_name: files, input: {kind: large}}
output_mapping: {file: "{{f.output}}", big: "{{g.output}}"}
"""


async def files(input: dict[str, Any], ctx: Any) -> Any:
    kind = input.get("kind")
    if kind == "small":
        return Part(raw=base64.b64encode(SMALL).decode(), filename="small.bin", media_type="application/octet-stream")
    if kind == "large":
        return Part(raw=base64.b64encode(LARGE).decode(), filename="large.bin", media_type="application/octet-stream")
    if kind == "url":
        return Part(url=REPORT_URL, filename="report.pdf", media_type="application/pdf")
    return Part.of_text("just text")


@pytest.fixture
async def mesh(agent_host: Any, client: Client, settings: Settings) -> Client:
    await agent_host("files", files, settings=settings.model_copy(update={"inline_threshold": 1024}))
    await client.registry.wait_for("files", 5)
    return client


async def call(client: Client, kind: str) -> Any:
    task = await within(client.send("files", make_message(data={"kind": kind})), 15, f"the {kind} file")
    assert task.status.state == TaskState.COMPLETED, task.status
    return task


async def test_small_file_is_inline(mesh: Client) -> None:
    """A small file comes back as the result part itself: its bytes, name and media type."""
    part = (await call(mesh, "small")).result_part()
    assert base64.b64decode(part.raw) == SMALL
    assert part.filename == "small.bin"
    assert part.media_type == "application/octet-stream"


async def test_large_file_is_stored_and_referenced(mesh: Client, redis: Redis, settings: Settings) -> None:
    """A file above the inline threshold is stored as the ``result`` artifact; the part is its URL, and the
    stored bytes are the file's."""
    task = await call(mesh, "large")
    part = task.result_part()
    assert part.raw is None
    assert part.url.startswith("artifact://")
    assert part.filename == "large.bin"
    assert part.media_type == "application/octet-stream"
    store = ArtifactStore(redis, Keys(settings.namespace), retention=3600, max_bytes=10_000_000)
    stored = await store.load_uri(part.url)
    assert stored.content == LARGE


async def test_url_file_and_text_part(mesh: Client) -> None:
    """A file by URL is passed on as given; a text Part is plain text output."""
    part = (await call(mesh, "url")).result_part()
    assert (part.url, part.filename, part.media_type) == (REPORT_URL, "report.pdf", "application/pdf")
    assert (await call(mesh, "text")).output() == "just text"


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_file_part_over_http(mesh: Client, gateway: Any, binding: str) -> None:
    """Through the gateway the file is an A2A file part (raw bytes), named, with its media type."""
    url = await gateway()
    msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER)
    msg.parts.add().data.struct_value.update({"kind": "small"})
    async with sdk_client(f"{url}/agents/files", binding, streaming=False) as c:
        [only] = [e async for e in c.send_message(pb.SendMessageRequest(message=msg))]
    part = only.task.artifacts[0].parts[0]
    assert part.WhichOneof("content") == "raw"
    assert part.raw == SMALL
    assert part.filename == "small.bin"
    assert part.media_type == "application/octet-stream"


async def test_file_output_of_a_workflow_node(mesh: Client, executor: Any) -> None:
    """A node's file result reaches the workflow as the part's JSON form; a large one as its reference (the
    bytes are never loaded into the workflow's state)."""
    await executor({"fileflow": FLOW})
    await mesh.registry.wait_for("fileflow", 5)
    task = await within(mesh.send("fileflow", make_message(data={})), 20, "the workflow")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()["file"]
    assert base64.b64decode(out["raw"]) == SMALL
    assert out["filename"] == "small.bin"
    big = task.output()["big"]
    assert big["url"].startswith("artifact://")
    assert big["mediaType"] == "application/octet-stream"
    assert "raw" not in big
