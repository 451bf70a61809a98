"""The dashboard in a real browser, over a real gateway, executor, agents, NATS and Valkey: one test per user story."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.protocol import TaskState
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.schedules import ScheduleStore
from tests.browser.conftest import screenshot
from tests.support.executors import write_workflows
from tests.support.refund import REFUND, pay, propose
from tests.support.waiting import eventually, within

PIPELINE = """
name: pipeline
nodes:
  - {id: fetch, type: agent, agent_name: propose, input: {amount: "{{workflow.input.amount}}"}}
  - {id: gate, type: agent, agent_name: gate, depends_on: [fetch], input: "{{fetch.output}}"}
  - {id: audit, type: agent, agent_name: pay, depends_on: [fetch], input: "{{fetch.output}}"}
  - {id: settle, type: agent, agent_name: pay, depends_on: [gate, audit], input: "{{gate.output}}"}
output_mapping: {paid: "{{settle.output.paid}}"}
"""


LEDGER = """
name: ledger
nodes:
  - {id: fetch, type: agent, agent_name: propose, input: {amount: "{{workflow.input.amount}}"}}
  - {id: post, type: agent, agent_name: books, depends_on: [fetch], input: "{{fetch.output}}"}
output_mapping: {posted: "{{post.output.paid}}"}
"""


NIGHTLY = """
name: nightly
execution_mode: interval
schedule: "daily@09:00"
nodes:
  - {id: fetch, type: agent, agent_name: propose, input: {amount: 1}}
"""


BATCH = """
name: batch
nodes:
  - {id: items, type: map, node: each, items: [1, 2, 3]}
  - {id: each, type: agent, agent_name: shaky, input: {n: "{{_map_item}}"}, retry_strategy: {limit: 2}}
"""


class Shaky:
    """Fails the first call for item 2, then answers."""

    def __init__(self) -> None:
        self.failed = False

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if input["n"] == 2 and not self.failed:
            self.failed = True
            raise RuntimeError("item 2 hiccup")
        return {"n": input["n"]}


OUTER = """
name: outer
nodes:
  - {id: first, type: agent, agent_name: propose, input: {amount: "{{workflow.input.amount}}"}}
  - {id: inner, type: workflow, workflow_name: ledger, depends_on: [first], input: {amount: "{{first.output.amount}}"}}
"""


class Books:
    """An agent that fails until the test fixes it."""

    def __init__(self) -> None:
        self.broken = True

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if self.broken:
            raise RuntimeError("ledger offline")
        return {"paid": input["amount"]}


class Gate:
    """An agent that holds each call until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.open = asyncio.Event()

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.entered.set()
        await self.open.wait()
        return {"amount": input["amount"]}


async def _mesh(agent_host: Any, executor: Any, client: Client, gate: Gate | None = None) -> None:
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    if gate is not None:
        await agent_host("gate", gate)
    await executor({"refund": REFUND, "pipeline": PIPELINE, "ledger": LEDGER})
    await client.registry.wait_for("refund", 5)
    await client.registry.wait_for("pipeline", 5)


@pytest.fixture
def gate() -> Iterator[Gate]:
    """A held agent call, let go at teardown (so nothing waits on it while the mesh stops)."""
    held = Gate()
    yield held
    held.open.set()


def _node(page: Page, node_id: str) -> Any:
    return page.get_by_role("img", name="graph of the workflow").locator(f'a[data-node="{node_id}"]')


async def test_overview_lists_live_agents(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """The overview shows the live agents and workflows from their cards, with versions and replicas."""
    await _mesh(agent_host, executor, client)
    url = await gateway()
    await page.goto(url + "/")
    agents = page.get_by_role("table").filter(has_text="propose")
    await expect(agents.get_by_role("link", name="propose", exact=True)).to_be_visible()
    await expect(agents.get_by_role("link", name="pay", exact=True)).to_be_visible()
    await expect(page.get_by_role("link", name="refund", exact=True)).to_be_visible()
    await expect(page.get_by_role("link", name="pipeline", exact=True)).to_be_visible()
    await page.get_by_role("navigation").get_by_role("link", name="Agents").click()
    await expect(page.get_by_role("region", name="agent propose")).to_contain_text("1 replica alive")
    await screenshot(page, "agents")


async def test_new_run_appears_in_the_list_without_reload(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page, gate: Gate
) -> None:
    """A run started elsewhere appears in the executions list, and its status changes, without a reload."""
    await _mesh(agent_host, executor, client, gate)
    url = await gateway()
    await page.goto(url + "/executions")
    await expect(page.get_by_role("table", name="executions")).to_contain_text("No executions match.")
    await page.evaluate("window.notReloaded = true")
    call = await client.dispatch("pipeline", make_message(data={"amount": 7}))
    row = page.get_by_role("row").filter(has_text=call.task_id)
    await expect(row).to_contain_text("running")
    gate.open.set()
    await expect(row).to_contain_text("completed")
    assert await page.evaluate("window.notReloaded === true"), "the page was reloaded"
    task = await within(call.result(), 10, "the pipeline's result")
    assert task.status.state == TaskState.COMPLETED
    await screenshot(page, "executions")


async def test_detail_shows_every_node_as_the_run_progresses(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page, gate: Gate
) -> None:
    """The detail page's graph and timeline show every node, each with its live state, as the run goes on."""
    await _mesh(agent_host, executor, client, gate)
    url = await gateway()
    call = await client.dispatch("pipeline", make_message(data={"amount": 7}))
    await within(gate.entered.wait(), 10, "the gate node's call")
    await page.goto(f"{url}/executions/{call.task_id}")
    await expect(page.locator("#execution-status")).to_have_text("running")
    for node_id, state in (("fetch", "completed"), ("gate", "running"), ("audit", "completed"), ("settle", "pending")):
        await expect(_node(page, node_id)).to_have_attribute("data-state", state)
        await expect(_node(page, node_id)).to_contain_text(node_id)
    timeline = page.get_by_role("list", name="timeline")
    await expect(timeline.get_by_role("listitem").filter(has_text="gate")).to_contain_text("running")
    await expect(timeline.get_by_role("listitem").filter(has_text="settle")).to_contain_text("pending")
    gate.open.set()
    await expect(page.locator("#execution-status")).to_have_text("completed")
    for node_id in ("fetch", "gate", "audit", "settle"):
        await expect(_node(page, node_id)).to_have_attribute("data-state", "completed")
        await expect(timeline.get_by_role("listitem").filter(has_text=node_id)).to_contain_text("completed")
    await expect(page.get_by_text('"paid": 7').first).to_be_visible()
    await screenshot(page, "execution")
    await _node(page, "settle").click()
    await expect(page).to_have_url(re.compile(r"#node-settle$"))
    await page.get_by_role("link", name="pipeline", exact=True).click()
    await expect(page.get_by_role("heading", name="Workflow pipeline")).to_be_visible()
    for node_id in ("fetch", "gate", "audit", "settle"):
        await expect(_node(page, node_id)).to_have_attribute("data-state", "not run")
    await screenshot(page, "workflow")


async def _paused(client: Client, amount: int) -> str:
    task = await within(client.send("refund", {"amount": amount}), 10, "the paused refund")
    assert task.status.state == TaskState.INPUT_REQUIRED, task.status
    return task.id


async def _status(client: Client, execution_id: str) -> str:
    task = await client.get_task("refund", execution_id)
    return str(task.status.state.value)


async def test_review_inbox_approve_edit_and_reject(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """From the inbox: approve resumes a run; an invalid edit shows the error in place; a valid edit resumes;
    reject (with a reason) fails the run with it."""
    await _mesh(agent_host, executor, client)
    url = await gateway()
    approved, edited, rejected = [await _paused(client, amount) for amount in (30, 40, 50)]
    await page.goto(url + "/reviews")
    for execution_id in (approved, edited, rejected):
        await expect(page.get_by_role("region", name=f"review of {execution_id}")).to_contain_text("Refund")
    await screenshot(page, "reviews")
    await page.get_by_role("navigation").get_by_role("link", name="Overview").click()
    waiting = page.get_by_role("region", name="Waiting for a human")
    await expect(waiting).to_contain_text(approved[:12])
    extra = await _paused(client, 60)  # a live refresh of the overview: the new paused run appears
    await expect(waiting).to_contain_text(extra[:12])
    await expect(waiting.locator("time").first).not_to_have_text(re.compile(r"Z$"))  # shown in the browser's zone
    await client.cancel_task("refund", extra)
    await screenshot(page, "overview")
    await page.get_by_role("navigation").get_by_role("link", name="Reviews").click()

    review = page.get_by_role("region", name=f"review of {approved}")
    await review.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("region", name=f"review of {approved}")).to_have_count(0)
    await expect(page.get_by_role("region", name=f"review of {edited}")).to_be_visible()

    review = page.get_by_role("region", name=f"review of {edited}")
    await review.get_by_text("Edit before approving").click()
    await review.get_by_label("amount").fill("500")
    await review.get_by_role("button", name="Send the edit").click()
    await expect(review.get_by_role("alert")).to_contain_text("$.amount: 500 is greater than the maximum of 100")
    await review.get_by_label("amount").fill("20")
    await review.get_by_role("button", name="Send the edit").click()
    await expect(page.get_by_role("region", name=f"review of {edited}")).to_have_count(0)

    review = page.get_by_role("region", name=f"review of {rejected}")
    await review.get_by_label("Reason (optional)").fill("not eligible")
    await review.get_by_role("button", name="Reject").click()
    await expect(page.get_by_text("No execution is waiting for a review.")).to_be_visible()

    assert await _status(client, approved) == "TASK_STATE_COMPLETED"
    assert await _status(client, edited) == "TASK_STATE_COMPLETED"
    assert await _status(client, rejected) == "TASK_STATE_FAILED"
    await page.goto(f"{url}/executions/{edited}")
    await expect(page.get_by_text('"paid": 20').first).to_be_visible()
    await page.goto(f"{url}/executions/{rejected}")
    await expect(page.locator("#execution-status")).to_have_text("failed")
    await expect(page.get_by_text("not eligible").first).to_be_visible()


async def test_cancel_a_running_execution(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page, gate: Gate
) -> None:
    """Cancel on a running execution's page stops it; the page shows it cancelled without a reload."""
    await _mesh(agent_host, executor, client, gate)
    url = await gateway()
    call = await client.dispatch("pipeline", make_message(data={"amount": 7}))
    await within(gate.entered.wait(), 10, "the gate node's call")
    await page.goto(f"{url}/executions/{call.task_id}")
    await page.get_by_role("button", name="Cancel execution").click()
    await expect(page.locator("#execution-status")).to_have_text("cancelled")
    task = await within(call.result(), 10, "the cancelled run's final")
    assert task.status.state == TaskState.CANCELED


async def test_login_is_required_when_keys_are_configured(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """With API keys, every page redirects to /login; a wrong key is refused; the right one opens the page."""
    await _mesh(agent_host, executor, client)
    url = await gateway(api_keys=parse_api_keys("ops=s3cret-key"))
    await page.goto(url + "/executions?status=paused")
    await expect(page).to_have_url(re.compile(r"/login\?next="))
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    await screenshot(page, "login")
    await page.get_by_label("API key").fill("wrong")
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("alert")).to_contain_text("that key is not valid")
    await page.get_by_label("API key").fill("s3cret-key")
    await page.get_by_role("button", name="Log in").click()
    await expect(page).to_have_url(re.compile(r"/executions\?status=paused$"))
    await expect(page.get_by_role("heading", name="Executions")).to_be_visible()
    cookies = await page.context.cookies()
    [key] = [c for c in cookies if c["name"] == "a2amesh_key"]
    assert key["httpOnly"]
    assert key["sameSite"] == "Strict"
    status = await page.evaluate(
        "fetch('/executions/x/cancel', {method: 'POST', body: new URLSearchParams({csrf: 'forged'})})"
        ".then(r => r.status)"
    )
    assert status == 403, "an action without this browser's CSRF token was not refused"
    await page.get_by_role("button", name="Log out").click()
    await expect(page).to_have_url(re.compile(r"/login$"))


async def test_retry_a_failed_execution_from_a_node(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """A failed run shows its failed node and error; Retry from that node opens a new run that reuses the rest."""
    books = Books()
    await agent_host("books", books)
    await _mesh(agent_host, executor, client)
    await client.registry.wait_for("ledger", 5)
    url = await gateway()
    failed = await within(client.send("ledger", {"amount": 9}), 10, "the failing run")
    assert failed.status.state == TaskState.FAILED
    await page.goto(f"{url}/executions/{failed.id}")
    await expect(page.locator("#execution-status")).to_have_text("failed")
    await expect(_node(page, "post")).to_have_attribute("data-state", "failed")
    await expect(_node(page, "fetch")).to_have_attribute("data-state", "completed")
    await expect(page.get_by_text("ledger offline").first).to_be_visible()
    books.broken = False
    await page.get_by_label("Retry from").select_option("post")
    await page.get_by_role("button", name="Retry").click()
    await expect(page).not_to_have_url(re.compile(failed.id))
    await expect(page.locator("#execution-status")).to_have_text("completed")
    await expect(_node(page, "post")).to_have_attribute("data-state", "completed")
    await expect(page.get_by_text('"posted": 9').first).to_be_visible()


async def test_run_a_workflow_from_its_page(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """The workflow page's Run form starts an execution with the typed input and opens it; bad JSON is refused."""
    await _mesh(agent_host, executor, client)
    url = await gateway()
    await page.goto(f"{url}/workflows/refund")
    form = page.get_by_role("form", name="run refund")
    await form.get_by_label("Input (JSON)").fill('{"amount": ')
    await form.get_by_role("button", name="Run refund").click()
    await expect(page.get_by_role("alert")).to_contain_text("the JSON is not valid")
    await form.get_by_label("Input (JSON)").fill('{"amount": 12}')
    await form.get_by_role("button", name="Run refund").click()
    await expect(page).to_have_url(re.compile(r"/executions/[0-9a-f-]+$"))
    await expect(page.locator("#execution-status")).to_have_text("paused")
    await expect(page.get_by_role("region", name="Waiting for a review")).to_contain_text("Refund 12?")


async def test_pause_and_resume_a_schedule(
    agent_host: Any, executor: Any, client: Client, redis: Redis, settings: Settings, gateway: Any, page: Page
) -> None:
    """A scheduled workflow's page lists its schedule with the next fire time; pause and resume it from there."""
    await agent_host("propose", propose)
    await executor({"nightly": NIGHTLY})
    await client.registry.wait_for("nightly", 5)
    schedules = ScheduleStore(redis, Keys(settings.namespace))
    await eventually(lambda: schedules.get("nightly/main"), timeout=10, what="the executor to register the schedule")
    url = await gateway()
    await page.goto(f"{url}/workflows/nightly")
    row = page.get_by_role("table", name="schedules").get_by_role("row").filter(has_text="nightly/main")
    await expect(row).to_contain_text("active")
    await expect(row.locator("time")).to_have_count(1)
    await row.get_by_role("button", name="Pause").click()
    await expect(row).to_contain_text("paused")
    await expect(row.locator("time")).to_have_count(0)
    await row.get_by_role("button", name="Resume").click()
    await expect(row).to_contain_text("active")
    await expect(row.locator("time")).to_have_count(1)


async def test_map_items_and_retries_show_on_the_timeline(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """Each map item is its own timeline row under the map; a retried item says which attempt it is on; the
    graph counts the target's instances."""
    await agent_host("shaky", Shaky())
    await executor({"batch": BATCH})
    await client.registry.wait_for("batch", 5)
    done = await within(client.send("batch", {}), 20, "the batch run")
    assert done.status.state == TaskState.COMPLETED, done.status
    url = await gateway()
    await page.goto(f"{url}/executions/{done.id}")
    rows = page.get_by_role("list", name="timeline").get_by_role("listitem")
    await expect(rows.and_(page.locator('[data-node="each"]'))).to_have_count(3)
    retried = rows.filter(has_text="(attempt 2)")
    await expect(retried).to_have_count(1)
    await expect(retried).to_contain_text("completed")
    bars = retried.locator(".bar")
    await expect(bars).to_have_count(2)
    await expect(bars.nth(0)).to_have_attribute("data-attempt", "1")
    await expect(bars.nth(0)).to_have_attribute("title", re.compile(r"^attempt 1: failed: .*item 2 hiccup"))
    await expect(bars.nth(1)).to_have_attribute("title", "attempt 2: completed")
    await expect(rows.and_(page.locator('[data-node="each"]')).locator(".bar")).to_have_count(4)
    await expect(_node(page, "each")).to_contain_text("×3")
    await expect(_node(page, "items")).to_have_attribute("data-state", "completed")
    await screenshot(page, "map-retry")


async def test_sub_workflow_execution_is_linked_and_expandable(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """A node that called a workflow expands to the sub-execution's timeline and links to its page."""
    books = Books()
    books.broken = False
    await agent_host("books", books)
    await agent_host("propose", propose)
    await executor({"outer": OUTER, "ledger": LEDGER})
    await client.registry.wait_for("outer", 5)
    done = await within(client.send("outer", {"amount": 4}), 20, "the outer run")
    assert done.status.state == TaskState.COMPLETED, done.status
    url = await gateway()
    await page.goto(f"{url}/executions/{done.id}")
    await page.get_by_text("sub-workflow ledger").click()
    sub = page.get_by_role("list", name=re.compile(r"^timeline of "))
    await expect(sub.get_by_role("listitem").filter(has_text="post")).to_contain_text("completed")
    await expect(sub.get_by_role("listitem").filter(has_text="fetch")).to_contain_text("completed")
    await page.get_by_role("link", name=re.compile(r"^open execution ")).click()
    await expect(page.get_by_role("heading", name=re.compile(r"^Execution "))).to_be_visible()
    await expect(page.get_by_role("link", name="ledger", exact=True)).to_be_visible()
    await expect(page.get_by_text('"posted": 4').first).to_be_visible()


async def test_compare_two_versions_of_a_workflow(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page, tmp_path: Path
) -> None:
    """A workflow changed under a running executor has two versions; the diff shows what changed."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    folder = write_workflows(
        tmp_path / "defs",
        {"ver": "name: ver\nnodes:\n  - {id: a, type: agent, agent_name: propose, input: {amount: 1}}\n"},
    )
    await executor(folder, reload_interval=0.2)
    first = await client.registry.wait_for("ver", 5)
    await within(client.send("ver", {}), 10, "a run of the first version")
    old = str((first.workflow_definition or {})["digest"])
    write_workflows(
        folder, {"ver": "name: ver\nnodes:\n  - {id: a, type: agent, agent_name: pay, input: {amount: 2}}\n"}
    )

    def changed() -> str | None:
        card = client.registry.get("ver")
        digest = str((card.workflow_definition or {}).get("digest")) if card else old
        return digest if digest != old else None

    new = await eventually(changed, timeout=10, what="the executor to serve the changed definition")
    url = await gateway()
    await page.goto(f"{url}/workflows/ver")
    versions = page.get_by_role("table", name="versions")
    await expect(versions.get_by_role("row").filter(has_text=new[:12])).to_contain_text("yes")
    await expect(versions.get_by_role("row").filter(has_text=old[:12])).to_contain_text("no")
    await page.get_by_label(f"from {old[:12]}").check()
    await page.get_by_label(f"to {new[:12]}").check()
    await page.get_by_role("button", name="Compare").click()
    diff = page.get_by_label("differences")
    await expect(diff.locator(".d-del")).to_contain_text(["agent_name: propose"])
    await expect(diff.locator(".d-add")).to_contain_text(["agent_name: pay"])
    await screenshot(page, "diff")


CHAT = json.dumps(
    {
        "name": "chat",
        "entrypointNodeId": "talk",
        "nodes": [{"id": "talk", "nodeType": "AGENT", "nodeName": "talk", "agentId": "talker"}],
        "edges": [
            {
                "id": "e1",
                "sourceNodeId": "talk",
                "targetNodeId": "talk",
                "conditionType": "CONDITIONAL",
                "conditionValue": "again",
            },
            {
                "id": "e2",
                "sourceNodeId": "talk",
                "targetNodeId": None,
                "conditionType": "CONDITIONAL",
                "conditionValue": "END",
            },
        ],
    }
)


class Talker:
    """Asks for one more turn, then ends."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.calls += 1
        return {"next": "again" if self.calls == 1 else "END", "message": f"turn {self.calls}"}


async def test_graph_workflow_shows_start_end_and_its_cycle(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """A seed-000 graph run: START, the node visited twice (its self-loop drawn) and END, all completed."""
    await agent_host("talker", Talker())
    await executor({"chat.json": CHAT})
    await client.registry.wait_for("chat", 5)
    done = await within(client.send("chat", make_message("hi")), 15, "the graph run")
    assert done.status.state == TaskState.COMPLETED, done.status
    url = await gateway()
    await page.goto(f"{url}/executions/{done.id}")
    for node_id in ("START", "talk", "END"):
        await expect(_node(page, node_id)).to_have_attribute("data-state", "completed")
    await expect(_node(page, "talk")).to_contain_text("×2")
    graph = page.get_by_role("img", name="graph of the workflow")
    await expect(graph.locator("path.edge.back")).to_have_count(1)
    await expect(graph.get_by_text("again", exact=True)).to_be_visible()
