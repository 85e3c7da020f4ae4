"""The console's Security page through Django (no browser): what it shows to every role, and
its changes, which need the admin role and are audited."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from admin_ui import security
from controller_app.access.roles import grant
from controller_app.access.tokens import token_for
from controller_app.models import AuditEntry
from millrace.kernel.claims import TokenKeys, fingerprint
from millrace.kernel.config import TlsSettings
from tests.acceptance.certs import Certs

pytestmark = pytest.mark.django_db


def browser(role: str) -> tuple[Client, Any]:
    user = get_user_model().objects.create_user(f"{role}{uuid.uuid4().hex[:6]}", password="pw")
    grant(user, role)  # type: ignore[arg-type]
    client = Client()
    client.force_login(user)
    return client, user


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TokenKeys:
    """The page's token secrets, on a keyring of the test's own."""
    found = TokenKeys("seed-secret-of-the-security-page-tests", tmp_path / "keyring")
    monkeypatch.setattr(security, "token_keys", lambda: found)
    return found


def test_every_role_sees_the_state_and_no_secret(keys: TokenKeys) -> None:
    viewer, _ = browser("viewer")
    token = token_for(get_user_model().objects.create_user("erin"))
    page = viewer.get("/security/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "TLS is <strong>off</strong>" in text
    assert fingerprint(keys.signing) in text and keys.signing not in text
    assert f"{token[:6]}…" in text and token not in text
    assert "Nobody is refused now." in text


def test_the_certificate_and_its_end_are_shown_with_tls_on(
    keys: TokenKeys, tmp_path: Path, settings: Any
) -> None:
    certs = Certs(tmp_path / "certs")
    settings.MILLRACE_TLS = TlsSettings.from_env(certs.env(*certs.issue("node")))
    viewer, _ = browser("viewer")
    text = viewer.get("/security/").content.decode()
    assert "serves <strong>HTTPS and WSS</strong>" in text
    assert "127.0.0.1, localhost" in text and "valid until" in text


def test_the_changes_need_the_admin_role(keys: TokenKeys) -> None:
    operator, _ = browser("operator")
    signing = keys.signing
    refused = operator.post("/security/token-secret/rotate", {"overlap": "60"})
    assert refused.status_code == 403
    assert keys.signing == signing
    assert AuditEntry.objects.filter(action="token-secret.rotate", result="refused").exists()


def test_an_admin_rotates_the_secret_and_tokens_and_unlocks_a_sign_in(keys: TokenKeys) -> None:
    admin, _ = browser("admin")
    old = keys.signing
    answer = admin.post("/security/token-secret/rotate", {"overlap": "90"}, follow=True)
    assert keys.signing != old
    assert "verifies 90 s more" in answer.content.decode()
    assert f"<code>{fingerprint(old)}</code>" in answer.content.decode()  # (retiring)
    bad = admin.post("/security/token-secret/rotate", {"overlap": "soon"}, follow=True)
    assert "the overlap must be a number of seconds" in bad.content.decode()

    frank = get_user_model().objects.create_user("frank")
    first = token_for(frank)
    page = admin.get("/security/").content.decode()
    page = page[page.index('id="token-table"') :]
    row = page[page.index('data-user="frank"') :]
    row = row[: row.index("</tr>")]
    # Rotate, as Revoke, asks first: the button opens a confirmation that says what follows.
    assert row.index("Rotate…</summary>") < row.index("/security/tokens/frank/rotate")
    assert "stops working at once" in row
    answer = admin.post("/security/tokens/frank/rotate", follow=True)
    second = Token.objects.get(user=frank).key
    assert second != first and second in answer.content.decode()
    admin.post("/security/tokens/frank/revoke")
    assert not Token.objects.filter(user=frank).exists()
    again = admin.post("/security/tokens/frank/revoke", follow=True)
    assert "has no API token" in again.content.decode()

    AccessAttempt.objects.create(
        username="frank", ip_address="10.1.2.3", failures_since_start=99, user_agent="x",
        http_accept="x", path_info="/login/", get_data="", post_data="",
        attempt_time=timezone.now(),
    )  # fmt: skip
    assert "10.1.2.3" in admin.get("/security/").content.decode()
    admin.post("/security/sign-ins/unlock", {"username": "frank", "address": "10.1.2.3"})
    assert not AccessAttempt.objects.filter(username="frank").exists()
    actions = set(AuditEntry.objects.filter(result="ok").values_list("action", flat=True))
    assert {"token-secret.rotate", "token.rotate", "token.revoke", "signin.unlock"} <= actions


def test_user_changes_need_the_admin_role_and_keep_an_admin(keys: TokenKeys) -> None:
    operator, _ = browser("operator")
    target = get_user_model().objects.create_user("hana", password="pw")
    grant(target, "viewer")
    for path, form in (("role", {"role": "admin"}), ("password", {}), ("disable", {}),
                       ("delete", {})):  # fmt: skip
        assert operator.post(f"/security/users/hana/{path}", form).status_code == 403
    assert (
        operator.post("/security/users/create", {"username": "x", "role": "admin"}).status_code
        == 403
    )
    target.refresh_from_db()
    assert target.is_active and target.check_password("pw")
    refused = set(AuditEntry.objects.filter(result="refused").values_list("action", flat=True))
    assert {"user.role", "user.password", "user.disable", "user.delete", "user.create"} <= refused

    admin, me = browser("admin")
    get_user_model().objects.filter(is_superuser=True).update(is_active=False)  # (only me)
    page = admin.get("/security/").content.decode()
    assert 'data-user="hana"' in page and "viewer" in page
    answer = admin.post(
        "/security/users/create", {"username": "hana", "role": "viewer"}, follow=True
    )
    assert "exists already" in answer.content.decode()
    answer = admin.post("/security/users/create", {"username": "ivo", "role": "boss"}, follow=True)
    assert "the role must be one of admin, operator, viewer" in answer.content.decode()
    answer = admin.post(f"/security/users/{me.username}/disable", follow=True)
    assert "last active administrator" in answer.content.decode()
    me.refresh_from_db()
    assert me.is_active
    ok = set(AuditEntry.objects.filter(result="ok").values_list("action", flat=True))
    assert not ok & {"user.disable", "user.create"}
