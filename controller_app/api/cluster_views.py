"""``GET /v1/cluster``: the cluster's nodes, containers, leader and latest moves (read role)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app.cluster.status import cluster_status


class ClusterView(APIView):
    @extend_schema(operation_id="getCluster", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        return Response(cluster_status())
