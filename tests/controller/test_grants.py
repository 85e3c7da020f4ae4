"""Grants judged (``controller_app.access.grants``) and managed (``controller_app.access.acl``):
resource strings and patterns, the order of denials, grants and roles, a reader group's and a
table's
segments, Pravega's password file imported, and ``/v1/acl`` as an admin's client calls it."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.models import Group
from django.test import RequestFactory
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from controller_app.access import acl, grants
from controller_app.access.roles import grant as give_role
from controller_app.errors import InvalidArgumentError
from controller_app.models import Grant
from tests.controller import factories as f

pytestmark = pytest.mark.django_db


def _user(role: str | None = None) -> Any:
    user = get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:8]}", password=None)
    if role:
        give_role(user, role)  # type: ignore[arg-type]
    return user


def _grant(who: Any, permission: str, resource: str, deny: bool = False) -> None:
    principal = f"group:{who.name}" if isinstance(who, Group) else f"user:{who.username}"
    acl.grant(principal, resource, permission, deny=deny, by="test", audit_as=lambda *a: None)
    if not isinstance(who, Group):
        grants.forget(who)


@pytest.mark.parametrize(("given", "stored"), [
    ("prn::/scope:a/stream:b", "prn::/scope:a/stream:b"),
    ("prn::/scope:team-a*", "prn::/scope:team-a*"),
    ("prn::/scope:a/reader-group:*", "prn::/scope:a/reader-group:*"),
    ("*", "prn::*"),
    ("a", "prn::/scope:a"),
    ("a/*", "prn::/scope:a/*"),
    ("a/b", "prn::/scope:a/stream:b"),
    ("prn::/registry/subject:orders-value", "prn::/registry/subject:orders-value"),
])  # fmt: skip
def test_resource_strings_and_pravegas_older_ones(given: str, stored: str) -> None:
    assert grants.parse_resource(given) == stored


@pytest.mark.parametrize("bad", ["prn::/bucket:x", "prn::/scope:a b", "prn::/scope:a/table:t",
                                 "prn::"])  # fmt: skip
def test_a_bad_resource_string_says_what_is_allowed(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a resource string: write prn::/"):
        grants.parse_resource(bad)


def test_patterns_match_prefixes_and_children() -> None:
    assert grants.matches("prn::/scope:team-a*", "prn::/scope:team-a2/stream:s")
    assert not grants.matches("prn::/scope:team-a*", "prn::/scope:team-b")
    assert grants.matches("prn::/scope:s/*", "prn::/scope:s/reader-group:g")
    assert not grants.matches("prn::/scope:s/*", "prn::/scope:s")
    assert grants.matches("prn::*", "prn::/")
    assert not grants.matches("prn::/scope:s", "prn::/scope:s/stream:t")  # (literal: itself)


def test_the_order_of_admin_denial_grant_and_role() -> None:
    stream = "prn::/scope:s/stream:t"
    viewer, operator, admin = _user("viewer"), _user("operator"), _user("admin")
    assert grants.judge(viewer, stream, "READ") == grants.Verdict(True, "role viewer")
    assert not grants.allowed(viewer, stream, "READ_UPDATE")
    assert grants.allowed(operator, stream, "MANAGE")
    _grant(operator, "READ", stream, deny=True)
    assert grants.judge(operator, stream, "READ").reason.startswith("denied by grant #")
    assert grants.allowed(operator, "prn::/scope:s/stream:u", "MANAGE")  # (only a denial)
    _grant(viewer, "READ_UPDATE", "prn::/scope:x*")  # now its grants, not its role, decide
    assert not grants.allowed(viewer, stream, "READ")
    assert grants.allowed(viewer, "prn::/scope:x1/stream:t", "READ_UPDATE")
    assert not grants.allowed(viewer, "prn::/scope:x1/stream:t", "MANAGE")
    _grant(admin, "READ", "prn::*", deny=True)
    assert grants.judge(admin, stream, "MANAGE") == grants.Verdict(True, "admin")


def test_a_groups_grant_reaches_its_members() -> None:
    member, team = _user(), Group.objects.create(name="team-a")
    member.groups.add(team)
    assert not grants.allowed(member, "prn::/scope:a/stream:s", "READ")
    _grant(team, "READ", "prn::/scope:a/*")
    grants.forget(member)
    assert grants.allowed(member, "prn::/scope:a/stream:s", "READ")


def test_the_guard_off_allows_everyone_signed_in(settings: Any) -> None:
    user = _user()
    assert not grants.allowed(user, "prn::/scope:a", "MANAGE")
    settings.MILLRACE = settings.MILLRACE.__class__(
        **{**vars(settings.MILLRACE), "unsafe": frozenset({"no-grants"})}
    )
    assert grants.allowed(user, "prn::/scope:a", "MANAGE")


def test_internal_streams_answer_to_their_owners(registered_node: Any) -> None:
    assert grants.stream_prn("s", "_RGgroup") == "prn::/scope:s/reader-group:group"
    assert grants.stream_prn("s", "_MARKorders") == "prn::/scope:s/stream:orders"
    assert grants.stream_prn("s", "tab_kvtable") == "prn::/scope:s/key-value-table:tab"
    # Pravega's Rust client keeps a reader group's state in a table named after the group
    assert grants.segments_resource("s", "grp_kvtable") == "prn::/scope:s/reader-group:grp"
    f.KeyValueTableFactory(scope=f.ScopeFactory(name="s"), name="tab")
    assert grants.segments_resource("s", "tab_kvtable") == "prn::/scope:s/key-value-table:tab"


def _pravega_line(name: str, password: str, acl_text: str) -> str:
    """A line of Pravega's password file, as its PasswordCreatorTool writes it."""
    salt = bytes(range(16))
    key = hashlib.pbkdf2_hmac("sha1", password.encode(), salt, 5000, 64)
    stored = f"5000:{salt.hex()}:{key.hex()}".encode().hex()
    return f"{name}:{stored}:{acl_text}"


def test_pravegas_password_file_is_imported_whole_or_not_at_all() -> None:
    text = "\n".join([
        _pravega_line("admin2", "1111_aaaa", "prn::*,READ_UPDATE;"),
        _pravega_line("pat", "secret-pw", "prn::/scope:shop,READ;shop/orders,READ_UPDATE;x,NONE;"),
        "# a comment",
    ])  # fmt: skip
    found = acl.import_password_file(text, by="test", audit_as=lambda *a: None)
    assert found == {"users": 2, "usersCreated": 2, "grants": 3}
    imported = get_user_model().objects.get(username="pat")
    assert imported.password.startswith("pravega$5000$") and len(imported.password) <= 128
    assert not imported.check_password("wrong")
    pat = authenticate(RequestFactory().post("/login/"), username="pat", password="secret-pw")
    assert pat is not None
    pat.refresh_from_db()
    assert not pat.password.startswith("pravega$")  # re-hashed at the sign-in
    assert grants.allowed(pat, "prn::/scope:shop/stream:orders", "READ_UPDATE")
    assert not grants.allowed(pat, "prn::/scope:shop/stream:other", "READ")
    bad = text + "\nmallory:plain-text:prn::*,READ_UPDATE;"
    with pytest.raises(InvalidArgumentError, match="line 4: the password is not one"):
        acl.import_password_file(bad, by="test", audit_as=lambda *a: None)
    assert not get_user_model().objects.filter(username="mallory").exists()


def _admin_client() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=_user('admin'))}")
    return client


def test_the_acl_api_grants_lists_checks_revokes_and_refuses_non_admins() -> None:
    admin, member = _admin_client(), _user()
    body = {"principal": f"user:{member.username}", "resource": "prn::/scope:t*",
            "permission": "READ_UPDATE"}  # fmt: skip
    made = admin.post("/v1/acl", body, format="json")
    assert made.status_code == 201 and made.json()["effect"] == "allow", made.json()
    listed = admin.get(f"/v1/acl?principal=user:{member.username}").json()["grants"]
    assert [g["resource"] for g in listed] == ["prn::/scope:t*"]
    check = admin.get(f"/v1/acl/check?user={member.username}&resource=prn::/scope:t1"
                      "&permission=READ").json()  # fmt: skip
    assert check["allowed"] and check["reason"].startswith("grant #")
    own = APIClient()
    own.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=member)}")
    assert (
        own.get("/v1/acl/check?resource=prn::/scope:t1&permission=MANAGE").json()["allowed"]
        is False
    )
    refused = own.post("/v1/acl", body, format="json")
    assert refused.status_code == 403
    assert own.get("/v1/acl").status_code == 403
    bad = admin.post("/v1/acl", {**body, "resource": "prn::/nope"}, format="json")
    assert bad.status_code == 400 and "is not a resource string" in bad.json()["message"]
    assert admin.post("/v1/acl/revoke", body, format="json").json() == {"removed": 1}
    assert not Grant.objects.exists()


def test_the_schema_registry_is_judged_by_its_own_resources() -> None:
    """A team's user with a grant on its subject only: that subject's versions may be
    registered and read; the registry's listing and another subject are refused, naming the
    resource, in Confluent's error body."""
    member = _user()
    _grant(member, "READ_UPDATE", "prn::/registry/subject:team-a-*")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=member)}")
    schema = {"schema": '{"type": "string"}'}
    made = client.post("/registry/subjects/team-a-orders/versions", schema, format="json")
    assert made.status_code == 200, made.json()
    assert client.get("/registry/subjects/team-a-orders/versions").json() == [1]
    other = client.post("/registry/subjects/team-b-orders/versions", schema, format="json")
    assert other.status_code == 403
    assert other.json() == {
        "error_code": 403,
        "message": "READ_UPDATE on prn::/registry/subject:team-b-orders is not granted to you "
        "(no grant covers it)",
    }
    assert client.get("/registry/subjects").status_code == 403
