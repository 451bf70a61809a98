"""Browser fixtures: Debian's chromium driven by Playwright (never ``playwright install``, which downloads)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "img"


@pytest.fixture(scope="session")
def chromium() -> str:
    """The system chromium's path."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run .ci/install-chromium"
    return CHROMIUM


@pytest.fixture
async def page(chromium: str) -> AsyncIterator[Page]:
    """A fresh browser page (laptop-sized, in a time zone other than UTC, so local times show)."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=ARGS)
        context = await browser.new_context(viewport={"width": 1366, "height": 860}, timezone_id="Europe/Paris")
        context.set_default_timeout(10_000)
        try:
            yield await context.new_page()
        finally:
            await context.close()
            await browser.close()


async def screenshot(page: Page, name: str) -> None:
    """Save ``docs/img/dashboard-{name}.png`` when ``A2AMESH_SCREENSHOTS=1`` (the docs' pictures)."""
    if os.environ.get("A2AMESH_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.wait_for_function("![...document.querySelectorAll('time')].some(t => t.textContent.endsWith('Z'))")
        await page.screenshot(path=str(SCREENSHOTS / f"dashboard-{name}.png"), full_page=True)
