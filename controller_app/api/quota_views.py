"""REST view of a scope's quota (``controller_app.quotas``): its limits, its use of each and the
throttle time its nodes added (``READ`` on the scope); set by an admin (a team must not raise
its own quota)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app import quotas
from controller_app.workflows.scopes import get_scope
from millrace.kernel.quotas import QUOTA_LIMITS

#: A quota as the REST API takes it: each limit of ``QUOTA_LIMITS`` (a whole number from 1,
#: or null for none) and the stored-bytes policy.
QuotaSerializer = type(
    "QuotaSerializer",
    (serializers.Serializer,),
    {
        **{
            limit.field: serializers.IntegerField(
                min_value=1, allow_null=True, required=False, help_text=limit.label
            )
            for limit in QUOTA_LIMITS
        },
        "storedPolicy": serializers.ChoiceField(choices=("refuse", "truncate"), required=False),
    },
)


_FIELDS = {limit.field: limit.name for limit in QUOTA_LIMITS}


class QuotaView(APIView):
    needs = {"PUT": "admin"}
    audit_actions = {"PUT": "scope.quota"}

    @extend_schema(operation_id="getScopeQuota", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, scope: str) -> Response:
        return Response(quotas.quota_of(get_scope(scope)))

    @extend_schema(operation_id="setScopeQuota", request=QuotaSerializer,
                   responses=OpenApiTypes.OBJECT)  # fmt: skip
    def put(self, request: Request, scope: str) -> Response:
        checked = QuotaSerializer(data=request.data)
        checked.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(checked.validated_data)
        policy = data.pop("storedPolicy", None)
        quotas.set_quota(scope, {_FIELDS[k]: v for k, v in data.items()}, policy)
        return Response(quotas.quota_of(get_scope(scope)))
