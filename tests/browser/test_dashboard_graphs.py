"""The dashboard's graphs read well in a real browser (chromium): edge labels never overlap on any shipped
workflow, nodes show their names (ids on hover), edges to a missing node dangle and are marked; a review
answered says so; a workflow and its executions name the definition by one hash (issue 37)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, expect

from a2amesh.client import Client
from a2amesh.protocol import TaskState
from tests.support.processes import REPO
from tests.support.refund import REFUND, pay, propose
from tests.support.waiting import within

BOXES = """() => [...document.querySelectorAll('svg .elabel')].map(g => {
  const r = g.querySelector('rect').getBoundingClientRect(), t = g.querySelector('text').getBoundingClientRect();
  return {text: g.textContent, x: r.x, y: r.y, w: r.width, h: r.height, tx: t.x, tw: t.width};
})"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
    )


async def test_edge_labels_never_overlap_on_the_shipped_workflows(
    executor: Any, client: Client, gateway: Any, page: Page, tmp_path: Path
) -> None:
    folder = tmp_path / "shipped"
    shutil.copytree(REPO / "workflows", folder)
    names = {"2nchat.json": "2nChat", "2nchat_with_search.json": "2nChatWithSearch"}
    workflows = [names.get(p.name, p.stem) for p in sorted(folder.iterdir()) if p.suffix in (".yaml", ".json")]
    await executor(folder)
    for name in workflows:
        await client.registry.wait_for(name, 10)
    url = await gateway()
    checked = 0
    for name in workflows:
        await page.goto(f"{url}/workflows/{name}")
        await expect(page.get_by_role("img", name="graph of the workflow")).to_be_visible()
        boxes = await page.evaluate(BOXES)
        for i, a in enumerate(boxes):
            assert a["tw"] <= a["w"] + 0.5, f"{name}: the label {a['text']!r} is wider than its box"
            for b in boxes[i + 1 :]:
                assert not _overlap(a, b), f"{name}: the labels {a['text']!r} and {b['text']!r} overlap"
        checked += len(boxes)
    assert checked > 20, checked

    await page.goto(f"{url}/workflows/2nChat")
    router = page.locator('svg [data-node="node-uuid-1"]')
    await expect(router).to_contain_text("Router")
    await expect(router.locator("title")).to_contain_text("Router (id node-uuid-1)")
    missing = page.locator('svg [data-node="node-uuid-6"]')
    await expect(missing).to_have_attribute("data-state", "missing")
    await expect(missing).to_contain_text("not defined")
    await expect(page.locator("svg path.edge.dangling")).to_have_count(3)
    await expect(page.locator("svg .elabel.dangling")).to_have_count(3)
    # nothing is cut at the picture's edge: every label and node lies inside the SVG
    inside = await page.evaluate("""() => {
      const svg = document.querySelector('svg[aria-label="graph of the workflow"]').getBoundingClientRect();
      return [...document.querySelectorAll('svg .elabel, svg .node')].every(e => {
        const r = e.getBoundingClientRect();
        return r.left >= svg.left - 0.5 && r.right <= svg.right + 0.5
          && r.top >= svg.top - 0.5 && r.bottom <= svg.bottom + 0.5;
      });
    }""")
    assert inside, "a node or label is cut at the edge of the picture"


async def test_an_answered_review_is_confirmed_and_one_hash_names_the_definition(
    agent_host: Any, executor: Any, client: Client, gateway: Any, page: Page
) -> None:
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({})
    url = await gateway()
    async with httpx.AsyncClient(base_url=url) as http:  # a stored workflow: its document has a digest of its own
        r = await http.post("/api/workflows", content=REFUND, headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
    await client.registry.wait_for("refund", 10)
    paused = [await within(client.send("refund", {"amount": n}), 10, "a paused refund") for n in (5, 6)]
    assert all(t.status.state == TaskState.INPUT_REQUIRED for t in paused)
    await page.goto(url + "/reviews")
    review = page.get_by_role("region", name=f"review of {paused[0].id}")
    await review.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("region", name=f"review of {paused[0].id}")).to_have_count(0)
    notices = page.locator("#notices")
    await expect(notices).to_contain_text(f"Approved: execution {paused[0].id} resumes")
    review = page.get_by_role("region", name=f"review of {paused[1].id}")
    await review.get_by_role("button", name="Reject").click()
    await expect(page.get_by_text("No execution is waiting for a review.")).to_be_visible()
    await expect(notices).to_contain_text(f"Rejected: execution {paused[1].id} resumes")
    await expect(notices).to_contain_text("Approved")  # the first confirmation stays

    await page.goto(f"{url}/executions/{paused[0].id}")
    digest = await page.locator("#execution-digest").text_content()
    await page.goto(f"{url}/workflows/refund")
    assert await page.locator("#workflow-digest").text_content() == digest
    assert digest
    assert len(digest) == 12
