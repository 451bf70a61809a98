"""The dashboard over the management API in a real browser: stored workflows (restore a version, disable),
and live updates that resume from the last event after the event stream drops."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect

from a2amesh.client import Client, make_message
from a2amesh.errors import A2AMeshError
from tests.browser.conftest import screenshot
from tests.browser.test_dashboard import Gate
from tests.support.refund import pay, propose
from tests.support.waiting import eventually, within


def _definition(agent: str) -> dict[str, Any]:
    return {"name": "stored", "nodes": [{"id": "a", "type": "agent", "agent_name": agent, "input": {"amount": 3}}]}


async def _stored(agent_host: Any, executor: Any, client: Client, url: str) -> None:
    """A workflow kept by the definitions API with two versions (v1 calls propose, v2 pay), served by an executor."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({})
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for agent in ("propose", "pay"):
            r = await http.put("/api/workflows/stored", json=_definition(agent), params={"message": f"calls {agent}"})
            assert r.status_code in (200, 201), r.text

    def serves(agent: str) -> bool:
        card = client.registry.get("stored")
        nodes = (card.workflow_definition or {}).get("nodes", []) if card else []
        return any(n.get("agent_name") == agent for n in nodes)

    await eventually(lambda: serves("pay"), timeout=5, what="the executor to serve version 2")


async def test_restore_a_version_makes_it_the_current_one(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """Restoring v1 from the versions table writes v3 equal to v1: the page shows it, and the mesh serves it."""
    url = await gateway()
    await _stored(agent_host, executor, client, url)
    await page.goto(f"{url}/workflows/stored")
    await expect(page.locator("#workflow-version")).to_have_text("2")
    versions = page.get_by_role("table", name="versions")
    await expect(versions.get_by_role("row").filter(has_text="v2")).to_contain_text("calls pay")
    await versions.get_by_role("button", name="restore v1").click()
    await expect(page.locator("#workflow-version")).to_have_text("3")
    current = versions.get_by_role("row").filter(has_text="v3")
    await expect(current).to_contain_text("restore of version 1")
    await expect(current.get_by_role("cell", name="yes", exact=True)).to_be_visible()
    await expect(page.get_by_role("button", name="restore v3")).to_have_count(0)
    await screenshot(page, "restore")
    await page.get_by_label("from v2").check()
    await page.get_by_label("to v3").check()
    await page.get_by_role("button", name="Compare").click()
    diff = page.get_by_label("differences")
    await expect(diff.locator(".d-del")).to_contain_text(["agent_name: pay"])
    await expect(diff.locator(".d-add")).to_contain_text(["agent_name: propose"])
    done = await within(client.send("stored", {}), 10, "a run of the restored version")
    assert done.artifacts, done
    assert "amount" in str(done.artifacts[0]), done


async def test_disable_a_workflow_takes_it_off_the_mesh(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """Disable: the page says so, the card leaves the agents list, calls fail; enable brings it back."""
    url = await gateway()
    await _stored(agent_host, executor, client, url)
    await page.goto(f"{url}/workflows/stored")
    await expect(page.locator("#workflow-enabled")).to_have_text("yes")
    await page.get_by_role("button", name="Disable stored").click()
    await expect(page.locator("#workflow-enabled")).to_contain_text("no: executors do not serve it")
    await expect(page.get_by_role("form", name="run stored")).to_have_count(0)
    await eventually(lambda: client.registry.get("stored") is None, timeout=5, what="the card to go")
    with pytest.raises(A2AMeshError, match="stored"):
        await within(client.send("stored", {}), 10, "a call of the disabled workflow")
    await page.goto(f"{url}/agents")
    await expect(page.get_by_role("region", name="agent propose")).to_be_visible()
    await expect(page.get_by_role("region", name="agent stored")).to_have_count(0)
    await page.goto(f"{url}/workflows")
    await expect(page.get_by_role("row").filter(has_text="stored")).to_contain_text("no (disabled)")
    await page.get_by_role("link", name="stored", exact=True).click()
    await page.get_by_role("button", name="Enable stored").click()
    await expect(page.locator("#workflow-enabled")).to_have_text("yes")
    await client.registry.wait_for("stored", 5)
    await screenshot(page, "workflow-stored")


async def test_live_list_resumes_after_the_stream_drops_and_misses_nothing(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    """The page's event source is closed; runs start and finish meanwhile; reopened with the last event id,
    the stream replays what was missed (their ids arrive in the first batch) and the rows appear."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await agent_host("gate", Gate())
    await executor({"quick": "name: quick\nnodes:\n  - {id: a, type: agent, agent_name: pay, input: {amount: 1}}\n"})
    await client.registry.wait_for("quick", 5)
    url = await gateway()
    await page.goto(f"{url}/executions")
    await page.wait_for_function("window.a2ameshLive && window.a2ameshLive.source.readyState === 1")
    await page.evaluate("window.notReloaded = true")
    first = await within(client.send("quick", make_message(data={})), 10, "the first run")
    await expect(page.get_by_role("row").filter(has_text=first.id)).to_contain_text("completed")
    await page.wait_for_function("window.a2ameshLive.lastId !== null")
    await page.evaluate("window.a2ameshLive.close(); window.a2ameshLive.received = []")
    missed = [(await within(client.send("quick", make_message(data={})), 10, "a run while closed")).id for _ in "ab"]
    rows = page.get_by_role("table", name="executions")
    for execution_id in missed:  # nothing refreshes the list while the source is closed
        await expect(rows.get_by_role("row").filter(has_text=execution_id)).to_have_count(0)
    await page.evaluate("window.a2ameshLive.open()")
    for execution_id in missed:
        await expect(rows.get_by_role("row").filter(has_text=execution_id)).to_contain_text("completed")
    replayed = await page.evaluate("window.a2ameshLive.received.flatMap(m => m.ids)")
    assert set(missed) <= set(replayed), replayed
    assert await page.evaluate("window.notReloaded === true"), "the page was reloaded"
    assert re.search(r"after=\d+", await page.evaluate("window.a2ameshLive.source.url"))
