"""REST views of reader groups: Pravega's list/get/delete plus create, reset, readers, sync,
checkpoints and subscriber stream cuts (``controller_app.workflows.reader_groups``).

Stream starts and stream cuts are accepted as ``"head"``, ``"tail"``, a stream cut text
(``mrcut1....``) or ``{segment id: offset}``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app import audit, lag
from controller_app.access import grants
from controller_app.api import fields
from controller_app.api import serializers as s
from controller_app.errors import InvalidArgumentError
from controller_app.models import ReaderGroup
from controller_app.segment_client import read_traffic, segment_store
from controller_app.workflows import reader_groups as rg
from controller_app.workflows import scopes
from millrace.client.streamcut import StreamCut

_INT64_MAX = 2**63 - 1


def _valid(serializer_class: type, data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _start(scoped: str, value: Any) -> Any:
    """A stream's start or cut as the workflows take it ("head", "tail", {id: offset})."""
    if isinstance(value, str) and value.startswith("mrcut"):
        try:
            cut = StreamCut.from_text(value)
        except ValueError as exc:
            raise InvalidArgumentError(f"the stream cut of {scoped}: {exc}") from None
        if f"{cut.scope}/{cut.stream}" != scoped:
            raise InvalidArgumentError(f"the stream cut given for {scoped} is of another stream")
        return {str(k): v for k, v in cut.positions.items()}
    return value


def _config(
    data: dict[str, Any], current: rg.ReaderGroupConfig | None = None
) -> rg.ReaderGroupConfig:
    """The configuration in a request, over ``current`` (a reset changes what it names)."""
    fields = ("streams", "retentionType", "readerTimeoutMs", "groupRefreshTimeMs")
    merged = {**(current.to_json() if current else {}), **{k: data[k] for k in fields if k in data}}
    merged["streams"] = {k: _start(k, v) for k, v in merged.get("streams", {}).items()}
    return rg.ReaderGroupConfig.from_json(merged)


class ConfigSerializer(serializers.Serializer[Any]):
    streams = serializers.DictField(
        child=serializers.JSONField(),
        help_text='{"scope/stream": "head" | "tail" | "mrcut1..." | {"<segment id>": offset}}',
    )
    retentionType = serializers.ChoiceField(choices=rg.RETENTION_TYPES, required=False)
    readerTimeoutMs = serializers.IntegerField(min_value=100, max_value=86_400_000, required=False)
    groupRefreshTimeMs = serializers.IntegerField(
        min_value=100, max_value=86_400_000, required=False
    )


class CreateSerializer(ConfigSerializer):
    readerGroupName = fields.CharField(max_length=250)


class ResetSerializer(ConfigSerializer):
    streams = serializers.DictField(child=serializers.JSONField(), required=False)


class ReaderSerializer(serializers.Serializer[Any]):
    readerId = fields.CharField(max_length=rg.READER_ID_LENGTH_MAX)


class LeaveSerializer(serializers.Serializer[Any]):
    positions = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=_INT64_MAX), required=False
    )


class SyncSerializer(serializers.Serializer[Any]):
    generation = serializers.IntegerField(min_value=0, max_value=_INT64_MAX)
    positions = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=_INT64_MAX), required=False
    )
    ended = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=_INT64_MAX), required=False
    )
    released = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=_INT64_MAX), required=False
    )
    checkpoint = fields.CharField(
        max_length=rg.READER_ID_LENGTH_MAX, required=False, allow_null=True
    )
    checkpointPositions = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=_INT64_MAX), required=False
    )


class CheckpointSerializer(serializers.Serializer[Any]):
    checkpointName = fields.CharField(max_length=rg.READER_ID_LENGTH_MAX)


class SubscriberCutsSerializer(serializers.Serializer[Any]):
    streamCuts = serializers.DictField(child=serializers.JSONField())


def _detail(group: ReaderGroup) -> dict[str, Any]:
    described = rg.describe(group)
    scope = group.scope.name
    return {
        "scopeName": scope,
        "readerGroupName": group.name,
        "streamList": sorted(described["configuration"]["streams"]),
        "onlineReaderIds": [r["readerId"] for r in described["readers"]],
        **described,
    }


class ReaderGroupsView(APIView):
    listing = ("GET",)
    audit_actions = {"POST": "readergroup.create"}

    def grant_resource(self, request: Request) -> str:
        """A create asks READ_UPDATE on the reader group it names (and READ on its streams)."""
        scope = self.kwargs["scope"]
        if request.method != "POST" or not isinstance(request.data, dict):
            return grants.scope_resource(scope)
        return grants.reader_group_resource(scope, str(request.data.get("readerGroupName", "")))

    @extend_schema(operation_id="listReaderGroups", responses=s.ReaderGroupsListSerializer)
    def get(self, request: Request, scope: str) -> Response:
        row = scopes.get_scope(scope)
        names = grants.visible(
            request.user,
            ReaderGroup.objects.filter(scope=row).order_by("name").values_list("name", flat=True),
            lambda name: grants.reader_group_resource(scope, name),
        )
        return Response({"readerGroups": [{"readerGroupName": n} for n in names]})

    @extend_schema(
        operation_id="createReaderGroup", request=CreateSerializer, responses=OpenApiTypes.OBJECT
    )
    def post(self, request: Request, scope: str) -> Response:
        data = _valid(CreateSerializer, request.data)
        audit.name_object(request, scope, data["readerGroupName"])
        config = _config(data)
        grants.authorize_streams(request.user, config.streams)
        group = rg.create_reader_group(segment_store(), scope, data["readerGroupName"], config)
        return Response(_detail(rg.get_reader_group(scope, group.name)), status=201)


class ReaderGroupView(APIView):
    audit_actions = {"DELETE": "readergroup.delete"}

    @extend_schema(operation_id="getReaderGroup", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, scope: str, reader_group: str) -> Response:
        return Response(_detail(rg.get_reader_group(scope, reader_group)))

    @extend_schema(operation_id="deleteReaderGroup", responses={204: None})
    def delete(self, request: Request, scope: str, reader_group: str) -> Response:
        rg.delete_reader_group(scope, reader_group)
        return Response(status=204)


class LagView(APIView):
    """The group's lag and status as the last lag round measured them (``controller_app.lag``):
    bytes, events and seconds per reader and for the group, and a status of OK, WARN, STALL,
    STOP or ERR with its reason."""

    @extend_schema(operation_id="getReaderGroupLag", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, scope: str, reader_group: str) -> Response:
        group = rg.get_reader_group(scope, reader_group)
        return Response(lag.lag_of(segment_store(), read_traffic, group))


class ResetView(APIView):
    audit_actions = {"POST": "readergroup.reset"}

    @extend_schema(
        operation_id="resetReaderGroup", request=ResetSerializer, responses=OpenApiTypes.OBJECT
    )
    def post(self, request: Request, scope: str, reader_group: str) -> Response:
        group = rg.get_reader_group(scope, reader_group)
        data = _valid(ResetSerializer, request.data)
        current = rg.ReaderGroupConfig.from_json(group.configuration)
        config = _config(data, current)
        grants.authorize_streams(request.user, config.streams)
        group = rg.reset_reader_group(segment_store(), scope, reader_group, config)
        return Response(_detail(group))


class ReadersView(APIView):
    @extend_schema(
        operation_id="addReader", request=ReaderSerializer, responses=OpenApiTypes.OBJECT
    )
    def post(self, request: Request, scope: str, reader_group: str) -> Response:
        data = _valid(ReaderSerializer, request.data)
        return Response(rg.add_reader(scope, reader_group, data["readerId"]), status=201)


class ReaderView(APIView):
    @extend_schema(operation_id="removeReader", request=LeaveSerializer, responses={204: None})
    def delete(self, request: Request, scope: str, reader_group: str, reader: str) -> Response:
        data = _valid(LeaveSerializer, request.data or {})
        rg.remove_reader(scope, reader_group, reader, data.get("positions"))
        return Response(status=204)


class SyncView(APIView):
    @extend_schema(operation_id="syncReader", request=SyncSerializer, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, scope: str, reader_group: str, reader: str) -> Response:
        data = _valid(SyncSerializer, request.data)
        answer = rg.sync(
            scope,
            reader_group,
            reader,
            rg.SyncRequest(
                generation=data["generation"],
                positions=data.get("positions", {}),
                ended=data.get("ended", {}),
                released=data.get("released", {}),
                checkpoint=data.get("checkpoint"),
                checkpoint_positions=data.get("checkpointPositions", {}),
            ),
        )
        return Response(answer)


class CheckpointsView(APIView):
    audit_actions = {"POST": "readergroup.checkpoint"}

    @extend_schema(
        operation_id="startCheckpoint", request=CheckpointSerializer, responses=OpenApiTypes.OBJECT
    )
    def post(self, request: Request, scope: str, reader_group: str) -> Response:
        name = _valid(CheckpointSerializer, request.data)["checkpointName"]
        rg.start_checkpoint(scope, reader_group, name)
        return Response(rg.checkpoint_status(scope, reader_group, name), status=202)


class CheckpointView(APIView):
    @extend_schema(operation_id="getCheckpoint", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, scope: str, reader_group: str, checkpoint: str) -> Response:
        return Response(rg.checkpoint_status(scope, reader_group, checkpoint))


class SubscriberCutsView(APIView):
    @extend_schema(
        operation_id="updateSubscriberStreamCuts",
        request=SubscriberCutsSerializer,
        responses={204: None},
    )
    def put(self, request: Request, scope: str, reader_group: str) -> Response:
        cuts = _valid(SubscriberCutsSerializer, request.data)["streamCuts"]
        given = {}
        for scoped, value in cuts.items():
            start = _start(scoped, value)
            if not isinstance(start, dict) or not all(
                rg.is_int(k) and rg.is_int(v) for k, v in start.items()
            ):
                raise InvalidArgumentError(f"the stream cut of {scoped} is not a stream cut")
            given[scoped] = {int(k): int(v) for k, v in start.items()}
        rg.update_subscriber_cuts(scope, reader_group, given)
        return Response(status=204)
