"""HTTP health endpoints of a node, shaped like Pravega's REST health API; no authentication.

``GET /health[/<id>]`` answers a HealthResult (``name``, ``status``, ``readiness``, ``liveness``,
``details``, ``children``); ``/health/readiness[/<id>]`` and ``/health/liveness[/<id>]`` a JSON
boolean; ``/health/details[/<id>]`` a string-to-string object; ``/health/status[/<id>]`` a status
string. ``<id>`` names a contributor (a child of the node). Unhealthy answers use HTTP 503 so that
load balancers and probes need not parse the body. The node is live while it answers; its
contributors (the metadata database for now) decide whether it is ready.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

ASPECTS = ("health", "readiness", "liveness", "details", "status")


@dataclasses.dataclass(frozen=True)
class Health:
    """One node of the health tree (Pravega's HealthResult)."""

    name: str
    status: str  # UP, STARTING, NEW, UNKNOWN, FAILED or DOWN
    readiness: bool
    liveness: bool
    details: dict[str, str] = dataclasses.field(default_factory=dict)
    children: dict[str, Health] = dataclasses.field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "readiness": self.readiness,
            "liveness": self.liveness,
            "details": self.details,
            "children": {name: child.as_json() for name, child in self.children.items()},
        }


def database_health() -> Health:
    """UP when the metadata database answers ``SELECT 1``."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:  # the message may name hosts: keep it out of a public answer
        return Health("database", "DOWN", False, False, {"error": type(exc).__name__})
    return Health("database", "UP", True, True, {"vendor": connection.vendor})


#: The node's health contributors, checked on every request for the health tree.
CONTRIBUTORS: tuple[Callable[[], Health], ...] = (database_health,)


def node_health() -> Health:
    """The node and its contributors: ready when all of them are ready."""
    children = {health.name: health for health in (check() for check in CONTRIBUTORS)}
    ready = all(child.readiness for child in children.values())
    return Health("millrace", "UP" if ready else "DOWN", ready, True, children=children)


def _answer(health: Health, aspect: str) -> JsonResponse:
    body: Any
    ok = True
    if aspect == "health":
        body, ok = health.as_json(), health.status == "UP"
    elif aspect in ("readiness", "liveness"):
        body = ok = getattr(health, aspect)
    else:
        body = getattr(health, aspect)
    return JsonResponse(body, safe=False, status=200 if ok else 503)


@require_GET
def health_view(request: HttpRequest, aspect: str, contributor: str | None = None) -> JsonResponse:
    """One aspect (see ``ASPECTS``) of the node's health or of one contributor's."""
    if aspect == "liveness" and contributor is None:
        return JsonResponse(True, safe=False)  # answering is being alive; skip the checks
    health = node_health()
    if contributor is not None:
        found = health.children.get(contributor)
        if found is None:
            message = f"no health contributor {contributor!r}; known: {', '.join(health.children)}"
            return JsonResponse({"code": "not_found", "message": message}, status=404)
        health = found
    return _answer(health, aspect)
