"""Key-value tables: what the controller, the clients and the console share about them.

A key-value table (Pravega's KVT) lives in a scope and is stored in ``partitions`` table
segments, ``<scope>/<table>_kvtable/<n>.#epoch.0`` for n in 0 .. partitions - 1 (Pravega's
names). A key is a *primary key* of exactly ``primary_key_length`` bytes followed by a
*secondary key* of exactly ``secondary_key_length`` bytes (0: none); all the keys of one
primary key are in one partition, chosen by a hash of the primary key, so an update of several
keys of one primary key is one table-segment batch: all or nothing.

Which partition holds a primary key is a table's *placement*, fixed when it is made:
``pravega`` (every table made since ADR 0012's change: Pravega's Java client's
``KeyValueTableSegments``, bit for bit) or ``millrace-1`` (tables made before it, with the hash
of ADR 0009; their keys stay where they were written).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import struct
from collections.abc import Sequence
from typing import Any

import mmh3

from millrace.kernel.naming import qualified_segment_name, segment_id

__all__ = [
    "KEY_BYTES_MAX",
    "KVTABLE_SUFFIX",
    "PARTITIONS_MAX",
    "PLACEMENTS",
    "VALUE_BYTES_MAX",
    "KvtConfig",
    "KvtError",
    "PartitionWalk",
    "check_value",
    "kvt_segment_name",
    "page_token",
    "parse_page_token",
    "partition_ends",
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
#: How a table places primary keys in partitions (the module docstring); the first is a new
#: table's.
PLACEMENTS = ("pravega", "millrace-1")
#: Java's ``"KeyValueTableRouter".hashCode()``: the seed of Pravega's table hash (negative).
_PRAVEGA_SEED = -2020233499
#: The seed of the ``millrace-1`` placement (ADR 0009).
_MILLRACE_1_SEED = 0x5E52B6B7
_FRACTION_BITS = 52
_MASK64 = (1 << 64) - 1


class KvtError(ValueError):
    """A key, a value or a configuration a key-value table cannot take."""


@dataclasses.dataclass(frozen=True, slots=True)
class KvtConfig:
    """A table's configuration (Pravega's ``KeyValueTableConfiguration``)."""

    partitions: int
    primary_key_length: int
    secondary_key_length: int = 0
    placement: str = PLACEMENTS[0]

    def validate(self) -> KvtConfig:
        for name, value, low in (
            ("partition count", self.partitions, 1),
            ("primary key length", self.primary_key_length, 1),
            ("secondary key length", self.secondary_key_length, 0),
        ):
            if type(value) is not int or value < low:
                raise KvtError(f"{name} must be an integer >= {low}, not {value!r}")
        if self.placement not in PLACEMENTS:
            choices = ", ".join(PLACEMENTS)
            raise KvtError(f"placement must be one of {choices}, not {self.placement!r}")
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
        return partition_of(primary, self.partitions, self.placement)


def check_value(value: object) -> bytes:
    if not isinstance(value, bytes):
        raise KvtError(f"a value must be bytes, not {type(value).__name__}")
    if len(value) > VALUE_BYTES_MAX:
        raise KvtError(f"a value of {len(value)} bytes is over {VALUE_BYTES_MAX}")
    return value


def _length(key: object) -> str:
    return f"{len(key)}" if isinstance(key, bytes) else f"a {type(key).__name__}"


def partition_of(primary: bytes, partitions: int, placement: str = PLACEMENTS[0]) -> int:
    """The partition of ``primary``. ``pravega``: its point in [0, 1) (Guava's MurmurHash3 x64
    128 of the key's bytes, seeded with Java's ``"KeyValueTableRouter".hashCode()``, its first
    64 bits' top 52 as a fraction) goes to the first partition whose key range ends at or above
    it, as Pravega's Java client's ``ceilingEntry``. ``millrace-1``: ADR 0009's point (mmh3,
    Millrace's seed) in ``partitions`` equal ranges."""
    if placement == "millrace-1":
        digest = mmh3.hash_bytes(primary, _MILLRACE_1_SEED, x64arch=True)
        point = (struct.unpack_from("<Q", digest)[0] >> 12) / float(1 << _FRACTION_BITS)
        return min(int(point * partitions), partitions - 1)
    point = (_murmur3_x64_128_low(primary, _PRAVEGA_SEED) >> 12) / float(1 << _FRACTION_BITS)
    return min(bisect.bisect_left(partition_ends(partitions), point), partitions - 1)


@functools.lru_cache(maxsize=64)
def partition_ends(partitions: int) -> list[float]:
    """Where each partition's key range ends: ``(n + 1) * (1.0 / partitions)``, the last 1.0,
    as Pravega's controller divides a table's key space (and its gRPC answers report)."""
    chunk = 1.0 / partitions
    return [(n + 1) * chunk for n in range(partitions - 1)] + [1.0]


_C1, _C2 = 0x87C37B91114253D5, 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK64


def _fmix(k: int) -> int:
    k = ((k ^ (k >> 33)) * 0xFF51AFD7ED558CCD) & _MASK64
    k = ((k ^ (k >> 33)) * 0xC4CEB9FE1A85EC53) & _MASK64
    return k ^ (k >> 33)


@functools.lru_cache(maxsize=65_536)
def _murmur3_x64_128_low(data: bytes, seed: int) -> int:
    """The first 64 bits (Guava's ``asLong``) of MurmurHash3 x64 128 of ``data`` with Guava's
    seeding: the 32-bit ``seed`` sign-extended into both 64-bit halves. mmh3 zero-extends its
    seed, which differs for a negative one, so this follows the reference algorithm
    (Appleby's ``MurmurHash3_x64_128``) in Python; checked against mmh3 for non-negative
    seeds in the tests. Cached: table keys repeat."""
    h1 = h2 = seed & _MASK64
    blocks, tail = divmod(len(data), 16)
    for i in range(blocks):
        k1, k2 = struct.unpack_from("<QQ", data, 16 * i)
        k1 = (_rotl((k1 * _C1) & _MASK64, 31) * _C2) & _MASK64
        h1 = (((_rotl(h1 ^ k1, 27) + h2) & _MASK64) * 5 + 0x52DCE729) & _MASK64
        k2 = (_rotl((k2 * _C2) & _MASK64, 33) * _C1) & _MASK64
        h2 = (((_rotl(h2 ^ k2, 31) + h1) & _MASK64) * 5 + 0x38495AB5) & _MASK64
    if tail:
        rest = data[16 * blocks :] + bytes(16 - tail)
        k1, k2 = struct.unpack("<QQ", rest)
        if tail > 8:
            h2 ^= (_rotl((k2 * _C2) & _MASK64, 33) * _C1) & _MASK64
        h1 ^= (_rotl((k1 * _C1) & _MASK64, 31) * _C2) & _MASK64
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & _MASK64
    h2 = (h2 + h1) & _MASK64
    h1, h2 = _fmix(h1), _fmix(h2)
    return (h1 + h2) & _MASK64


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


class PartitionWalk:
    """One page of a table's entries gathered over its partitions in order, without I/O: the
    caller reads what ``ask`` names from the partition's table segment and hands what it got to
    ``got``, until ``ask`` says the page is whole; ``next_token`` is where the next page starts.
    The REST API's listing and the clients' ``page`` (async and blocking) all walk with it."""

    def __init__(self, partitions: Sequence[int], token: str, partition_count: int,
                 limit: int) -> None:  # fmt: skip
        if limit < 1:
            raise KvtError(f"limit must be at least 1, not {limit}")
        place, inner = parse_page_token(token, partition_count)
        self._todo = [p for p in partitions if p >= place]
        self._start = inner if self._todo and self._todo[0] == place else b""
        self.limit = limit
        self.found: list[Any] = []

    def ask(self) -> tuple[int, bytes, int] | None:
        """(partition, continuation token, how many entries) to read next; None once the page
        is whole or every partition is read."""
        if not self._todo or len(self.found) >= self.limit:
            return None
        return self._todo[0], self._start, self.limit - len(self.found)

    def got(self, entries: Sequence[Any], token: bytes) -> None:
        """What the read ``ask`` named gave: its entries and the token to go on with (the same
        token, or no entries: the partition is read to its end)."""
        self.found += entries
        if not entries or token == self._start:
            self._todo.pop(0)
            self._start = b""
        else:
            self._start = token

    def next_token(self) -> str:
        """The token of the following page; empty after the last."""
        return page_token(self._todo[0], self._start) if self._todo else ""
