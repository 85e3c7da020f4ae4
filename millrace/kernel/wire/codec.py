"""Primitive encodings, the command registry, and frame encode/decode of the wire protocol.

Responsibility: turn frames into command objects and back, byte for byte as Pravega's segment
store wire protocol v17 lays them out (see ``docs/components/wire-protocol.md``), and raise
``ProtocolError`` -- never anything else -- for malformed input.

Commands are slotted dataclasses declared with the ``wire`` decorator, whose field spec mirrors
the command table of the protocol: ``"request_id L"`` is an int64, ``"offset L?"`` an optional
trailing int64 (read only if bytes remain, always written). Field kinds:

``L`` int64, ``I`` int32, ``B`` int8, ``Z`` bool, ``S`` u16-length UTF-8 string, ``U`` UUID (16
bytes), ``Buf`` int32-length bytes (decoded as ``bytes``), ``Data`` int32-length bytes (decoded as
a zero-copy ``memoryview`` of the payload), ``Rest`` every remaining byte (``memoryview``); more
kinds (table entries, lists) are registered with ``register_kind``.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

__all__ = [
    "FRAME_HEADER",
    "FRAME_HEADER_BYTES",
    "FRAME_PAYLOAD_BYTES_MAX",
    "NO_EVENT_NUMBER",
    "NO_REQUEST_ID",
    "OLDEST_COMPATIBLE_VERSION",
    "WIRE_VERSION",
    "Command",
    "ProtocolError",
    "Reader",
    "UnknownCommandError",
    "Writer",
    "command_types",
    "decode_frame",
    "encode_frame",
    "encode_parts",
    "field_spec",
    "register_kind",
    "request_id_of",
    "uuid_from_bytes",
    "wire",
]

#: Wire protocol version this implementation speaks (Java master) and the oldest it accepts.
WIRE_VERSION = 17
OLDEST_COMPATIBLE_VERSION = 5
#: Frame header: type int32 + payload length int32, big-endian.
FRAME_HEADER = struct.Struct(">ii")
FRAME_HEADER_BYTES = FRAME_HEADER.size
#: Largest payload a frame may carry (16 MiB - 1), as in Java and Rust.
FRAME_PAYLOAD_BYTES_MAX = 0x00FFFFFF
#: Java's Long.MIN_VALUE: "no event number yet" in AppendSetup.
NO_EVENT_NUMBER = -(2**63)
#: Request id of commands that have none (Hello, KeepAlive) and of optional fields left out.
NO_REQUEST_ID = -1

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_BYTE = struct.Struct(">b")
_USHORT = struct.Struct(">H")
_UUID = struct.Struct(">QQ")
_U64_MASK = (1 << 64) - 1
#: Data fields at least this long are kept as separate parts when encoding (no copy).
_ZERO_COPY_BYTES_MIN = 4096


class ProtocolError(Exception):
    """A frame that cannot be decoded (or a command that cannot be encoded)."""


class UnknownCommandError(ProtocolError):
    """A frame whose type code is not in the command table; its framing is still intact."""

    def __init__(self, type_code: int) -> None:
        super().__init__(f"unknown command type {type_code}")
        self.type_code = type_code


class Command:
    """Base of every wire command: a slotted dataclass registered with ``wire``, which sets
    ``TYPE`` (the type code)."""

    __slots__ = ()
    TYPE: ClassVar[int]


# --------------------------------------------------------------------------------------------
# primitives


class Reader:
    """A cursor over one frame payload; every read checks bounds and raises ProtocolError."""

    __slots__ = ("end", "mv", "pos")

    def __init__(self, mv: memoryview, pos: int = 0, end: int | None = None) -> None:
        self.mv = mv
        self.pos = pos
        self.end = len(mv) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int) -> int:
        """Consume ``n`` bytes and return where they start."""
        start = self.pos
        stop = start + n
        if n < 0 or stop > self.end:
            raise ProtocolError(
                f"truncated: {n} bytes needed at offset {start}, {self.end - start} left"
            )
        self.pos = stop
        return start

    def i64(self) -> int:
        value: int = _LONG.unpack_from(self.mv, self.take(8))[0]
        return value

    def i32(self) -> int:
        value: int = _INT.unpack_from(self.mv, self.take(4))[0]
        return value

    def i8(self) -> int:
        value: int = _BYTE.unpack_from(self.mv, self.take(1))[0]
        return value

    def flag(self) -> bool:
        value = self.mv[self.take(1)]
        if value > 1:
            raise ProtocolError(f"bad boolean byte {value}")
        return value == 1

    def string(self) -> str:
        n = _USHORT.unpack_from(self.mv, self.take(2))[0]
        start = self.take(n)
        return decode_utf(self.mv[start : start + n])

    def uid(self) -> uuid.UUID:
        start = self.take(16)
        return uuid_from_bytes(self.mv[start : start + 16])

    def data(self) -> memoryview:
        n = self.i32()
        if n < 0:
            raise ProtocolError(f"negative buffer length {n}")
        start = self.take(n)
        return self.mv[start : start + n]

    def buf(self) -> bytes:
        return bytes(self.data())

    def rest(self) -> memoryview:
        start = self.take(self.remaining())
        return self.mv[start : self.end]


#: Recently decoded UUIDs by their 16 bytes: writer ids repeat on every block and ack, and
#: building a ``uuid.UUID`` costs more than decoding the rest of a DataAppended.
_UUID_CACHE: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_ENTRIES_MAX = 65536


def uuid_from_bytes(raw: memoryview | bytes) -> uuid.UUID:
    """The UUID whose big-endian 16 bytes are ``raw`` (most significant long first)."""
    key = bytes(raw)
    found = _UUID_CACHE.get(key)
    if found is None:
        if len(_UUID_CACHE) >= _UUID_CACHE_ENTRIES_MAX:
            _UUID_CACHE.clear()
        found = _UUID_CACHE[key] = uuid.UUID(bytes=key)
    return found


def decode_utf(raw: memoryview | bytes) -> str:
    """UTF-8, falling back to Java's modified UTF-8 (NUL as C0 80, surrogate pairs)."""
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        pass
    try:
        text = bytes(raw).replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
        return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be")
    except UnicodeError as exc:
        raise ProtocolError(f"bad UTF-8 in string: {exc}") from exc


class Writer:
    """Builds one frame as a list of parts; large data buffers are referenced, not copied."""

    __slots__ = ("cur", "parts")

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview] = []
        self.cur = bytearray()

    def i64(self, value: int) -> None:
        self.cur += _LONG.pack(value)

    def i32(self, value: int) -> None:
        self.cur += _INT.pack(value)

    def i8(self, value: int) -> None:
        self.cur += _BYTE.pack(value)

    def flag(self, value: bool) -> None:
        self.cur.append(1 if value else 0)

    def string(self, value: str) -> None:
        raw = value.encode("utf-8")
        if len(raw) > 0xFFFF:
            raise ProtocolError(f"string of {len(raw)} bytes exceeds 65535")
        self.cur += _USHORT.pack(len(raw))
        self.cur += raw

    def uid(self, value: uuid.UUID) -> None:
        n = value.int
        self.cur += _UUID.pack(n >> 64, n & _U64_MASK)

    def raw(self, value: bytes | bytearray | memoryview) -> None:
        if len(value) >= _ZERO_COPY_BYTES_MIN:
            self.parts.append(self.cur)
            self.parts.append(value)
            self.cur = bytearray()
        else:
            self.cur += value

    def data(self, value: bytes | bytearray | memoryview) -> None:
        self.i32(len(value))
        self.raw(value)

    def finish(self, type_code: int) -> list[bytes | bytearray | memoryview]:
        """The frame: header first, then the payload parts."""
        parts = [*self.parts, self.cur]
        size = sum(len(p) for p in parts)
        if size > FRAME_PAYLOAD_BYTES_MAX:
            raise ProtocolError(f"payload of {size} bytes exceeds {FRAME_PAYLOAD_BYTES_MAX}")
        return [FRAME_HEADER.pack(type_code, size), *parts]


# --------------------------------------------------------------------------------------------
# field kinds and the command registry

ReadFn = Callable[[Reader], Any]
WriteFn = Callable[[Writer, Any], None]

_KINDS: dict[str, tuple[ReadFn, WriteFn]] = {
    "L": (Reader.i64, Writer.i64),
    "I": (Reader.i32, Writer.i32),
    "B": (Reader.i8, Writer.i8),
    "Z": (Reader.flag, Writer.flag),
    "S": (Reader.string, Writer.string),
    "U": (Reader.uid, Writer.uid),
    "Buf": (Reader.buf, Writer.data),
    "Data": (Reader.data, Writer.data),
    "Rest": (Reader.rest, Writer.raw),
}


def register_kind(name: str, read: ReadFn, write: WriteFn) -> None:
    """Make a sub-structure (e.g. ``TableEntries``) usable in ``wire`` field specs."""
    _KINDS[name] = (read, write)


@dataclasses.dataclass(slots=True)
class _Codec:
    cls: type
    decode: Callable[[Reader], Any]
    encode: Callable[[Any], list[bytes | bytearray | memoryview]]
    leads_with_request_id: bool
    spec: tuple[tuple[str, str, bool], ...]


_REGISTRY: dict[int, _Codec] = {}


def _parse_spec(cls: type, spec: Sequence[str]) -> list[tuple[str, str, bool]]:
    parsed = []
    for item in spec:
        name, kind = item.split()
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if kind not in _KINDS:
            raise TypeError(f"{cls.__name__}.{name}: unknown field kind {kind!r}")
        parsed.append((name, kind, optional))
    fields = dataclasses.fields(cls)
    if [f.name for f in fields] != [p[0] for p in parsed]:
        raise TypeError(f"{cls.__name__}: wire spec does not match the dataclass fields")
    for field, (_, _, optional) in zip(fields, parsed, strict=True):
        no_default = field.default is dataclasses.MISSING
        if optional and no_default and field.default_factory is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{field.name}: optional fields need a default")
    return parsed


def _generic_codec(cls: type, code: int, parsed: list[tuple[str, str, bool]]) -> _Codec:
    readers = [(_KINDS[kind][0], optional) for _, kind, optional in parsed]
    writers = [(name, _KINDS[kind][1]) for name, kind, _ in parsed]

    def decode(r: Reader) -> Any:
        values = []
        for read, optional in readers:
            if optional and r.pos == r.end:
                break
            values.append(read(r))
        return cls(*values)

    def encode(cmd: Any) -> list[bytes | bytearray | memoryview]:
        w = Writer()
        for name, write in writers:
            write(w, getattr(cmd, name))
        return w.finish(code)

    leads = bool(parsed) and parsed[0][:2] == ("request_id", "L")
    return _Codec(cls, decode, encode, leads, tuple(parsed))


def wire(code: int, *spec: str) -> Callable[[type], type]:
    """Register a dataclass as the command with type ``code`` and the given field spec."""

    def register(cls: type) -> type:
        if code in _REGISTRY:
            raise TypeError(f"type code {code} registered twice")
        cls.TYPE = code  # type: ignore[attr-defined]
        _REGISTRY[code] = _generic_codec(cls, code, _parse_spec(cls, spec))
        return cls

    return register


def override_codec(
    cls: type,
    *,
    decode: Callable[[Reader], Any] | None = None,
    encode: Callable[[Any], list[bytes | bytearray | memoryview]] | None = None,
) -> None:
    """Replace the generic codec of a hot command by a hand-tuned one (same bytes)."""
    codec = _REGISTRY[cls.TYPE]  # type: ignore[attr-defined]
    if decode is not None:
        codec.decode = decode
    if encode is not None:
        codec.encode = encode


def command_types() -> dict[int, type]:
    """Type code -> command class, for every registered command."""
    return {code: codec.cls for code, codec in sorted(_REGISTRY.items())}


def field_spec(type_code: int) -> tuple[tuple[str, str, bool], ...]:
    """(name, kind, optional) of each field of a command, in wire order."""
    return _REGISTRY[type_code].spec


# --------------------------------------------------------------------------------------------
# frames


def decode_frame(
    type_code: int, payload: bytes | bytearray | memoryview, *, lenient: bool = False
) -> Any:
    """Decode one frame's payload. ``lenient`` ignores trailing bytes (replies from newer peers).

    Raises ProtocolError (UnknownCommandError for an unknown type code) and nothing else.
    """
    codec = _REGISTRY.get(type_code)
    if codec is None:
        raise UnknownCommandError(type_code)
    try:
        mv = memoryview(payload)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        if mv.nbytes > FRAME_PAYLOAD_BYTES_MAX:
            raise ProtocolError(f"payload of {mv.nbytes} bytes exceeds {FRAME_PAYLOAD_BYTES_MAX}")
        reader = Reader(mv)
        cmd = codec.decode(reader)
        if reader.pos != reader.end and not lenient:
            raise ProtocolError(
                f"{codec.cls.__name__}: {reader.end - reader.pos} trailing bytes after the fields"
            )
        return cmd
    except ProtocolError:
        raise
    except Exception as exc:  # any decoding slip must surface as a ProtocolError
        raise ProtocolError(f"malformed frame of type {type_code}: {exc!r}") from exc


def encode_parts(cmd: Any) -> list[bytes | bytearray | memoryview]:
    """Encode a command into frame parts (header first) without copying large buffers."""
    try:
        codec = _REGISTRY[cmd.TYPE]
        if not isinstance(cmd, codec.cls):
            raise ProtocolError(f"{type(cmd).__name__} is not a registered command")
        return codec.encode(cmd)
    except ProtocolError:
        raise
    except Exception as exc:
        raise ProtocolError(f"cannot encode {type(cmd).__name__}: {exc!r}") from exc


def encode_frame(cmd: Any) -> bytes:
    """Encode a command into one frame (header + payload)."""
    return b"".join(encode_parts(cmd))


def request_id_of(type_code: int, payload: bytes | bytearray | memoryview) -> int | None:
    """The request id of a (possibly malformed) request whose first field is its request id."""
    codec = _REGISTRY.get(type_code)
    if codec is None or not codec.leads_with_request_id or len(payload) < 8:
        return None
    request_id: int = _LONG.unpack_from(payload, 0)[0]
    return request_id
