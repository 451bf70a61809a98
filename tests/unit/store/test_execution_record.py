"""ExecutionRecord reads the stored exec hash and writes it back unchanged (the Lua scripts read it by name)."""

from __future__ import annotations

import pytest

from a2amesh.store.executions import ExecutionRecord

# Captured from real runs (tests/integration/executor/test_execution_intake.py) on real NATS + Valkey.
DAG_RUN = {
    "usage": '{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}',
    "status": "completed",
    "context_id": "u6dX6PRDSBxiqTmB1ijmn3",
    "task_id": "138fa714-4b71-5646-bcb5-0a05152054ea",
    "call_depth": "0",
    "input": '{"v": 1}',
    "finished": "1795613719062",
    "workflow": "once",
    "reused_from": "",
    "digest": "299d2822173031a942eeac8926924b61f6f2c7cc5b311d3e5edf9ffa30969326",
    "error": "",
    "final_published": "1",
    "epoch": "1",
    "created": "1795613719048",
    "output": '{"a": {"echo": {}}}',
    "updated": "1795613719063",
    "reply": '{"reply_to":"t5291902e.a2a.v1.reply.e0anN2d9UWtzXT5ZxKqHT2.e2vXnzgBrZMbNJvCDYP5P7",'
    '"request_id":"e2vXnzgBrZMbNJvCDYP5P7","streaming":false,"node_request":null,"headers":{}}',
}
SCHEDULED_RUN = {
    "input": '{"v": 1}',
    "status": "completed",
    "call_depth": "0",
    "fire": "1767258000",
    "context_id": "ki8HY2JrTMvgcLj7qwg2K0",
    "task_id": "sched:once:main:1767258000",
    "usage": '{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}',
    "error": "",
    "schedule": "once/main",
    "digest": "299d2822173031a942eeac8926924b61f6f2c7cc5b311d3e5edf9ffa30969326",
    "reused_from": "",
    "workflow": "once",
    "finished": "1795613719200",
    "final_published": "1",
    "output": '{"a": {"echo": {}}}',
    "epoch": "1",
    "created": "1795613719186",
    "updated": "1795613719201",
    "reply": '{"reply_to":null,"request_id":null,"streaming":false,"node_request":null,"headers":{}}',
}
GRAPH_RUN = {
    "usage": "{}",
    "status": "completed",
    "context_id": "fzY8bCjqqmHUfqGe3DZmn5",
    "task_id": "d01e2b27-b262-5ab8-87a0-ed95326b7bb6",
    "call_depth": "0",
    "input": '{"text": "hi"}',
    "finished": "1795613719811",
    "workflow": "talk",
    "reused_from": "",
    "digest": "9937cf0fc794131def6cc7d9f8a5806b5446743464de04db824f578ded5da17e",
    "error": "",
    "final_published": "1",
    "epoch": "1",
    "created": "1795613719801",
    "output": '"done"',
    "updated": "1795613719812",
    "reply": '{"reply_to":"t305ecbfa.a2a.v1.reply.hULc8h0j5mpk3KhWozujH7.4opo2AicRoqQddkLdKVdb0",'
    '"request_id":"4opo2AicRoqQddkLdKVdb0","streaming":false,"node_request":null,"headers":{}}',
}
WITH_UNKNOWN = {
    **DAG_RUN,
    "status": "paused",
    "cancel": "1",
    "review": '{"prompt": "ok?"}',
    "resumer": "ns.a2a.v1.reply.x.y",
    "a_future_field": "kept as stored",
    "epoch": "not a number",
    "created": "",
}


@pytest.mark.parametrize(
    "raw", [DAG_RUN, SCHEDULED_RUN, GRAPH_RUN, WITH_UNKNOWN], ids=["dag", "scheduled", "graph", "unknown"]
)
def test_stored_fields_round_trip_unchanged(raw: dict[str, str]) -> None:
    """A record read and written back must not change a field the Lua scripts or listings read."""
    assert ExecutionRecord.from_fields(raw).to_fields() == raw


def test_fields_read_typed() -> None:
    """The typed view reads what the executor decides on: status, epoch, flags, schedule."""
    record = ExecutionRecord.from_fields(SCHEDULED_RUN)
    assert (record.status, record.epoch, record.final_published, record.cancel) == ("completed", 1, True, False)
    assert (record.schedule, record.fire, record.call_depth) == ("once/main", 1767258000, 0)
    odd = ExecutionRecord.from_fields(WITH_UNKNOWN)
    assert (odd.cancel, odd.epoch, odd.created, odd.resumer) == (True, 0, None, "ns.a2a.v1.reply.x.y")
    assert odd.extra["a_future_field"] == "kept as stored"
