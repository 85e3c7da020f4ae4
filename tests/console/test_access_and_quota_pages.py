"""The console's Access page and a scope's quota, through Django (no browser): an admin grants,
checks and revokes, and sets a quota; a team's user sees only its scope and is refused the rest
naming the resource; every change is audited."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from controller_app.access import acl
from controller_app.access.roles import grant
from controller_app.models import AuditEntry, Grant, ScopeQuota
from controller_app.workflows import scopes
from tests.controller.conftest import registered_node, segment_store_node  # noqa: F401

pytestmark = pytest.mark.django_db


def _browser(role: str | None) -> tuple[Client, Any]:
    user = get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:6]}", password="pw")
    if role:
        grant(user, role)  # type: ignore[arg-type]
    client = Client()
    client.force_login(user)
    return client, user


def test_an_admin_grants_checks_and_revokes_on_the_access_page(db: None) -> None:
    admin, _ = _browser("admin")
    _, member = _browser(None)
    form = {"effect": "allow", "principal": f"user:{member.username}", "permission": "READ",
            "resource": "prn::/scope:team-a*"}  # fmt: skip
    assert (
        admin.post("/security/access/grant", form, HTTP_REFERER="/security/access/").status_code
        == 302
    )
    page = admin.get("/security/access/").content.decode()
    assert "prn::/scope:team-a*" in page and f"user:{member.username}" in page
    check = admin.get(f"/security/access/?check_user={member.username}&check_permission=READ"
                      "&check_resource=prn::/scope:team-a1").content.decode()  # fmt: skip
    assert "may</strong>" not in check and "may do" in check and "grant #" in check
    bad = admin.get("/security/access/?check_user=nobody&check_resource=x&check_permission=READ")
    assert bad.status_code == 200 and "no user named" in bad.content.decode()
    assert admin.post("/security/access/revoke", form).status_code == 302
    assert not Grant.objects.exists()
    viewer, _ = _browser("viewer")
    refused = viewer.post("/security/access/grant", form)
    assert refused.status_code == 403
    assert [r.result for r in AuditEntry.objects.filter(action="acl.grant").order_by("id")] == [
        "ok",
        "refused",
    ]


def test_a_teams_user_sees_its_scope_only_and_the_scope_page_shows_the_quota(
    registered_node: Any,  # noqa: F811
) -> None:
    for name in ("team-a", "team-b"):
        scopes.create_scope(name)
    user_client, user = _browser(None)
    acl.grant(f"user:{user.username}", "prn::/scope:team-a*", "MANAGE", by="t",
              audit_as=lambda *a: None)  # fmt: skip
    listed = user_client.get("/scopes/").content.decode()
    assert 'data-scope="team-a"' in listed and 'data-scope="team-b"' not in listed
    assert user_client.get("/").status_code == 302  # (its scopes, not the cluster's dashboard)
    refused = user_client.get("/scopes/team-b/streams/")
    assert refused.status_code == 403 and "READ on prn::/scope:team-b" in refused.content.decode()
    admin, _ = _browser("admin")
    quota = {"streams": "5", "appendBytesPerSecond": "1000000", "storedPolicy": "truncate"}
    assert (
        admin.post(
            "/scopes/team-a/quota", quota, HTTP_REFERER="/scopes/team-a/streams/"
        ).status_code
        == 302
    )
    row = ScopeQuota.objects.get(scope__name="team-a")
    assert (row.streams, row.append_bytes_per_s, row.stored_policy) == (5, 1_000_000, "truncate")
    page = user_client.get("/scopes/team-a/streams/").content.decode()
    assert 'data-limit="streams"' in page and "1000000" in page
    assert user_client.post("/scopes/team-a/quota", quota).status_code == 403  # (admins only)
