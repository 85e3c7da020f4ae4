"""Names and ids of segments, one place for each fact; part of the Django-free kernel.

Shared by the controller (which names segments), the segment store (which places them in
containers) and the clients. Vocabulary (Pravega's):

* segment id: 64 bits, creation epoch in the high 32, segment number in the low 32;
* qualified segment name: ``scope/stream/<number>.#epoch.<creation epoch>``;
* a transaction's shadow segment: ``<parent>#transaction.<32 hex transaction id>``, and the
  engine's transient segments ``<parent>#transient.…``; both live with their parent;
* a segment's container: CRC32C of its parent's name without the creation epoch, modulo the
  container count (ADR 0002).
"""

from __future__ import annotations

import functools

import crc32c

__all__ = [
    "EPOCH_MAX",
    "KAFKA_RECORDS_MARK",
    "SEGMENT_NUMBER_BITS",
    "TRANSACTION_MARK",
    "container_for",
    "container_key",
    "parent_name",
    "parse_segment_name",
    "qualified_segment_name",
    "segment_epoch",
    "segment_id",
    "segment_number",
    "transaction_segment_name",
]

SEGMENT_NUMBER_BITS = 32
_NUMBER_MASK = (1 << SEGMENT_NUMBER_BITS) - 1
EPOCH_MAX = (1 << 31) - 1  # keeps segment and transaction ids positive as signed 64-bit
#: Marks a segment's creation epoch in its qualified name (``<number>.#epoch.<epoch>``).
EPOCH_MARK = ".#epoch."
#: Marks a transaction's shadow segment (``<parent>#transaction.<hex>``).
TRANSACTION_MARK = "#transaction."
#: Marks the segment keeping a partition's Kafka record keys, headers and times
#: (``<parent>#kafka.records``, segment_app/kafka/partitions.py).
KAFKA_RECORDS_MARK = "#kafka.records"
#: What follows a parent's name in the names of segments derived from it.
_DERIVED_MARKS = (TRANSACTION_MARK, "#transient.", "$attributes", KAFKA_RECORDS_MARK)


def segment_id(creation_epoch: int, number: int) -> int:
    """The 64-bit id of segment ``number`` created in ``creation_epoch``."""
    if not 0 <= creation_epoch <= EPOCH_MAX or not 0 <= number <= _NUMBER_MASK:
        raise ValueError(f"no segment id for epoch {creation_epoch}, number {number}")
    return (creation_epoch << SEGMENT_NUMBER_BITS) | number


def segment_epoch(segment_id: int) -> int:
    """The creation epoch carried in a segment id (its high 32 bits)."""
    return segment_id >> SEGMENT_NUMBER_BITS


def segment_number(segment_id: int) -> int:
    """The segment number carried in a segment id (its low 32 bits)."""
    return segment_id & _NUMBER_MASK


def short_segment_name(number: int, creation_epoch: int) -> str:
    """``<number>.#epoch.<creation epoch>``: a segment's name within its stream."""
    return f"{number}{EPOCH_MARK}{creation_epoch}"


def qualified_segment_name(scope: str, stream: str, segment_id: int) -> str:
    """``scope/stream/<number>.#epoch.<creation epoch>``, as Pravega names segments."""
    short = short_segment_name(segment_number(segment_id), segment_epoch(segment_id))
    return f"{scope}/{stream}/{short}"


def parse_segment_name(name: str) -> tuple[str, str, int]:
    """``(scope, stream, segment id)`` of a qualified name (no ``.#epoch.`` means epoch 0)."""
    scope, stream, last = name.split("/", 2)
    number, _, epoch = last.partition(EPOCH_MARK)
    if not scope or not stream or not number.isdigit() or not (epoch.isdigit() or epoch == ""):
        raise ValueError(f"not a qualified segment name: {name!r}")
    return scope, stream, segment_id(int(epoch or 0), int(number))


def transaction_segment_name(parent: str, transaction_hex: str) -> str:
    """The shadow segment of a transaction (32 hex digits) on segment ``parent``."""
    return f"{parent}{TRANSACTION_MARK}{transaction_hex}"


def parent_name(name: str) -> str:
    """The segment a transaction, transient or attribute segment belongs to (else itself)."""
    for mark in _DERIVED_MARKS:
        cut = name.find(mark)
        if cut > 0:
            return name[:cut]
    return name


def container_key(name: str) -> str:
    """What places a segment in a container: its parent's name without the creation epoch.

    Transaction segments live with their parent, and every duplicate of a segment number
    (rolling transactions re-create segment numbers in new epochs) lives with the original,
    so a transaction of an old epoch is merged into its duplicate inside one container.
    """
    parent = parent_name(name)
    cut = parent.rfind(EPOCH_MARK)
    return parent[:cut] if cut > 0 else parent


@functools.lru_cache(maxsize=1 << 16)
def container_for(name: str, container_count: int) -> int:
    """The container that owns segment ``name``."""
    return crc32c.crc32c(container_key(name).encode()) % container_count
