"""Interop with Microsoft Agent Framework (``agent-framework-a2a`` 1.0.0b261022, its own virtualenv, run as a
subprocess): its ``A2AAgent`` calls our workflow through our gateway and holds a multi-turn exchange with it, over
JSON-RPC and HTTP+JSON, streamed and blocking. Localhost only; no model is involved (``A2AAgent`` is a client)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from tests.integration.remote.test_interop_adk import asker
from tests.support.interop import SCRIPTS, framework_python
from tests.support.waiting import within

pytestmark = pytest.mark.timeout(600)  # a first install of the Agent Framework virtualenv (see maf_python)


@pytest.fixture(scope="session")
def maf_python() -> str:
    """The Python of the Agent Framework virtualenv (``A2AMESH_MAF_PYTHON``, else ``.venv-maf``, made by
    ``.ci/install-maf``)."""
    return framework_python("A2AMESH_MAF_PYTHON", ".venv-maf", "install-maf")


async def maf_turns(python: str, card_url: str, binding: str, mode: str, *texts: str) -> list[dict[str, Any]]:
    """Run ``maf_client.py``: each text is a turn of one Agent Framework session; the turns it reports."""
    proc = await asyncio.create_subprocess_exec(
        python,
        str(SCRIPTS / "maf_client.py"),
        card_url,
        binding,
        mode,
        *texts,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await within(proc.communicate(), 90, "Agent Framework's client")
    assert proc.returncode == 0, err.decode()[-3000:]
    turns: list[dict[str, Any]] = json.loads(out.decode().splitlines()[-1])["turns"]
    return turns


CHAT = """
name: maf_chat
nodes:
  - {id: ask, type: agent, agent_name: asker, input: "{{workflow.input}}"}
output_mapping: {said: "{{ask.output.greeting}}"}
"""


@pytest.mark.parametrize(("binding", "mode"), [("JSONRPC", "stream"), ("HTTP+JSON", "stream"), ("JSONRPC", "blocking")])
async def test_maf_a2a_agent_holds_a_multi_turn_exchange_with_our_workflow(
    binding: str, mode: str, maf_python: str, agent_host: Any, client: Client, executor: Any, gateway: Any
) -> None:
    """Two turns of one Agent Framework session: the workflow's node asks a question (the workflow pauses,
    INPUT_REQUIRED), which ``A2AAgent`` hands its user as a user-input request; its next turn is sent with the
    paused task's id and the session's context id, continues that task, and the workflow completes with the
    answer: streamed, the output's data artifact (as JSON text) and then the final status message's text."""
    await agent_host("asker", asker)
    await executor({"maf_chat": CHAT})
    await client.registry.wait_for("maf_chat", 5)
    url = await gateway()
    card_url = f"{url}/agents/maf_chat/.well-known/agent-card.json"
    first, second = await maf_turns(maf_python, card_url, binding, mode, "hello", "my name is Ada")

    [question] = first["said"]
    assert any("what is your name?" in t for t in question["asks_user"]), first
    assert first["session"]["task_state"] == "TASK_STATE_INPUT_REQUIRED", first
    [task] = (await client.list_tasks("maf_chat")).tasks
    assert first["session"]["task_id"] == task.id, "the framework keeps the paused task's id"
    assert first["session"]["context_id"] == task.context_id

    assert second["session"] == {**first["session"], "task_state": "TASK_STATE_COMPLETED"}, second
    assert not any(s["asks_user"] for s in second["said"]), second
    answers = [json.loads(text) for s in second["said"] for text in s["texts"]]
    assert answers, second
    assert all(a == {"said": "hello, Ada"} for a in answers), second
    if mode == "stream":  # the answer came as the stream's events: the artifact first, then the final status
        assert [s["event"] for s in second["said"]] == ["TaskArtifactUpdateEvent", "TaskStatusUpdateEvent"], second
        assert question["event"] == "TaskStatusUpdateEvent", first

    [done] = (await client.list_tasks("maf_chat")).tasks
    assert done.id == task.id, "the second turn continued the first turn's task"
    assert done.status.state == TaskState.COMPLETED


REVIEW = """
name: maf_review
nodes:
  - {id: check, type: human_review, prompt: "Go on with {{workflow.input.text}}?", data: "{{workflow.input}}"}
output_mapping: {approved: "{{check.output.text}}"}
"""


async def test_maf_a2a_agent_answers_a_human_review_in_text(
    maf_python: str, client: Client, executor: Any, gateway: Any
) -> None:
    """A ``human_review`` node answered by a client that sends text alone: the framework's user types
    ``approve`` on the paused task and the workflow completes with the reviewed data."""
    await executor({"maf_review": REVIEW})
    await client.registry.wait_for("maf_review", 5)
    url = await gateway()
    card_url = f"{url}/agents/maf_review/.well-known/agent-card.json"
    first, second = await maf_turns(maf_python, card_url, "JSONRPC", "blocking", "refund 30", "approve")
    assert first["session"]["task_state"] == "TASK_STATE_INPUT_REQUIRED", first
    assert second["session"] == {**first["session"], "task_state": "TASK_STATE_COMPLETED"}, second
    [listed] = (await client.list_tasks("maf_review")).tasks
    done = await client.get_task("maf_review", listed.id)
    assert done.status.state == TaskState.COMPLETED
    assert done.output() == {"approved": "refund 30"}
