"""Key-value tables: what the controller, the clients and the console share about them.

A key-value table (Pravega's KVT) lives in a scope and is stored in ``partitions`` table
segments, ``<scope>/<table>_kvtable/<n>.#epoch.0`` for n in 0 .. partitions - 1 (Pravega's
names). A key is a *primary key* of exactly ``primary_key_length`` bytes followed by a
*secondary key* of exactly ``secondary_key_length`` bytes (0: none); all the keys of one
primary key are in one partition, chosen by a hash of the primary key, so an update of several
keys of one primary key is one table-segment batch: all or nothing.
"""

from __future__ import annotations

import dataclasses
import struct

import mmh3

from millrace.kernel.naming import qualified_segment_name, segment_id

__all__ = [
    "KEY_BYTES_MAX",
    "KVTABLE_SUFFIX",
    "PARTITIONS_MAX",
    "VALUE_BYTES_MAX",
    "KvtConfig",
    "KvtError",
    "check_value",
    "kvt_segment_name",
    "page_token",
    "parse_page_token",
    "partition_of",
]

#: What a table's segments' stream part ends with (Pravega's ``_kvtable``).
KVTABLE_SUFFIX = "_kvtable"
#: Longest key, primary and secondary together, and longest value (table segments' limits,
#: which are Pravega's).
KEY_BYTES_MAX = 8192
VALUE_BYTES_MAX = 1024 * 1024 - KEY_BYTES_MAX
#: Most partitions of one table.
PARTITIONS_MAX = 1024
#: Seed of the partition hash: Millrace's own (Pravega's Java client seeds Guava's MurmurHash3
#: with a negative number, which mmh3's unsigned 32-bit seed cannot give; ADR 0009).
_SEED = 0x5E52B6B7
_FRACTION_BITS = 52


class KvtError(ValueError):
    """A key, a value or a configuration a key-value table cannot take."""


@dataclasses.dataclass(frozen=True, slots=True)
class KvtConfig:
    """A table's configuration (Pravega's ``KeyValueTableConfiguration``)."""

    partitions: int
    primary_key_length: int
    secondary_key_length: int = 0

    def validate(self) -> KvtConfig:
        for name, value, low in (
            ("partition count", self.partitions, 1),
            ("primary key length", self.primary_key_length, 1),
            ("secondary key length", self.secondary_key_length, 0),
        ):
            if type(value) is not int or value < low:
                raise KvtError(f"{name} must be an integer >= {low}, not {value!r}")
        if self.partitions > PARTITIONS_MAX:
            raise KvtError(f"partition count {self.partitions} is over {PARTITIONS_MAX}")
        if self.primary_key_length + self.secondary_key_length > KEY_BYTES_MAX:
            raise KvtError(
                f"primary and secondary key lengths ({self.primary_key_length} + "
                f"{self.secondary_key_length}) are over {KEY_BYTES_MAX} bytes"
            )
        return self

    def key(self, primary: bytes, secondary: bytes = b"") -> bytes:
        """The table segment key of ``primary`` + ``secondary``; ``KvtError`` unless each has
        its table's exact length."""
        if not isinstance(primary, bytes) or len(primary) != self.primary_key_length:
            raise KvtError(
                f"a primary key of this table is {self.primary_key_length} bytes, "
                f"not {_length(primary)}"
            )
        if not isinstance(secondary, bytes) or len(secondary) != self.secondary_key_length:
            raise KvtError(
                f"a secondary key of this table is {self.secondary_key_length} bytes, "
                f"not {_length(secondary)}"
            )
        return primary + secondary

    def whole_key(self, key: object) -> bytes:
        """``key``, primary and secondary together, if it has their length; else ``KvtError``."""
        length = self.primary_key_length + self.secondary_key_length
        if not isinstance(key, bytes) or len(key) != length:
            raise KvtError(
                f"a key of this table is {length} bytes (a primary key of "
                f"{self.primary_key_length} and a secondary key of {self.secondary_key_length}), "
                f"not {_length(key)}"
            )
        return key

    def split(self, key: bytes) -> tuple[bytes, bytes]:
        """``(primary, secondary)`` of a table segment key."""
        return key[: self.primary_key_length], key[self.primary_key_length :]

    def partition(self, primary: bytes) -> int:
        return partition_of(primary, self.partitions)


def check_value(value: object) -> bytes:
    if not isinstance(value, bytes):
        raise KvtError(f"a value must be bytes, not {type(value).__name__}")
    if len(value) > VALUE_BYTES_MAX:
        raise KvtError(f"a value of {len(value)} bytes is over {VALUE_BYTES_MAX}")
    return value


def _length(key: object) -> str:
    return f"{len(key)}" if isinstance(key, bytes) else f"a {type(key).__name__}"


def partition_of(primary: bytes, partitions: int) -> int:
    """The partition of ``primary``: its point in [0, 1) (MurmurHash3 x64, as streams route
    keys) in ``partitions`` equal ranges."""
    digest = mmh3.hash_bytes(primary, _SEED, x64arch=True)
    point = (struct.unpack_from("<Q", digest)[0] >> 12) / float(1 << _FRACTION_BITS)
    return min(int(point * partitions), partitions - 1)


def kvt_segment_name(scope: str, table: str, partition: int) -> str:
    """The table segment of ``partition`` of ``scope/table``."""
    return qualified_segment_name(scope, table + KVTABLE_SUFFIX, segment_id(0, partition))


def page_token(partition: int, inner: bytes) -> str:
    """The continuation token of an iteration over a table's partitions: where it stands in
    ``partition`` (its table segment's token ``inner``)."""
    return f"{partition}:{inner.hex()}"


def parse_page_token(token: str, partitions: int) -> tuple[int, bytes]:
    """``(partition, inner token)`` of ``page_token``'s text (empty: the start)."""
    if not token:
        return 0, b""
    head, _, rest = token.partition(":")
    try:
        partition, inner = int(head), bytes.fromhex(rest)
    except ValueError:
        raise KvtError(f"not a continuation token of this table: {token!r}") from None
    if not 0 <= partition < partitions:
        raise KvtError(f"not a continuation token of this table: {token!r}")
    return partition, inner
