"""HTTP health endpoints of a node, shaped like Pravega's REST health API; no authentication.

``GET /health[/<id>]`` answers a HealthResult (``name``, ``status``, ``readiness``, ``liveness``,
``details``, ``children``); ``/health/readiness[/<id>]`` and ``/health/liveness[/<id>]`` a JSON
boolean; ``/health/details[/<id>]`` a string-to-string object; ``/health/status[/<id>]`` a status
string. ``<id>`` names a contributor (a child of the node, see
``controller_app.operations.health``). Unhealthy answers use HTTP 503 so that load balancers and
probes need not parse the body: ``/health`` while any part is down, ``/health/readiness`` while
writes cannot go on. The node is live while it answers, so ``/health/liveness`` of the node checks
nothing else.

``GET /live`` and ``GET /ready`` (``process_probe_view``) answer for this controller process
alone, for an orchestrator's probes: ready while it reaches the metadata database.

The views are async and check in a thread pool, never in the thread that runs the synchronous
views (the REST API): a hung segment store costs a health request its timeout, not the API.
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels.db import DatabaseSyncToAsync
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from controller_app.operations.health import Health, node_health

ASPECTS = ("health", "readiness", "liveness", "details", "status")


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


_node_health = DatabaseSyncToAsync(node_health, thread_sensitive=False)


@require_GET
async def health_view(
    request: HttpRequest, aspect: str, contributor: str | None = None
) -> JsonResponse:
    """One aspect (see ``ASPECTS``) of the node's health or of one contributor's."""
    if aspect == "liveness" and contributor is None:
        return JsonResponse(True, safe=False)  # answering is being alive; skip the checks
    health = await _node_health()
    if contributor is not None:
        found = health.children.get(contributor)
        if found is None:
            message = f"no health contributor {contributor!r}; known: {', '.join(health.children)}"
            return JsonResponse({"code": "not_found", "message": message}, status=404)
        health = found
    return _answer(health, aspect)


def _database_answers() -> tuple[bool, str]:
    from django.db import DatabaseError, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return False, f"the metadata database does not answer: {type(exc).__name__}"
    return True, f"the metadata database ({connection.vendor}) answers"


_database = DatabaseSyncToAsync(_database_answers, thread_sensitive=False)

#: Seconds the controller's readiness waits for the database.
READY_TIMEOUT_SECONDS = 3.0


@require_GET
async def process_probe_view(request: HttpRequest, aspect: str) -> JsonResponse:
    """``GET /live`` and ``GET /ready`` of this controller process alone (not the node): live
    while it answers, ready while the metadata database answers it. The same shape as the
    other processes' ports (``{"ready": bool, "reason": str}``, 200 or 503)."""
    if aspect == "live":
        return JsonResponse({"live": True, "reason": "answering"})
    try:
        ok, reason = await asyncio.wait_for(_database(), READY_TIMEOUT_SECONDS)
    except TimeoutError:
        ok, reason = False, f"the metadata database did not answer in {READY_TIMEOUT_SECONDS:g} s"
    return JsonResponse({"ready": ok, "reason": reason}, status=200 if ok else 503)
