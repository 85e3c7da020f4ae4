"""Protobuf schemas: ``.proto`` text compiled by ``protoc`` (grpcio-tools), or a serialized
``FileDescriptorProto`` in base64 (what Confluent's Python serializer registers), checked by
protobuf's own descriptor pool.

References are the imported files, each by its import path; Google's well-known types
(``google/protobuf/*.proto``) need none. Two versions are compatible when the bytes one writes
the other reads as the same fields (Confluent's rules): no message removed, no field's number
given another wire type (``int32``/``int64``/``uint32``/``uint64``/``bool``/enums are one,
``sint32``/``sint64``, ``fixed32``/``sfixed32``, ``fixed64``/``sfixed64``, ``string``/``bytes``),
no field turned repeated or single, no field moved into a oneof that already has fields;
a message field's type followed in turn. Fields added or removed are compatible.

``decode`` reads an event's body as Confluent writes it: the message indexes (zigzag varints:
their count, then the path from the file's messages to the nested one; a lone 0 means the
first message), then the message, parsed by a class made from the schema's descriptors.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError

from controller_app.registry.schema_types import InvalidSchemaError, Reference, UndecodableError

__all__ = ["ProtobufModel", "decode", "incompatibilities", "parse", "serialized"]

_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
#: The file name a schema's own text is compiled under.
MAIN_FILE = "schema.proto"
_F = descriptor_pb2.FieldDescriptorProto
#: Field types whose values share a wire encoding (and read each other's).
_WIRE_GROUP = {
    _F.TYPE_INT32: "varint", _F.TYPE_INT64: "varint", _F.TYPE_UINT32: "varint",
    _F.TYPE_UINT64: "varint", _F.TYPE_BOOL: "varint", _F.TYPE_ENUM: "varint",
    _F.TYPE_SINT32: "zigzag", _F.TYPE_SINT64: "zigzag",
    _F.TYPE_FIXED32: "fixed32", _F.TYPE_SFIXED32: "fixed32", _F.TYPE_FLOAT: "float",
    _F.TYPE_FIXED64: "fixed64", _F.TYPE_SFIXED64: "fixed64", _F.TYPE_DOUBLE: "double",
    _F.TYPE_STRING: "bytes", _F.TYPE_BYTES: "bytes",
    _F.TYPE_MESSAGE: "message", _F.TYPE_GROUP: "group",
}  # fmt: skip


class ProtobufModel:
    """The schema's file and the files it imports (by name), as descriptor protos."""

    def __init__(self, main: descriptor_pb2.FileDescriptorProto, files: dict[str, Any]) -> None:
        self.main = main
        self.files = files
        #: The pool of the schema's files and message classes by full name (``decode``'s).
        self._pool: descriptor_pool.DescriptorPool | None = None
        self._classes: dict[str, Any] = {}
        #: Every message of every file, by full name (``.package.Outer.Inner``).
        self.messages: dict[str, descriptor_pb2.DescriptorProto] = {}
        for proto in [*files.values(), main]:
            prefix = f".{proto.package}" if proto.package else ""
            for message in proto.message_type:
                self._index(prefix, message)

    def _index(self, prefix: str, message: descriptor_pb2.DescriptorProto) -> None:
        name = f"{prefix}.{message.name}"
        self.messages[name] = message
        for nested in message.nested_type:
            self._index(name, nested)

    def top_messages(self) -> list[str]:
        """The full names of the schema's own messages, nested ones included."""
        prefix = f".{self.main.package}" if self.main.package else ""
        names: list[str] = []

        def walk(base: str, message: descriptor_pb2.DescriptorProto) -> None:
            names.append(f"{base}.{message.name}")
            for nested in message.nested_type:
                walk(f"{base}.{message.name}", nested)

        for message in self.main.message_type:
            walk(prefix, message)
        return names

    def message_class(self, indexes: list[int]) -> Any:
        """The class of the message at ``indexes`` (top-level message, then nested ones)."""
        found: Any = self.main
        name = self.main.package
        for index in indexes:
            nested = found.message_type if found is self.main else found.nested_type
            if not 0 <= index < len(nested):
                raise UndecodableError(f"no message at index path {indexes} of the schema")
            found = nested[index]
            name = f"{name}.{found.name}" if name else found.name
        if name not in self._classes:
            if self._pool is None:
                self._pool = _pool_of(self.main, self.files)
            descriptor = self._pool.FindMessageTypeByName(name)
            self._classes[name] = message_factory.GetMessageClass(descriptor)
        return self._classes[name]


def _decode(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor a base64 text holds (``None``: the text is not base64: ``.proto``)."""
    if not _BASE64.fullmatch(text):
        return None
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(text, validate=False)
        )
    except (binascii.Error, DecodeError, ValueError):
        return None
    return proto if proto.message_type or proto.enum_type or proto.syntax else None


def _reference_files(references: tuple[Reference, ...], out: dict[str, str]) -> None:
    for ref in references:
        if ref.schema_type != "PROTOBUF":
            raise InvalidSchemaError(f"reference {ref.name!r} is {ref.schema_type}, not PROTOBUF")
        _reference_files(ref.references, out)
        out[ref.name] = ref.text


def _compile(files: dict[str, str], target: str) -> descriptor_pb2.FileDescriptorSet:
    """``protoc`` over ``files`` (name -> .proto text or base64), for ``target``."""
    with tempfile.TemporaryDirectory(prefix="millrace-proto-") as root:
        given = descriptor_pb2.FileDescriptorSet()
        for name, text in files.items():
            decoded = _decode(text)
            if decoded is not None:  # (compiled already: handed to protoc as a descriptor set)
                decoded.name = name
                given.file.append(decoded)
                continue
            path = os.path.join(root, name)
            if os.path.relpath(path, root).startswith(".."):
                raise InvalidSchemaError(f"import path {name!r} leaves the schema's files")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as file:
                file.write(text)
        out = os.path.join(root, "out.pb")
        argv = [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{_well_known()}",
                f"--descriptor_set_out={out}", "--include_imports"]  # fmt: skip
        if given.file:
            given_path = os.path.join(root, "given.pb")
            with open(given_path, "wb") as file:
                file.write(given.SerializeToString())
            argv.append(f"--descriptor_set_in={given_path}")
        done = subprocess.run([*argv, target], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            why = done.stderr.strip().replace(root + os.sep, "") or f"protoc exit {done.returncode}"
            raise InvalidSchemaError(f"invalid Protobuf schema: {why}")
        with open(out, "rb") as file:
            return descriptor_pb2.FileDescriptorSet.FromString(file.read())


def _well_known() -> str:
    import grpc_tools

    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


def parse(
    text: str, references: tuple[Reference, ...], *, normalize: bool
) -> tuple[ProtobufModel, str, str]:
    files: dict[str, str] = {}
    _reference_files(references, files)
    decoded = _decode(text.strip())
    if decoded is not None:
        main = decoded
        main.name = MAIN_FILE
        imports = {name: _compile(files, name).file[-1] for name in files}
        _check_pool(main, imports)
    else:
        files[MAIN_FILE] = text
        compiled = _compile(files, MAIN_FILE)
        main = compiled.file[-1]
        imports = {f.name: f for f in compiled.file[:-1]}
    stored = text.strip() if not normalize else serialized_of(main)
    return ProtobufModel(main, imports), stored, main.SerializeToString(deterministic=True).hex()


def _check_pool(main: descriptor_pb2.FileDescriptorProto, imports: dict[str, Any]) -> None:
    """A serialized descriptor must make sense with its imports (as a reader's pool loads it)."""
    try:
        _pool_of(main, imports)
    except (TypeError, KeyError) as exc:
        raise InvalidSchemaError(f"invalid Protobuf schema: {exc}") from None


def _pool_of(
    main: descriptor_pb2.FileDescriptorProto, imports: dict[str, Any]
) -> descriptor_pool.DescriptorPool:
    """A pool of the schema's file, its imports and the well-known types it uses."""
    pool = descriptor_pool.DescriptorPool()
    default = _well_known_pool()
    for proto in [main, *imports.values()]:
        for dependency in proto.dependency:
            if dependency not in imports:
                with_name = default.FindFileByName(dependency)
                with contextlib.suppress(TypeError):  # (added already)
                    pool.AddSerializedFile(with_name.serialized_pb)
    for proto in imports.values():
        pool.Add(proto)
    pool.Add(main)
    return pool


def _well_known_pool() -> descriptor_pool.DescriptorPool:
    """The default pool, with Google's well-known types loaded into it."""
    from google.protobuf import (  # noqa: F401 (each adds its file to the default pool)
        any_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    return descriptor_pool.Default()


def serialized_of(main: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.standard_b64encode(main.SerializeToString()).decode("ascii")


def serialized(model: ProtobufModel) -> str:
    """The schema as a base64 ``FileDescriptorProto`` (``?format=serialized``)."""
    return serialized_of(model.main)


def incompatibilities(reader: ProtobufModel, writer: ProtobufModel) -> list[str]:
    found: list[str] = []
    for name in writer.top_messages():
        if name not in reader.messages:
            found.append(f"message {name.lstrip('.')} removed")
            continue
        _compare_message(name, reader, writer, found)
    return found


def _compare_message(
    name: str, reader: ProtobufModel, writer: ProtobufModel, found: list[str]
) -> None:
    mine, theirs = reader.messages[name], writer.messages[name]
    fields = {field.number: field for field in mine.field}
    oneofs_before = _oneof_sizes(theirs)
    for field in theirs.field:
        other = fields.get(field.number)
        if other is None:
            continue
        where = f"{name.lstrip('.')}.{field.name} ({field.number})"
        if _WIRE_GROUP.get(other.type) != _WIRE_GROUP.get(field.type):
            found.append(f"field {where} changed type")
        elif other.type == _F.TYPE_MESSAGE and other.type_name != field.type_name:
            found.append(f"field {where} changed message type")
        if (other.label == _F.LABEL_REPEATED) != (field.label == _F.LABEL_REPEATED):
            found.append(f"field {where} changed between repeated and single")
        moved_in = other.HasField("oneof_index") and not field.HasField("oneof_index")
        if moved_in and oneofs_before.get(_oneof_name(mine, other), 0) > 0:
            found.append(f"field {where} moved into a oneof that has fields")


def _oneof_name(message: descriptor_pb2.DescriptorProto, field: Any) -> str:
    return str(message.oneof_decl[field.oneof_index].name)


def _oneof_sizes(message: descriptor_pb2.DescriptorProto) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for field in message.field:
        if field.HasField("oneof_index") and not field.proto3_optional:
            name = _oneof_name(message, field)
            sizes[name] = sizes.get(name, 0) + 1
    return sizes


def _varints(body: bytes, at: int, count: int) -> tuple[list[int], int]:
    """``count`` zigzag varints of ``body`` from ``at``, and where they end."""
    values = []
    for _ in range(count):
        value = shift = 0
        while True:
            if at >= len(body) or shift > 63:
                raise UndecodableError("the message indexes are cut short")
            byte = body[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        values.append((value >> 1) ^ -(value & 1))
    return values, at


def decode(model: ProtobufModel, body: bytes) -> Any:
    (count,), at = _varints(body, 0, 1)
    if not 0 <= count <= 64:
        raise UndecodableError(f"{count} message indexes")
    indexes, at = _varints(body, at, count) if count else ([0], at)
    message = model.message_class(indexes)()
    try:
        message.ParseFromString(body[at:])
    except DecodeError as exc:
        raise UndecodableError(f"not Protobuf of its schema: {exc}") from None
    return json_format.MessageToDict(message, preserving_proto_field_name=True)
