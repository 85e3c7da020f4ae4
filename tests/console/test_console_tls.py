"""The console on the open network, in headless Chromium against a standalone node with TLS on
every port: served over https:// with HSTS, cookies only over TLS, a content security policy
that the console's own pages (charts, htmx, the key-space bar, the live tail over wss://)
never trip, and a sign-in limit that refuses a guessing browser, saying until when.

Chromium trusts the node by the key of its certificate (``--ignore-certificate-errors-spki-list``
with the certificate's public-key hash): any other certificate is still refused.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from playwright.sync_api import expect

from tests.acceptance.certs import Certs
from tests.acceptance.standalone_node import Standalone, running_standalone
from tests.console.conftest import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.slow

FAILURES_MAX = 3


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Standalone]:
    env = certs.env(*certs.issue("node"), MILLRACE_SIGNIN_FAILURES_MAX=str(FAILURES_MAX))
    yield from running_standalone(tmp_path_factory, "console-tls", env)


@pytest.fixture(scope="module")
def browser(node: Standalone) -> Iterator[Any]:
    """Chromium trusting the node's certificate by its public key (and nothing else)."""
    from playwright.sync_api import sync_playwright

    leaf = x509.load_pem_x509_certificate(Path(node.environ["MILLRACE_TLS_CERT_FILE"]).read_bytes())
    spki = leaf.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pin = base64.b64encode(hashlib.sha256(spki).digest()).decode()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[*CHROMIUM_ARGS, f"--ignore-certificate-errors-spki-list={pin}"],
        )
        yield launched
        launched.close()


def watched_page(browser: Any, violations: list[str]) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(30_000)
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    return page


def test_the_console_over_tls_keeps_to_its_policy(browser: Any, node: Standalone) -> None:
    violations: list[str] = []
    page = watched_page(browser, violations)
    answer = page.goto(node.base + "/login/")
    assert answer is not None and answer.ok
    headers = answer.headers
    assert headers["strict-transport-security"].startswith("max-age=31536000")
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert headers["x-frame-options"] == "DENY"
    page.fill("#id_username", "admin")
    page.fill("#id_password", (node.data_dir / "admin-password").read_text().strip())
    page.click("button[type=submit]")
    page.wait_for_url(node.base + "/")
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["sessionid"]["secure"] and cookies["sessionid"]["httpOnly"]
    assert cookies["csrftoken"]["secure"]

    # a stream with events, its pages, and the live tail over wss://
    scope = f"tls{uuid.uuid4().hex[:6]}"
    with node.manager() as manager:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", initial_segments=2)
        writer = manager.create_writer(scope, "st")
        for i in range(10):
            writer.write_event(f"before {i}", routing_key=f"k{i}")
        writer.flush()
        expect(page.locator("h1")).to_have_text("Dashboard")
        for path in ("/cluster/", "/scopes/", f"/scopes/{scope}/streams/",
                     f"/scopes/{scope}/streams/st/", "/audit/"):  # fmt: skip
            page.goto(node.base + path)
            expect(page.locator("h1")).to_be_visible()
        page.goto(node.base + f"/scopes/{scope}/streams/st/")
        expect(page.locator("svg.keyspace .seg")).to_have_count(2)
        page.goto(node.base + f"/scopes/{scope}/streams/st/events")
        expect(page.locator("#events-table tbody tr")).to_have_count(10)
        page.click("#tail-start")
        expect(page.locator("#tail-status")).to_have_text("following")
        for i in range(5):
            writer.write_event(f"live {i}", routing_key="live")
        writer.flush()
        expect(page.locator("#tail-rows")).to_contain_text("live 4")
        writer.close()
    page.goto(node.base + "/")
    page.wait_for_timeout(1500)  # the dashboard's charts draw from their first poll
    assert not violations, violations


def test_a_guessing_browser_is_refused_saying_until_when(browser: Any, node: Standalone) -> None:
    violations: list[str] = []
    page = watched_page(browser, violations)
    for _ in range(FAILURES_MAX - 1):
        page.goto(node.base + "/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "guess")
        page.click("button[type=submit]")
        expect(page.locator(".message.error")).to_contain_text("did not match")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "guess")
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Sign-in refused")
    expect(page.locator("[data-code=too-many-sign-ins]")).to_contain_text(
        f"Too many failed sign-ins ({FAILURES_MAX}) for this user from this address"
    )
    # the right password is refused too, until the lockout is over
    page.goto(node.base + "/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", (node.data_dir / "admin-password").read_text().strip())
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Sign-in refused")
    assert not violations, violations
