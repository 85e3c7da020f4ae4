"""``GET /v1/kafka/groups``: the Kafka listeners and consumer groups, with each group's members
and, per partition, its committed offset, end and lag in records (read role)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app.kafka_catalog import kafka_groups


class KafkaGroupsView(APIView):
    @extend_schema(operation_id="getKafkaGroups", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        return Response(kafka_groups())
