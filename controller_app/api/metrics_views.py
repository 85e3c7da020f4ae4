"""What Prometheus asks the controller: its metrics, and where every other process's are.

* ``GET /metrics``: the controller's metrics (``controller_app.operations.metrics``),
  low-cardinality;
  ``?detail=1`` adds the detail (each reader's lag).
* ``GET /v1/metrics/targets``: Prometheus's HTTP service discovery (``http_sd_configs``): the
  metrics ports of the cluster's controllers, segment store nodes, workers and beats, each
  group labelled with its ``role`` (and ``node`` or ``process``). ``millrace scrape-config``
  prints a configuration that uses it.

Both take the API's credentials, or a delegation token for ``*``
(``ScrapeTokenAuthentication``): the one credential that also reads the other processes'
ports.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app.api.authentication import SCRAPE, ScrapeTokenAuthentication
from controller_app.api.permissions import RolePermission
from controller_app.errors import InvalidArgumentError
from controller_app.operations import metrics
from controller_app.operations.scrape import scrape_targets


class ScrapePermission(RolePermission):
    """A scrape token may read; anyone else needs the role a GET needs."""

    def has_permission(self, request: Any, view: Any) -> bool:
        return request.auth == SCRAPE or super().has_permission(request, view)


class TargetGroupSerializer(serializers.Serializer[Any]):
    targets = serializers.ListField(child=serializers.CharField(), help_text="host:port")
    labels = serializers.DictField(
        child=serializers.CharField(), help_text="role, node or process, __scheme__, ..."
    )


_SCRAPE_AUTH: list[type[BaseAuthentication]] = [
    ScrapeTokenAuthentication,
    *APIView.authentication_classes,
]


class PrometheusView(APIView):
    """``GET /metrics``: the controller's Prometheus metrics
    (``controller_app.operations.metrics``), with the REST API's authentication (``Authorization:
    Token <key>``) or a delegation token for
    ``*`` (``Bearer``). ``?detail=1`` adds each reader's lag."""

    authentication_classes = _SCRAPE_AUTH
    permission_classes = [ScrapePermission]

    @extend_schema(
        operation_id="getPrometheusMetrics", responses={200: OpenApiTypes.STR},
        parameters=[OpenApiParameter("detail", int, description="1: add the detail series")],
    )  # fmt: skip
    def get(self, request: Request) -> HttpResponse:
        detail = request.query_params.get("detail", "0")
        if detail not in ("0", "1"):
            raise InvalidArgumentError("detail is 0 or 1")
        metrics.register()
        body = generate_latest(REGISTRY)
        if detail == "1":
            body += generate_latest(metrics.DETAIL)
        return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


class ScrapeTargetsView(APIView):
    """``GET /v1/metrics/targets``: every metrics port of the cluster, in Prometheus's HTTP
    service discovery format."""

    authentication_classes = _SCRAPE_AUTH
    permission_classes = [ScrapePermission]

    @extend_schema(
        operation_id="getScrapeTargets",
        description="Prometheus HTTP service discovery: `[{targets: [host:port], labels: {role,"
        " node|process, __metrics_path__, __scheme__}}]` for every controller, segment store"
        " node, worker and beat.",
        responses={200: TargetGroupSerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        scheme = "https" if settings.MILLRACE_TLS.enabled else "http"
        return Response(scrape_targets(request.get_host(), scheme))
