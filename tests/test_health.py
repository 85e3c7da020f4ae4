"""Health endpoints: Pravega's HealthResult shape, no authentication, 503 when not ready."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.test import Client

pytestmark = pytest.mark.django_db

HEALTH_FIELDS = {"name", "status", "readiness", "liveness", "details", "children"}


@pytest.fixture
def database_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new cursor on the default database fails, as when the server is unreachable."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr("segment_app.views.connection.cursor", refuse)


def test_health_result(client: Client) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == HEALTH_FIELDS
    assert (body["name"], body["status"], body["readiness"], body["liveness"]) == (
        "millrace",
        "UP",
        True,
        True,
    )
    database = body["children"]["database"]
    assert set(database) == HEALTH_FIELDS
    assert database["status"] == "UP"
    assert database["details"]["vendor"] in ("sqlite", "postgresql")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/health/readiness", True),
        ("/health/liveness", True),
        ("/health/status", "UP"),
        ("/health/details", {}),
        ("/health/readiness/database", True),
        ("/health/liveness/database", True),
        ("/health/status/database", "UP"),
    ],
)
def test_health_aspects(client: Client, path: str, expected: object) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.json() == expected


def test_contributor_health(client: Client) -> None:
    body = client.get("/health/database").json()
    assert (body["name"], body["status"], body["children"]) == ("database", "UP", {})


def test_unknown_contributor_is_404_json(client: Client) -> None:
    response = client.get("/health/readiness/nosuch")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert "nosuch" in response.json()["message"]


def test_health_needs_no_credentials_even_bad_ones(client: Client) -> None:
    response = client.get("/health", HTTP_AUTHORIZATION="Basic bm9ib2R5Om5vdGhpbmc=")
    assert response.status_code == 200


def test_only_get_is_allowed(client: Client) -> None:
    assert client.post("/health/readiness").status_code == 405


def test_database_down_means_not_ready_but_live(client: Client, database_down: None) -> None:
    health = client.get("/health")
    assert health.status_code == 503
    body = health.json()
    assert (body["status"], body["readiness"], body["liveness"]) == ("DOWN", False, True)
    assert body["children"]["database"]["details"] == {"error": "OperationalError"}
    readiness = client.get("/health/readiness")
    assert (readiness.status_code, readiness.json()) == (503, False)
    liveness = client.get("/health/liveness")
    assert (liveness.status_code, liveness.json()) == (200, True)
    assert client.get("/health/status").json() == "DOWN"
