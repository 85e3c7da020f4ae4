"""Guarantee 4 against a damaged disk: a bit flipped inside a tier-1 record that is not the torn
tail makes the restart fail with an error naming the ledger file and the record's byte offset;
no corrupt byte is ever served.

With ``MILLRACE_TEST_UNSAFE=no-crc`` (no record or frame CRC checks) the node starts and serves
the damaged event, and the checker must report it.
"""

from __future__ import annotations

import signal
import struct
from pathlib import Path

import pytest

from tests.acceptance.disk import Record, flip_bit, ledger_files, records
from tests.acceptance.nodes import NodeFactory, NodeStartError
from tests.acceptance.workload import Event, Workload, check, decode_event

SEED = 20261123
_WIRE_EVENT = struct.Struct(">ii")
#: The damaged record must have at least this many valid records after it (not the torn tail).
RECORDS_AFTER_MIN = 2


def acknowledged_event_in_tier1(data_dir: Path, workload: Workload) -> tuple[Record, int, Event]:
    """A record (with valid records after it) holding an acknowledged event, where the event's
    payload starts in the file, and the event."""
    for path in ledger_files(data_dir):
        found = list(records(path))
        for record in found[: len(found) - RECORDS_AFTER_MIN]:
            index = record.payload.find(b"MREV")
            while index >= _WIRE_EVENT.size:
                _, length = _WIRE_EVENT.unpack_from(record.payload, index - _WIRE_EVENT.size)
                try:
                    event = decode_event(record.payload[index : index + length])
                except ValueError:
                    event = None
                if event and event.number in workload.ledger.acked[event.writer]:
                    return record, record.payload_offset + index, event
                index = record.payload.find(b"MREV", index + 1)
    raise AssertionError("no acknowledged event in a record with valid records after it")


async def write_and_damage(
    nodes: NodeFactory, data_dir: Path, seed: int
) -> tuple[Record, Event, Workload]:
    """Write for a second, kill -9 the node, flip a bit in an acknowledged event's body."""
    workload = Workload(seed, name="corruption")
    node = await nodes.start(data_dir)
    await workload.create_segments(node.port)
    await workload.run_for(node.port, 1.0)
    await node.kill()
    record, event_offset, event = acknowledged_event_in_tier1(data_dir, workload)
    flip_bit(record.path, event_offset + 24, bit=3)  # inside the body: the framing stays intact
    return record, event, workload


async def test_bit_flip_in_tier1_fails_the_restart_naming_file_and_offset(
    nodes: NodeFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    record, _, _ = await write_and_damage(nodes, data_dir, SEED)
    node = await nodes.spawn(data_dir)
    with pytest.raises(NodeStartError) as failed:
        await node.wait_ready()
    assert failed.value.returncode not in (None, 0)
    assert f"{record.path}: CRC32C mismatch at byte offset {record.offset}" in failed.value.stderr
    assert "listening" not in failed.value.stderr  # it never served anything


async def test_without_crc_the_checker_finds_the_corrupt_event(
    nodes: NodeFactory, tmp_path: Path
) -> None:
    """Protection off: the damaged event is served, and the checker must say so."""
    data_dir = tmp_path / "data"
    _, event, workload = await write_and_damage(nodes, data_dir, SEED + 1)
    node = await nodes.start(data_dir, unsafe="no-crc")
    report = await check(node.port, workload)
    expected = f"checksum mismatch (writer {event.writer}, event {event.number})"
    assert any(expected in found for found in report.corrupt), report.summary()
    node.signal(signal.SIGTERM)
