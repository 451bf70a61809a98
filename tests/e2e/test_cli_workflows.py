"""``a2amesh workflows …`` and ``a2amesh executor DIR`` against the definitions store, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from tests.e2e.test_cli import cli
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.processes import REPO, ProcessFactory, write_agent
from tests.support.waiting import eventually, within

FLOW = "name: flow\nnodes:\n  - {id: a, type: agent, agent_name: cli_echo, input: {v: VALUE}}\n"


async def test_workflows_verbs_round_trip(settings: Settings, tmp_path: Path) -> None:
    """apply (created, unchanged, updated), list, get, versions, diff, restore, delete; bad files exit 2."""
    assert (await cli(settings, "init"))[0] == 0
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "flow.yaml").write_text(FLOW.replace("VALUE", "1"))
    (folder / "2nchat.json").write_text((REPO / "workflows" / "2nchat.json").read_text())

    code, out, err = await cli(settings, "workflows", "apply", str(folder), "--json")
    assert code == 0, err
    assert sorted((i["id"], i["outcome"], i["version"]) for i in json.loads(out)) == [
        ("2nChat", "created", 1),
        ("flow", "created", 1),
    ]
    code, out, _ = await cli(settings, "workflows", "apply", str(folder / "flow.yaml"))
    assert (code, out.splitlines()[0]) == (0, "flow: unchanged (version 1)")
    assert "warning: nodes[a].agent_name" in out
    (folder / "flow.yaml").write_text(FLOW.replace("VALUE", "2"))
    code, out, _ = await cli(settings, "workflows", "apply", str(folder / "flow.yaml"))
    assert (code, out.splitlines()[0]) == (0, "flow: updated (version 2)")

    code, out, _ = await cli(settings, "workflows", "list", "--json")
    listed = {w["id"]: w for w in json.loads(out)}
    assert (listed["flow"]["version"], listed["2nChat"]["format"]) == (2, "graph")
    code, out, _ = await cli(settings, "workflows", "get", "flow", "--version", "1", "--json")
    assert json.loads(out)["definition"]["nodes"][0]["input"] == {"v": 1}
    code, out, _ = await cli(settings, "workflows", "diff", "flow", "1")
    assert code == 1
    assert "-    v: 1" in out
    assert "+    v: 2" in out
    code, out, _ = await cli(settings, "workflows", "restore", "flow", "1")
    assert (code, out.strip()) == (0, "flow: version 1 restored as version 3")
    code, out, _ = await cli(settings, "workflows", "versions", "flow", "--json")
    versions = json.loads(out)
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert versions[0]["digest"] == versions[2]["digest"]
    assert all(v["author"].startswith("cli") for v in versions)
    code, out, _ = await cli(settings, "workflows", "delete", "flow")
    assert code == 0
    code, out, err = await cli(settings, "workflows", "get", "flow")
    assert code == 2
    assert "workflow 'flow' not found" in err

    (folder / "bad.yaml").write_text("name: bad\nnodes:\n  - {id: a, type: agent, agent_name: x, timout: 1}\n")
    code, out, err = await cli(settings, "workflows", "apply", str(folder / "bad.yaml"))
    assert code == 2
    assert "nodes[a].timout" in err
    assert "Traceback" not in err


async def test_executor_applies_its_folder_and_serves_the_store(
    settings: Settings, client: Client, processes: ProcessFactory, tmp_path: Path
) -> None:
    """`a2amesh executor DIR` on a new namespace puts DIR into the store and serves the store: a workflow
    applied later from elsewhere is served, and a deleted one goes although its file stays."""
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "flow.yaml").write_text(FLOW.replace("VALUE", "1"))
    await processes.start("executor", str(folder))
    await client.registry.wait_for("flow", 20)
    await processes.start("agent", str(write_agent(tmp_path, "cli_echo", "count")))
    await client.registry.wait_for("cli_echo", 20)
    code, out, _ = await cli(settings, "workflows", "list", "--json")
    assert [(w["id"], w["version"]) for w in json.loads(out)] == [("flow", 1)]

    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "later.yaml").write_text(FLOW.replace("flow", "later").replace("VALUE", "7"))
    code, _, err = await cli(settings, "workflows", "apply", str(other / "later.yaml"))
    assert code == 0, err
    await client.registry.wait_for("later", 5)
    task = await within(client.send("later", make_message(data={})), 15, "a call of the applied workflow")
    assert task.output()["a"]["n"] == 1

    code, _, err = await cli(settings, "workflows", "delete", "flow")
    assert code == 0, err
    await eventually(lambda: client.registry.get("flow") is None, timeout=5, what="the deleted workflow's card to go")
    assert (folder / "flow.yaml").exists()


async def test_llm_host_serves_an_agent_applied_with_the_cli(
    settings: Settings, client: Client, processes: ProcessFactory, fake_llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    """`a2amesh llm-agents apply FILE` stores an LLM agent; the `a2amesh llm-host` process serves it at once."""
    assert (await cli(settings, "init"))[0] == 0
    host = await processes.start("llm-host", env={"OPENAI_BASE_URL": fake_llm.base_url})
    fake_llm.script("Hello from the pool")
    agent = tmp_path / "greeter.yaml"
    agent.write_text("name: greeter\nllm:\n  model: fake-model\n  system_prompt: Greet.\n")
    code, out, err = await cli(settings, "llm-agents", "apply", str(agent))
    assert (code, out.strip()) == (0, "greeter: created (version 1)"), err
    await client.registry.wait_for("greeter", 10)
    task = await within(client.send("greeter", "hi"), 15, "the stored LLM agent's answer")
    assert task.output() == "Hello from the pool"
    code, out, _ = await cli(settings, "llm-agents", "list", "--json")
    assert [(a["id"], a["format"]) for a in json.loads(out)] == [("greeter", "llm")]
    assert host.returncode is None
