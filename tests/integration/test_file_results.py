"""A handler may return a file (a ``Part`` holding bytes or a URL): it is ``artifacts[0]``'s part, over NATS and
over HTTP; bytes above the inline threshold are stored as an artifact the part points at. A workflow whose output
is a node's file result answers with that file part the same way; data shaped like a file reference stays data."""

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
from a2amesh.protocol.vocabulary import RETRY_REQUEST
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.support.gateway import sdk_client
from tests.support.waiting import within

SMALL = b"small file \x00\x01\x02"
MEDIUM = bytes(range(256)) * 3
LARGE = bytes(range(256)) * 16
REPORT_URL = "https://example.com/report.pdf"

FLOW = """
name: fileflow
nodes:
  - {id: f, type: agent, agent_name: files, input: {kind: small}}
  - {id: g, type: agent, agent_name: files, input: {kind: large}}
output_mapping: {file: "{{f.output}}", big: "{{g.output}}", name: "{{f.output.filename}}"}
"""

PASS_FLOWS = {
    kind: f"""
name: pass_{kind}
nodes:
  - {{id: f, type: agent, agent_name: files, input: {{kind: {kind}}}}}
output_mapping: "{{{{f.output}}}}"
"""
    for kind in ("small", "medium", "large", "url", "lookalike")
}
OUTER_FLOW = """
name: outer
nodes:
  - {id: inner, type: workflow, workflow_name: pass_small, input: {}}
output_mapping: "{{inner.output}}"
"""
WORKFLOW_THRESHOLD = 512
"""The executor's inline threshold in these tests: MEDIUM's bytes come inline from the agent (1024) and are
above it, so the workflow stores them."""


async def files(input: dict[str, Any], ctx: Any) -> Any:
    kind = input.get("kind")
    if kind == "small":
        return Part(raw=base64.b64encode(SMALL).decode(), filename="small.bin", media_type="application/octet-stream")
    if kind == "large":
        return Part(raw=base64.b64encode(LARGE).decode(), filename="large.bin", media_type="application/octet-stream")
    if kind == "medium":
        return Part(raw=base64.b64encode(MEDIUM).decode(), filename="medium.bin", media_type="application/octet-stream")
    if kind == "url":
        return Part(url=REPORT_URL, filename="report.pdf", media_type="application/pdf")
    if kind == "lookalike":
        return {
            "raw": base64.b64encode(SMALL).decode(),
            "filename": "small.bin",
            "mediaType": "application/octet-stream",
        }
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
    part = task.result_part()
    assert part is not None
    assert part.data is not None  # a file inside data built around it is data
    assert base64.b64decode(out["raw"]) == SMALL
    assert out["filename"] == "small.bin"
    assert task.output()["name"] == "small.bin"
    big = task.output()["big"]
    assert big["url"].startswith("artifact://")
    assert big["mediaType"] == "application/octet-stream"
    assert "raw" not in big


@pytest.fixture
async def flows(mesh: Client, executor: Any, settings: Settings) -> Client:
    workflow_settings = settings.model_copy(update={"inline_threshold": WORKFLOW_THRESHOLD})
    await executor(
        {f"pass_{kind}": text for kind, text in PASS_FLOWS.items()} | {"outer": OUTER_FLOW}, settings_=workflow_settings
    )
    for name in [*(f"pass_{kind}" for kind in PASS_FLOWS), "outer"]:
        await mesh.registry.wait_for(name, 5)
    return mesh


async def run_flow(client: Client, name: str) -> Any:
    task = await within(client.send(name, make_message(data={})), 20, f"the workflow {name}")
    assert task.status.state == TaskState.COMPLETED, task.status
    return task


async def test_workflow_passes_a_file_through(flows: Client) -> None:
    """A workflow whose output is a node's file result answers with the file part itself: bytes, name, type;
    so does a workflow over that workflow."""
    for name in ("pass_small", "outer"):
        part = (await run_flow(flows, name)).result_part()
        assert part.data is None, (name, part)
        assert base64.b64decode(part.raw) == SMALL, name
        assert (part.filename, part.media_type) == ("small.bin", "application/octet-stream"), name


async def test_workflow_passes_a_file_url_through(flows: Client) -> None:
    """A node's file URL is the workflow's URL part, with the file's name and media type."""
    part = (await run_flow(flows, "pass_url")).result_part()
    assert (part.url, part.filename, part.media_type) == (REPORT_URL, "report.pdf", "application/pdf")
    assert part.data is None
    assert part.raw is None


async def test_workflow_stores_bytes_above_its_threshold(flows: Client, redis: Redis, settings: Settings) -> None:
    """Bytes above the executor's inline threshold are stored as the workflow task's ``result`` artifact and the
    part points at it (named, typed); a file the agent stored is passed on as the agent's URL part."""
    task = await run_flow(flows, "pass_medium")
    part = task.result_part()
    assert part.raw is None
    assert part.url.startswith("artifact://")
    assert task.id in part.url  # the workflow's own task scope, not the agent's
    assert (part.filename, part.media_type) == ("medium.bin", "application/octet-stream")
    store = ArtifactStore(redis, Keys(settings.namespace), retention=3600, max_bytes=10_000_000)
    assert (await store.load_uri(part.url)).content == MEDIUM
    big = (await run_flow(flows, "pass_large")).result_part()
    assert big.url.startswith("artifact://")
    assert task.id not in big.url
    assert (big.filename, big.media_type) == ("large.bin", "application/octet-stream")
    assert (await store.load_uri(big.url)).content == LARGE


async def test_data_shaped_like_a_file_stays_data(flows: Client) -> None:
    """An agent's data output with a file reference's keys is passed through as data, never as a file."""
    task = await run_flow(flows, "pass_lookalike")
    part = task.result_part()
    assert part.raw is None
    assert part.url is None
    assert part.data == {
        "raw": base64.b64encode(SMALL).decode(),
        "filename": "small.bin",
        "mediaType": "application/octet-stream",
    }


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_workflow_file_parts_over_http(flows: Client, gateway: Any, binding: str) -> None:
    """Through the gateway a workflow passing a file through answers with an A2A file part: raw bytes, or a URL,
    named, with the media type; the look-alike data is a data part."""
    url = await gateway()
    got = {}
    for kind in ("small", "url", "lookalike"):
        msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER)
        msg.parts.add().data.struct_value.update({"go": True})
        async with sdk_client(f"{url}/agents/pass_{kind}", binding, streaming=False) as c:
            [only] = [e async for e in c.send_message(pb.SendMessageRequest(message=msg))]
        got[kind] = only.task.artifacts[0].parts[0]
    assert got["small"].WhichOneof("content") == "raw"
    assert got["small"].raw == SMALL
    assert (got["small"].filename, got["small"].media_type) == ("small.bin", "application/octet-stream")
    assert got["url"].WhichOneof("content") == "url"
    assert (got["url"].url, got["url"].filename, got["url"].media_type) == (REPORT_URL, "report.pdf", "application/pdf")
    assert got["lookalike"].WhichOneof("content") == "data"


async def test_retry_reusing_a_file_result_still_passes_the_file(flows: Client) -> None:
    """A retry that reuses a node's file result (``a2amesh retry``) answers with the file part, as the first run
    did: the reused node keeps its file mark."""
    first = await run_flow(flows, "pass_small")
    retry = {"type": RETRY_REQUEST, "execution_id": first.id, "from_node": None}
    task = await within(
        flows.send("pass_small", make_message(data={}, parts=[Part.of_data(retry)])), 20, "the retry of pass_small"
    )
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.id != first.id
    part = task.result_part()
    assert part is not None
    assert part.data is None, part
    assert part.raw is not None, part
    assert base64.b64decode(part.raw) == SMALL
    assert (part.filename, part.media_type) == ("small.bin", "application/octet-stream")
