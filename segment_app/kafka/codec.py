"""Kafka's binary protocol as the listener reads and writes it, through kio's entities.

Responsibility: the API keys and versions this node speaks (``SUPPORTED``), a request frame
read into its header and body (``decode_request``), a reply built for whichever version was
asked (``build``: the fields a version has, from one set of values) and framed
(``encode_reply``), and the reply that refuses a request (``error_reply``). kio was chosen over
kafka-python's protocol classes by measurement (``bench/kafka_codecs.py``, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import typing
import uuid
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

__all__ = [
    "SUPPORTED",
    "DecodeError",
    "ErrorCode",
    "KafkaRequest",
    "build",
    "decode_request",
    "encode_reply",
    "error_reply",
]

#: API key: (lowest, highest) version this node answers. Versions that name topics by id
#: alone (Fetch 13+, Produce 10+ in kio's set) are left out: topics are named here.
SUPPORTED: Mapping[int, tuple[int, int]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (1, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    11: (0, 7),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 4),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 5),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 4),  # InitProducerId
    32: (1, 4),  # DescribeConfigs
    36: (0, 2),  # SaslAuthenticate
    60: (0, 1),  # DescribeCluster
}

API_VERSIONS = 18
_MISSING: Any = dataclasses.MISSING
_HEAD = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


class DecodeError(Exception):
    """A frame that does not decode; ``code`` is Kafka's error code to answer with (when the
    header could be read: ``correlation_id`` is not None)."""

    def __init__(self, message: str, code: ErrorCode, key: int = -1, version: int = -1,
                 correlation_id: int | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.code, self.key, self.version, self.correlation_id = code, key, version, correlation_id


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaRequest:
    key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any


@functools.cache
def _request_reader(key: int, version: int) -> tuple[Any, Any, Any]:
    schema = load_request_schema(key, version)
    return schema, entity_reader(schema.__header_schema__), entity_reader(schema)


@functools.cache
def response_schema(key: int, version: int) -> Any:
    return load_response_schema(key, version)


@functools.cache
def _writers(key: int, version: int) -> tuple[Any, Any]:
    schema = response_schema(key, version)
    return entity_writer(schema.__header_schema__), entity_writer(schema)


def decode_request(frame: bytes) -> KafkaRequest:
    """The request in ``frame`` (the bytes after the size); ``DecodeError`` if it is not one
    this node answers or does not decode."""
    if len(frame) < _HEAD.size:
        raise DecodeError(f"a request of {len(frame)} bytes is shorter than its header",
                          ErrorCode.corrupt_message)  # fmt: skip
    key, version, correlation_id = _HEAD.unpack_from(frame)
    span = SUPPORTED.get(key)
    if span is None:
        raise DecodeError(f"API key {key} is not served by Millrace",
                          ErrorCode.unsupported_version, key, version, correlation_id)  # fmt: skip
    if not span[0] <= version <= span[1]:
        if key == API_VERSIONS:  # answered in v0 with the versions: the client retries
            return KafkaRequest(key, version, correlation_id, None, None)
        raise DecodeError(
            f"API key {key} version {version} is not served (versions {span[0]}-{span[1]})",
            ErrorCode.unsupported_version, key, version, correlation_id,
        )  # fmt: skip
    _, read_header, read_body = _request_reader(key, version)
    try:
        header, used = read_header(frame, 0)
        body, _ = read_body(frame, used)
    except Exception as exc:  # (kio raises what the bytes make it raise)
        raise DecodeError(
            f"API key {key} v{version}: the request does not decode: {exc}",
            ErrorCode.corrupt_message, key, version, correlation_id,
        ) from None  # fmt: skip
    # (Bytes left after the body are not refused: Kafka's brokers ignore them too, and kio's
    # reader stops early after a null array of Metadata v9+.)
    return KafkaRequest(key, version, correlation_id, header.client_id, body)


def encode_reply(key: int, version: int, correlation_id: int, reply: Any) -> bytes:
    """The framed reply (size, header, body)."""
    write_header, write_body = _writers(key, version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header_schema = response_schema(key, version).__header_schema__
    write_header(out, header_schema(correlation_id=correlation_id))
    write_body(out, reply)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


# -- building replies -----------------------------------------------------------------------------


def build(schema: Any, values: Mapping[str, Any]) -> Any:
    """An entity of ``schema`` from ``values``: the fields ``schema`` has are taken (nested
    entities from mappings, lists of them from lists of mappings), error codes made
    ``ErrorCode``, the rest given their default or a zero of their type."""
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(schema):
        if field.name in values:
            fields[field.name] = _value(field, values[field.name])
        elif field.default is not _MISSING or field.default_factory is not _MISSING:
            continue  # (kio's default: a tagged field left out)
        else:
            fields[field.name] = _zero(field)
    return schema(**fields)


def _nested(field: dataclasses.Field[Any]) -> Any:
    """The entity class of a field holding entities (or a tuple of them), else None."""
    kind = field.type
    args = typing.get_args(kind)
    if typing.get_origin(kind) is tuple and args and dataclasses.is_dataclass(args[0]):
        return args[0]
    for arg in args or (kind,):
        if isinstance(arg, type) and dataclasses.is_dataclass(arg):
            return arg
    return None


def _value(field: dataclasses.Field[Any], value: Any) -> Any:
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int | float):
        return datetime.timedelta(milliseconds=value)
    entity = _nested(field)
    if entity is not None:
        if typing.get_origin(field.type) is tuple:
            return tuple(v if dataclasses.is_dataclass(v) else build(entity, v) for v in value)
        if isinstance(value, Mapping):
            return build(entity, value)
    if typing.get_origin(field.type) is tuple and isinstance(value, list):
        return tuple(value)
    return value


def _zero(field: dataclasses.Field[Any]) -> Any:
    kind = field.type
    kafka_type = field.metadata.get("kafka_type")
    args = typing.get_args(kind)
    if kafka_type == "error_code":
        return ErrorCode.none
    if typing.get_origin(kind) is tuple:
        return ()
    if type(None) in args:
        return None
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "string":
        return ""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, datetime.UTC)
    entity = _nested(field)
    if entity is not None:
        return build(entity, {})
    return 0


def error_reply(key: int, version: int, code: ErrorCode) -> Any:
    """A reply to request ``key`` v``version`` with ``code`` in its top-level error field, or
    in each entry where it has none (no entries: nothing asked is answered)."""
    schema = response_schema(key, version)
    names = {field.name for field in dataclasses.fields(schema)}
    values: dict[str, Any] = {}
    if "error_code" in names:
        values["error_code"] = code
    return build(schema, values)
