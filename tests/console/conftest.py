"""Fixtures of the console's end-to-end tests: a real standalone node, and headless Chromium
(Debian's ``chromium`` package, ``/usr/bin/chromium``) driven by Playwright through that system
browser; Playwright never downloads one. ``bash scripts/dev.sh test`` installs the package."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.standalone_node import Standalone, running_standalone

CHROMIUM = os.environ.get("MILLRACE_CHROMIUM", "/usr/bin/chromium")
#: The flags a headless Chromium needs on a machine with no network but loopback.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
#: Where screenshots of the main pages go (``docs/screenshots`` to refresh the README's).
SCREENSHOTS = os.environ.get("MILLRACE_SCREENSHOT_DIR", "")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One browser per module. Not per session: Playwright's sync API keeps an event loop
    running in this thread while it is open, which the asyncio tests after it cannot share."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: `bash scripts/dev.sh test` installs Debian's chromium "
            "(or set MILLRACE_CHROMIUM to a Chromium binary)"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A standalone node for the module's tests (embedded defaults, fast policy rounds)."""
    yield from running_standalone(tmp_path_factory, "console", {"MILLRACE_WATERMARK_PERIOD_S": "2"})


def sign_in(chromium: Any, node: Standalone, user: str, password: str) -> Any:
    """A new browser page signed in to the node's console as ``user``."""
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(30_000)
    page.goto(node.base + "/")
    assert "/login/" in page.url  # the console asks who you are first
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(node.base + "/")
    return page


def screenshot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=False)


def message(page: Any) -> Any:
    return page.locator(".messages .message").first
