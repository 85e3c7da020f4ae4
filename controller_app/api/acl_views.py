"""REST views of grants (``controller_app.access.acl``): list, grant or deny, revoke, check, a
group's members, and Pravega's password file imported. Changing grants needs the admin role;
any user may check what it may do itself."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app.access import acl, grants
from controller_app.access.roles import may, refusal
from controller_app.api import fields
from controller_app.errors import PermissionRefusedError


def _valid(serializer_class: type, data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _unaudited(action: str, obj: str, detail: str) -> None:
    """REST changes are audited by the middleware (one row per request)."""


class GrantSerializer(serializers.Serializer[Any]):
    principal = fields.CharField(max_length=200, help_text="user:NAME or group:NAME")
    resource = fields.CharField(max_length=512, help_text="prn::/scope:S/stream:T, with * for any")
    permission = serializers.ChoiceField(choices=grants.PERMISSIONS, required=False)
    effect = serializers.ChoiceField(choices=("allow", "deny"), default="allow")


class MembersSerializer(serializers.Serializer[Any]):
    group = fields.CharField(max_length=150)
    user = fields.CharField(max_length=150)
    action = serializers.ChoiceField(choices=("join", "leave"))


class ImportSerializer(serializers.Serializer[Any]):
    text = fields.CharField(max_length=1_000_000, help_text="Pravega's password file")


class GrantsView(APIView):
    needs = {"GET": "admin", "POST": "admin"}
    audit_actions = {"POST": "acl.grant"}

    @extend_schema(operation_id="listGrants", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        found = acl.listing(request.query_params.get("principal", ""),
                            request.query_params.get("resource", ""))  # fmt: skip
        return Response({"grants": found})

    @extend_schema(operation_id="grant", request=GrantSerializer, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        data = _valid(GrantSerializer, request.data)
        row = acl.grant(
            data["principal"], data["resource"], data.get("permission") or grants.READ,
            deny=data["effect"] == "deny", by=request.user.get_username(), audit_as=_unaudited,
        )  # fmt: skip
        return Response(row, status=201)


class RevokeView(APIView):
    needs = {"POST": "admin"}
    audit_actions = {"POST": "acl.revoke"}

    @extend_schema(operation_id="revoke", request=GrantSerializer, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        data = _valid(GrantSerializer, request.data)
        removed = acl.revoke(data["principal"], data["resource"],
                             deny=data["effect"] == "deny", audit_as=_unaudited)  # fmt: skip
        return Response({"removed": removed})


class CheckView(APIView):
    """Whether a user (the caller unless ``user`` names another: the admin role) may do
    ``permission`` on ``resource``, and why."""

    needs = {"GET": "read"}
    listing = ("GET",)

    @extend_schema(operation_id="checkGrant", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        params = request.query_params
        username = params.get("user") or request.user.get_username()
        if username != request.user.get_username() and not may(request.user, "admin"):
            raise PermissionRefusedError(grants.ROOT, "admin", refusal("admin"))
        return Response(acl.check(username, params.get("resource", ""),
                                  params.get("permission", grants.READ)))  # fmt: skip


class MembersView(APIView):
    needs = {"POST": "admin"}
    audit_actions = {"POST": "acl.members"}

    @extend_schema(operation_id="groupMembers", request=MembersSerializer, responses={204: None})
    def post(self, request: Request) -> Response:
        data = _valid(MembersSerializer, request.data)
        acl.members(data["group"], data["user"], join=data["action"] == "join",
                    audit_as=_unaudited)  # fmt: skip
        return Response(status=204)


class ImportView(APIView):
    needs = {"POST": "admin"}
    audit_actions = {"POST": "acl.import"}

    @extend_schema(operation_id="importPravegaPasswords", request=ImportSerializer,
                   responses=OpenApiTypes.OBJECT)  # fmt: skip
    def post(self, request: Request) -> Response:
        data = _valid(ImportSerializer, request.data)
        found = acl.import_password_file(data["text"], by=request.user.get_username(),
                                         audit_as=_unaudited)  # fmt: skip
        return Response(found)
