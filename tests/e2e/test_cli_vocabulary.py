"""One vocabulary on the command line: every verb that prints JSON says the same state words and RFC 3339
UTC times, never A2A's ``TASK_STATE_*``; one exit-code table with and without ``--json`` (a pause is not an
error); id prefixes and ``canceled``/``cancelled`` taken alike (issue 37)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.protocol.states import STATES
from tests.e2e.test_cli import cli

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
WORDS = {*STATES, "pending", "skipped"}

REVIEWED = """
name: reviewed
nodes:
  - {id: first, type: agent, agent_name: vocab_tag, input: {x: "{{workflow.input.x}}"}}
  - id: review
    type: human_review
    depends_on: [first]
    prompt: "Use {{first.output.x}}?"
    data: "{{first.output}}"
    edit_schema: {type: object, required: [x], properties: {x: {type: integer, maximum: 100}}}
  - {id: second, type: agent, agent_name: vocab_tag, depends_on: [review], input: {y: "{{review.output.x}}"}}
output_mapping: {y: "{{second.output.y}}"}
"""

FAILING = """
name: failing
input_schema: {type: object, required: [x], properties: {x: {type: integer}}}
nodes:
  - {id: only, type: agent, agent_name: vocab_tag, input: {x: "{{workflow.input.x}}"}}
"""


def check_vocabulary(value: Any, where: str) -> None:
    """Every ``status``/``state`` is a state word, every time is RFC 3339 UTC, and no A2A state name appears."""
    text = json.dumps(value)
    assert "TASK_STATE_" not in text, f"{where}: an A2A state name in {text[:400]}"
    assert '"canceled"' not in text, f"{where}: 'canceled' in {text[:400]}"

    def walk(v: Any, key: str) -> None:
        if isinstance(v, dict):
            for k, item in v.items():
                walk(item, k)
        elif isinstance(v, list):
            for item in v:
                walk(item, key)
        elif key in ("status", "state") and isinstance(v, str):
            assert v in WORDS, f"{where}: {key}={v!r} is not a state word"
        elif (key.endswith("_at") or key in ("at", "timestamp", "next_fire", "last_fire")) and v is not None:
            assert isinstance(v, str), f"{where}: {key}={v!r} is not a string"
            assert RFC3339_UTC.match(v), f"{where}: {key}={v!r} is not RFC 3339 UTC"

    walk(value, "")


@pytest.fixture
async def mesh(agent_host: Any, executor: Any, client: Client) -> None:
    async def tag(data: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return dict(data)

    await agent_host("vocab_tag", tag)
    await executor({"reviewed": REVIEWED, "failing": FAILING})
    for name in ("reviewed", "failing", "vocab_tag"):
        await client.registry.wait_for(name, 10)


async def test_every_verb_speaks_one_vocabulary_and_one_exit_table(settings: Settings, mesh: None) -> None:
    """run, resume, retry, cancel, runs, show, call, schedules: state words, RFC 3339 UTC, same exit codes."""
    # a pause is not an error, with or without --json
    code, out, err = await cli(settings, "run", "reviewed", "--input", '{"x": 7}')
    assert code == 0, err
    assert "⏸ paused for a review at review" in err
    paused_id = err.split("→ run ", 1)[1].split()[0]
    assert f"a2amesh resume {paused_id} --approve" in err
    code, out, err = await cli(settings, "run", "reviewed", "--input", '{"x": 8}', "--json")
    assert code == 0, err
    paused = json.loads(out)
    check_vocabulary(paused, "run --json (paused)")
    assert paused["status"] == "paused"
    assert paused["review"]["prompt"] == "Use 8?"
    other_paused = paused["execution_id"]

    # show on a paused run: the question, the edit schema and the exact resume command
    code, out, err = await cli(settings, "show", paused_id)
    assert code == 0, err
    assert "question  Use 7?" in out
    assert "edit schema" in out
    assert '"maximum": 100' in out
    assert f"a2amesh resume {paused_id} --approve | --reject [--reason TEXT] | --edit JSON" in out
    code, out, _ = await cli(settings, "show", paused_id[:13], "--json")
    assert code == 0
    shown = json.loads(out)
    check_vocabulary(shown, "show --json (paused)")
    assert (shown["execution_id"], shown["status"]) == (paused_id, "paused")
    assert {n["path"]: n["status"] for n in shown["nodes"]}["review"] == "paused"

    code, out, err = await cli(settings, "resume", paused_id[:13], "--edit", '{"x": 9}', "--json")
    assert code == 0, err
    resumed = json.loads(out)
    check_vocabulary(resumed, "resume --json")
    assert (resumed["status"], resumed["output"]) == ("completed", {"y": 9})

    # a failed run: 1 with and without --json
    code, out, err = await cli(settings, "run", "failing", "--input", '{"x": "bad"}')
    assert code == 1, err
    assert "← failed" in err
    code, out, _ = await cli(settings, "run", "failing", "--input", '{"x": "bad"}', "--json")
    assert code == 1
    failed = json.loads(out)
    check_vocabulary(failed, "run --json (failed)")
    assert failed["status"] == "failed"
    assert "$.x" in failed["error"]
    code, out, _ = await cli(settings, "show", failed["execution_id"])
    assert code == 0  # show has shown it; the run's outcome is in what it printed
    code, out, _ = await cli(settings, "show", failed["execution_id"], "--json")
    assert code == 0
    shown = json.loads(out)
    check_vocabulary(shown, "show --json (failed)")
    assert shown["duration_ms"] >= 0
    assert shown["finished_at"] >= shown["started_at"]

    code, out, err = await cli(settings, "retry", paused_id, "--json")
    assert code == 0, err  # the retry reuses every output before the end, the review's too
    check_vocabulary(json.loads(out), "retry --json")

    # cancel says cancelled; the listing takes either spelling and prefixes
    code, out, err = await cli(settings, "cancel", other_paused[:13])
    assert (code, out.strip()) == (0, f"{other_paused}: cancelled"), err
    for spelling in ("cancelled", "canceled", "TASK_STATE_CANCELED", "CANCELLED"):
        code, out, err = await cli(settings, "runs", "--status", spelling, "--json")
        assert code == 0, err
        rows = json.loads(out)
        check_vocabulary(rows, f"runs --status {spelling}")
        assert [r["execution_id"] for r in rows] == [other_paused], spelling
    code, _, err = await cli(settings, "runs", "--status", "sleeping")
    assert code == 2
    assert "--status: 'sleeping' is not one of running, paused, completed, failed, cancelled" in err
    code, out, _ = await cli(settings, "runs", "--json")
    rows = json.loads(out)
    check_vocabulary(rows, "runs --json")
    assert {r["status"] for r in rows} == {"completed", "failed", "cancelled"}
    assert all(r["started_at"] for r in rows)

    code, out, err = await cli(settings, "call", "vocab_tag", "--data", '{"x": 1}', "--json")
    assert code == 0, err
    called = json.loads(out)
    check_vocabulary(called, "call --json")
    assert (called["status"], called["output"]) == ("completed", {"x": 1})
    code, out, err = await cli(settings, "call", "vocab_tag", "--data", '{"x": 1}')
    assert code == 0
    assert "← completed" in err
    assert "TASK_STATE" not in err

    for verb in (("schedules",), ("workflows", "list"), ("llm-agents", "list"), ("agents",)):
        code, out, err = await cli(settings, *verb, "--json")
        assert code == 0, (verb, err)
        check_vocabulary(json.loads(out), " ".join(verb) + " --json")
