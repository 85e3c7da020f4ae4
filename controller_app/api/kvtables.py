"""REST views of key-value tables (Millrace's addition: Pravega has no REST API for them).

Tables: list, create, get (configuration, state and partitions), delete, and a delegation
token for their table segments. Entries: list with a continuation token and a prefix, and get,
put and delete of one key, conditional on its version with ``If-Match: "<version>"`` (or
``If-None-Match: *``: only if absent), answered with ``ETag: "<version>"``.

A key in a path or a prefix is the key's text (UTF-8); with ``keyEncoding=base64`` it is the
key's bytes in URL-safe base64. A value is given as JSON (``{"value": "text"}`` or
``{"valueBase64": "..."}``) or as the raw body of any other content type, and given back in
JSON with both forms (``value`` is null when the bytes are not UTF-8 text).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import parsers, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app import audit
from controller_app import selectors as sel
from controller_app.access import grants
from controller_app.access.tokens import stream_token_for
from controller_app.api import fields
from controller_app.api import serializers as s
from controller_app.choices import KvtState
from controller_app.errors import InvalidArgumentError
from controller_app.models import KeyValueTable
from controller_app.ports import StoredEntry
from controller_app.segment_client import segment_store
from controller_app.workflows import kvtables as kv
from millrace.kernel.kvt import KVTABLE_SUFFIX, KvtConfig, kvt_segment_name

__all__ = ["EntriesView", "EntryView", "KvtTokenView", "KvtView", "KvtsView"]

#: Most entries in one listed page.
PAGE_MAX = 1000


class KvtCreateSerializer(serializers.Serializer[Any]):
    kvtName = fields.CharField(max_length=240)
    partitionCount = serializers.IntegerField(min_value=1, max_value=1024)
    primaryKeyLength = serializers.IntegerField(min_value=1, max_value=8192)
    secondaryKeyLength = serializers.IntegerField(min_value=0, max_value=8191, default=0)


class ValueSerializer(serializers.Serializer[Any]):
    value = fields.CharField(required=False, allow_blank=True, trim_whitespace=False)
    valueBase64 = fields.CharField(required=False, allow_blank=True)


class _RawParser(parsers.BaseParser):
    """Any body that is not JSON: the value's bytes as they are."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = stream.read(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1) if stream else b""
        if len(data) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise fields.BodyTooLargeError(fields.body_limit_message())
        return data


def describe(row: KeyValueTable, *, nodes: bool = False) -> dict[str, Any]:
    """A table as REST and the console show it; with ``nodes``, each partition's node (where
    clients send its entries: they ask again when it moves)."""
    scope = row.scope.name
    described: dict[str, Any] = {
        "scopeName": scope,
        "kvtName": row.name,
        "state": str(row.state),
        "partitionCount": row.partitions,
        "primaryKeyLength": row.primary_key_length,
        "secondaryKeyLength": row.secondary_key_length,
        "placement": row.placement,
        "segments": [
            {"partition": n, "name": kvt_segment_name(scope, row.name, n)}
            for n in range(row.partitions)
        ],
    }
    if nodes and row.state == KvtState.ACTIVE:
        count = sel.container_count()
        for segment in described["segments"]:
            uri = sel.node_uri(segment["name"], count)
            segment.update(host=uri.host, port=uri.port, tls=uri.tls)
    return described


def entry_json(entry: StoredEntry) -> dict[str, Any]:
    return {
        "key": _text(entry.key),
        "keyBase64": base64.urlsafe_b64encode(entry.key).decode(),
        "value": _text(entry.value),
        "valueBase64": base64.b64encode(entry.value).decode(),
        "version": entry.version,
    }


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _key(request: Request, text: str) -> bytes:
    if request.query_params.get("keyEncoding", "text") == "base64":
        try:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(f"{text!r} is not URL-safe base64") from None
    if request.query_params.get("keyEncoding", "text") != "text":
        raise InvalidArgumentError("keyEncoding is text or base64")
    return text.encode("utf-8")


def _version(request: Request) -> int:
    """The condition of a change: ``If-Match: "<version>"``, ``If-None-Match: *`` (absent),
    or none."""
    match = request.headers.get("If-Match")
    if request.headers.get("If-None-Match", "").strip() == "*":
        if match is not None:
            raise InvalidArgumentError("give If-Match or If-None-Match, not both")
        return kv.NOT_EXISTS
    if match is None:
        return kv.NO_VERSION
    tag = match.strip().removeprefix("W/").strip('"')
    if not tag.isdigit():
        raise InvalidArgumentError(
            f'If-Match {match!r}: give the version the entry must have, as "<version>"'
        )
    return int(tag)


def _value(request: Request) -> bytes:
    data = request.data
    if isinstance(data, bytes):
        return data
    checked = ValueSerializer(data=data)
    checked.is_valid(raise_exception=True)
    given = checked.validated_data
    if ("value" in given) == ("valueBase64" in given):
        raise InvalidArgumentError("give the value as one of value or valueBase64")
    if "value" in given:
        return str(given["value"]).encode("utf-8")
    try:
        return base64.b64decode(given["valueBase64"], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgumentError("valueBase64 is not base64") from None


class KvtsView(APIView):
    listing = ("GET",)
    audit_actions = {"POST": "kvtable.create"}

    @extend_schema(operation_id="listKeyValueTables", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, scope: str) -> Response:
        rows = grants.readable(request.user, kv.list_kvtables(scope),
                               lambda row: grants.kvtable_resource(scope, row.name))  # fmt: skip
        return Response({"kvtables": [describe(row) for row in rows]})

    @extend_schema(
        operation_id="createKeyValueTable",
        request=KvtCreateSerializer,
        responses=OpenApiTypes.OBJECT,
    )
    def post(self, request: Request, scope: str) -> Response:
        checked = KvtCreateSerializer(data=request.data)
        checked.is_valid(raise_exception=True)
        data = checked.validated_data
        audit.name_object(request, scope, data["kvtName"])
        config = KvtConfig(
            data["partitionCount"], data["primaryKeyLength"], data["secondaryKeyLength"]
        )
        row = kv.create_kvtable(segment_store(), scope, data["kvtName"], config)
        return Response(describe(row), status=201)


class KvtView(APIView):
    audit_actions = {"DELETE": "kvtable.delete"}

    @extend_schema(operation_id="getKeyValueTable", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, scope: str, kvtable: str) -> Response:
        return Response(describe(kv.get_kvtable(scope, kvtable), nodes=True))

    @extend_schema(operation_id="deleteKeyValueTable", responses={204: None})
    def delete(self, request: Request, scope: str, kvtable: str) -> Response:
        kv.delete_kvtable(segment_store(), scope, kvtable)
        return Response(status=204)


class KvtTokenView(APIView):
    needs = {"POST": "read"}

    @extend_schema(
        operation_id="getKeyValueTableDelegationToken", request=None,
        responses=s.DelegationTokenSerializer,
    )  # fmt: skip
    def post(self, request: Request, scope: str, kvtable: str) -> Response:
        """A segment store delegation token for the table's segments: read and update for an
        operator, read only for a viewer."""
        kv.get_kvtable(scope, kvtable)
        token = stream_token_for(request.user, scope, kvtable + KVTABLE_SUFFIX)
        ttl = settings.MILLRACE.token_ttl_seconds
        return Response({"token": token, "expiresIn": ttl if token else 0})


_KEY_ENCODING = OpenApiParameter("keyEncoding", str, enum=["text", "base64"], required=False)


class EntriesView(APIView):
    @extend_schema(
        operation_id="listKeyValueTableEntries", responses=OpenApiTypes.OBJECT,
        parameters=[
            OpenApiParameter("prefix", str, required=False),
            OpenApiParameter("limit", int, required=False),
            OpenApiParameter("continuationToken", str, required=False),
            _KEY_ENCODING,
        ],
    )  # fmt: skip
    def get(self, request: Request, scope: str, kvtable: str) -> Response:
        """Entries in partition, then key order: a page of up to ``limit`` (100) and the token
        of the next page (empty after the last)."""
        params = request.query_params
        limit = params.get("limit", "100")
        if not limit.isdigit() or not 1 <= int(limit) <= PAGE_MAX:
            raise InvalidArgumentError(f"limit is a number from 1 to {PAGE_MAX}")
        prefix = _key(request, params.get("prefix", "")) if params.get("prefix") else b""
        found, token = kv.list_entries(
            segment_store(), scope, kvtable, limit=int(limit),
            token=params.get("continuationToken", ""), prefix=prefix,
        )  # fmt: skip
        return Response({"entries": [entry_json(e) for e in found], "continuationToken": token})


class EntryView(APIView):
    parser_classes = [fields.JSONParser, _RawParser]
    audit_actions = {"PUT": "kvtable.put", "DELETE": "kvtable.remove"}

    @extend_schema(operation_id="getKeyValueTableEntry", responses=OpenApiTypes.OBJECT,
                   parameters=[_KEY_ENCODING])  # fmt: skip
    def get(self, request: Request, scope: str, kvtable: str, key: str) -> Response:
        entry = kv.get_entry(segment_store(), scope, kvtable, _key(request, key))
        return Response(entry_json(entry), headers={"ETag": f'"{entry.version}"'})

    @extend_schema(operation_id="putKeyValueTableEntry", request=ValueSerializer,
                   responses=OpenApiTypes.OBJECT, parameters=[_KEY_ENCODING])  # fmt: skip
    def put(self, request: Request, scope: str, kvtable: str, key: str) -> Response:
        version = kv.put_entry(
            segment_store(), scope, kvtable, _key(request, key), _value(request), _version(request)
        )
        return Response({"version": version}, headers={"ETag": f'"{version}"'})

    @extend_schema(operation_id="deleteKeyValueTableEntry", responses={204: None},
                   parameters=[_KEY_ENCODING])  # fmt: skip
    def delete(self, request: Request, scope: str, kvtable: str, key: str) -> Response:
        kv.remove_entry(segment_store(), scope, kvtable, _key(request, key), _version(request))
        return Response(status=204)
