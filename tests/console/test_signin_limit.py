"""Sign-ins limited per user and address (django-axes), through Django's whole middleware stack:
the console's form and REST Basic authentication, each refusal audited; and the limit switched
off (the TEST-ONLY ``no-signin-limit``, ``AXES_ENABLED``), when guessing must then go on."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from controller_app.access.roles import grant
from controller_app.models import AuditEntry

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery"


@pytest.fixture
def limits(settings: Any) -> Any:
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3
    return settings


@pytest.fixture
def carol() -> Any:
    user = get_user_model().objects.create_user("carol", password=PASSWORD)
    grant(user, "viewer")
    return user


def sign_in(client: Client, password: str, address: str = "10.0.0.7") -> Any:
    return client.post("/login/", {"username": "carol", "password": password}, REMOTE_ADDR=address)


def test_guessing_is_refused_after_the_limit_saying_until_when(limits: Any, carol: Any) -> None:
    client = Client()
    for _ in range(2):
        answer = sign_in(client, "guess")
        assert answer.status_code == 200 and b"did not match" in answer.content
    locked = sign_in(client, "guess")  # the third failure reaches the limit
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) > 0
    assert b"oo many failed sign-ins (3) for this user from this address" in locked.content
    # the right password is refused too while the lockout lasts ...
    assert sign_in(client, PASSWORD).status_code == 429
    # ... from that address: the same user elsewhere, and another user here, sign in
    assert sign_in(Client(), PASSWORD, address="10.0.0.8").status_code == 302
    audit = AuditEntry.objects.filter(result="refused")
    assert audit.filter(action="signin.failed", username="carol").count() >= 2
    assert audit.filter(action="signin.locked", username="carol").count() >= 1
    assert audit.filter(action="POST /login/").count() >= 2  # each 429 answered


def test_rest_basic_authentication_counts_too(limits: Any, carol: Any) -> None:
    client = Client()
    bad = "Basic " + base64.b64encode(b"carol:guess").decode()
    for _ in range(2):
        assert client.get("/v1/scopes", HTTP_AUTHORIZATION=bad).status_code == 401
    answer = client.get("/v1/scopes", HTTP_AUTHORIZATION=bad)
    assert answer.status_code == 429
    assert answer.json()["code"] == "too-many-sign-ins"
    assert "Retry-After" in answer


def test_with_the_limit_switched_off_guessing_goes_on(limits: Any, carol: Any) -> None:
    """The guard off: the same guesses all reach the password check, and the right one,
    after them, signs in. (With the limit on, the previous tests see the refusal.)"""
    limits.AXES_ENABLED = False
    client = Client()
    for _ in range(10):
        assert sign_in(client, "guess").status_code == 200
    assert sign_in(client, PASSWORD).status_code == 302
