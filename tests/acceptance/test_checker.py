"""The checker itself: each kind of damage it must report, on hand-made segment contents.

The whole-process tests trust ``judge`` to say when something is wrong; these show it does,
one failure at a time, without starting a node.
"""

from __future__ import annotations

import struct

import pytest

from tests.acceptance.workload import Block, Ledger, encode_event, judge

_WIRE_EVENT = struct.Struct(">ii")


def stored(*events: bytes) -> bytes:
    """Segment bytes holding ``events`` as the wire protocol stores them (8-byte headers)."""
    return b"".join(_WIRE_EVENT.pack(0, len(e)) + e for e in events)


def event(writer: int, number: int) -> bytes:
    return encode_event(writer, 7, number, f"body of {writer}/{number}".encode())


def ledger_with(acked: dict[int, list[int]], writers: int = 2) -> Ledger:
    ledger = Ledger(writers)
    for writer, numbers in acked.items():
        for number in numbers:
            ledger.record_ack(writer, Block(number, (event(writer, number),)))
        ledger.sent_max[writer] = max(numbers, default=0) + 2  # two more sent, never acked
    return ledger


LEDGER = {0: [1, 2, 3], 1: [1, 2]}


def test_a_clean_interleaving_passes() -> None:
    data = stored(event(0, 1), event(1, 1), event(0, 2), event(0, 3), event(1, 2), event(0, 4))
    report = judge({"s": data}, ledger_with(LEDGER))
    assert report.ok, report.summary()
    assert report.events == 6  # event 0/4 was sent, not acked: allowed unless exact


def test_exact_rejects_unacknowledged_events() -> None:
    data = stored(event(0, 1), event(0, 2), event(0, 3), event(1, 1), event(1, 2), event(0, 4))
    assert judge({"s": data}, ledger_with(LEDGER), exact=True).unexpected == [(0, 4)]


@pytest.mark.parametrize(
    ("writer_0_events", "field", "expected"),
    [
        ([1, 3], "missing", [(0, 2)]),
        ([1, 2, 2, 3], "duplicates", [(0, 2)]),
        ([1, 3, 2], "out_of_order", [(0, 2)]),
        ([1, 2, 3, 9], "unexpected", [(0, 9)]),
    ],
)
def test_each_failure_is_reported(writer_0_events: list[int], field: str, expected: list) -> None:
    data = stored(*(event(0, n) for n in writer_0_events), event(1, 1), event(1, 2))
    report = judge({"s": data}, ledger_with(LEDGER))
    assert not report.ok
    assert getattr(report, field) == expected, report.summary()


def test_a_flipped_bit_is_a_checksum_mismatch_and_the_event_is_missing() -> None:
    damaged = bytearray(event(0, 2))
    damaged[20] ^= 0x08
    data = stored(event(0, 1), bytes(damaged), event(0, 3), event(1, 1), event(1, 2))
    report = judge({"s": data}, ledger_with(LEDGER))
    assert report.missing == [(0, 2)]
    assert len(report.corrupt) == 1 and "checksum mismatch" in report.corrupt[0]


def test_broken_framing_stops_the_segment() -> None:
    data = stored(event(0, 1)) + _WIRE_EVENT.pack(5, 3) + b"xyz" + stored(event(0, 2))
    report = judge({"s": data}, ledger_with({0: [1]}))
    assert report.corrupt == [f"s@{len(stored(event(0, 1)))}: bad event header (5, 3)"]


def test_a_self_consistent_but_different_event_is_corrupt() -> None:
    impostor = encode_event(0, 7, 1, b"not what was acknowledged")
    report = judge({"s": stored(impostor)}, ledger_with({0: [1]}))
    assert report.corrupt and "is not the one" in report.corrupt[0]


def test_a_missing_segment_loses_all_its_events() -> None:
    report = judge({"s": None}, ledger_with({0: [1, 2]}))
    assert report.missing == [(0, 1), (0, 2)]


def test_resend_list_follows_event_numbers_after_a_lost_replay() -> None:
    """A replayed block whose ack a kill cut off goes back into ``unacked`` at its end; the
    next resend still lists the blocks by event number, each once, and a real hole is still
    an error. (This ordering once failed a crash test: "writer 0: gap 304..209".)"""
    from tests.acceptance.workload import Workload

    writer = Workload(1, writer_segments=(0,)).writers[0]
    blocks = [writer.new_block() for _ in range(4)]  # events 1-8, 9-16, 17-24, 25-32
    writer.recent_acked = blocks[:2]
    writer.unacked = {b.first: b for b in blocks[2:]}
    writer.unacked.pop(blocks[1].first, None)
    writer.unacked.setdefault(blocks[1].first, blocks[1])  # replayed, then its ack was lost
    resend = writer.blocks_to_resend()
    assert [b.first for b in resend] in ([1, 9, 17, 25], [9, 17, 25])
    writer.unacked.pop(blocks[2].first)  # a hole: 17-24 neither acknowledged nor pending
    writer.recent_acked = blocks[:1]
    with pytest.raises(AssertionError, match="gap"):
        writer.blocks_to_resend()
