"""The Python client's ``StreamManager`` and event writer against a real standalone node.

A writer writes events of several routing keys while the stream is scaled up and down through
the REST API (the real worker seals segments under the writer). Every event carries its key
and sequence number. Reading every segment back over the wire protocol must give each event
exactly once, and per key in the order written, across the scales.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections import defaultdict
from typing import Any

import pytest

from millrace.client.controller import AsyncControllerClient, ControllerError
from millrace.client.events import EventSplitter
from millrace.client.manager import StreamManager
from millrace.client.streamcut import StreamCut
from millrace.client.transport.segment_store import AppendLimits, SegmentStoreClient
from millrace.client.writer import AsyncEventWriter
from tests.acceptance.standalone_node import Standalone, request

KEYS = [f"key-{i}" for i in range(8)]


class Keyed:
    """Events ``<key>:<sequence>`` over KEYS, round robin; checks they come back in order."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.counts = dict.fromkeys(KEYS, 0)

    def batch(self, n: int) -> tuple[list[bytes], list[str]]:
        """The next ``n`` events and their keys (counted as written)."""
        events, keys = [], []
        for i in range(n):
            key = KEYS[i % len(KEYS)]
            events.append(f"{key}:{self.counts[key]}".encode())
            keys.append(key)
            self.counts[key] += 1
        return events, keys

    def write(self, n: int) -> None:
        for event, key in zip(*self.batch(n), strict=True):
            self.writer.write_event(event, key)

    def expected(self) -> dict[str, list[int]]:
        return {key: list(range(n)) for key, n in self.counts.items()}

    def read_back(self, reader: Any) -> dict[str, list[int]]:
        """Exactly as many events as written, per key in the order read."""
        seen: dict[str, list[int]] = {key: [] for key in KEYS}
        for _ in range(sum(self.counts.values())):
            event = reader.read_next(timeout=30)
            assert event is not None
            key, seq = event.data.decode().split(":")
            seen[key].append(int(seq))
        return seen


def _scale(node: Standalone, token: str, scope: str, split: bool) -> None:
    base = f"/v1/scopes/{scope}/streams/st"
    _, found = request(node.base, "GET", f"{base}/segments", token)
    upper = [s for s in found["segments"] if s["keyStart"] >= 0.5]
    if split:
        body = {"sealedSegments": [upper[0]["segmentId"]], "newRanges": [[0.5, 0.75], [0.75, 1]]}
    else:
        body = {"sealedSegments": [s["segmentId"] for s in upper], "newRanges": [[0.5, 1.0]]}
    status, answer = request(node.base, "POST", f"{base}/scale", token, body)
    assert status == 200, answer


def _check_stored_once_in_order(node: Standalone, scope: str, keyed: Keyed) -> None:
    """Every segment of ``scope/st`` read back over the wire: each key's events, in segment
    order, are exactly the ones ``keyed`` wrote, each once, in the order written."""
    by_key = asyncio.run(_read_all(node, node.token, scope))
    assert sorted(by_key) == sorted(KEYS)
    for key, events in by_key.items():
        sequence = [seq for _, seq in sorted(events, key=lambda e: e[0])]  # stable: offset order
        assert sequence == keyed.expected()[key], f"{key}: lost, duplicated or out of order"


def _creation_epoch(events: dict, number: int) -> int:
    for epoch, event in enumerate(events["scalingEvents"]):
        if any(seg["number"] == number for seg in event["segmentList"]):
            return epoch
    raise AssertionError(number)


async def _read_all(node: Standalone, token: str, scope: str) -> dict[str, list[tuple[int, int]]]:
    """Every event of every segment over the wire protocol (not the reader under test):
    key -> [(creation epoch, sequence)] in segment order."""
    controller = AsyncControllerClient(node.base, token)
    delegation = await controller.delegation_token(scope, "st")
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    _, events = request(
        node.base, "GET", f"/v1/scopes/{scope}/streams/st/scaling-events?from=0&to=99999999999999",
        token,
    )  # fmt: skip
    host, port = await controller.segment_uri(scope, "st", 0)
    client = await SegmentStoreClient.connect(host, port, delegation_token=delegation)
    try:
        numbers = {seg["number"] for e in events["scalingEvents"] for seg in e["segmentList"]}
        for number in sorted(numbers):
            epoch = _creation_epoch(events, number)
            name = f"{scope}/st/{number}.#epoch.{epoch}"
            splitter, offset = EventSplitter(0), 0
            while True:
                got = await client.read_segment(name, offset)
                for item in splitter.feed(got.offset, got.data):
                    key, seq = item.data.decode().split(":")
                    by_key[key].append((epoch, int(seq)))
                offset += len(got.data)
                if got.end_of_segment or not got.data:
                    break
    finally:
        await client.close()
        await controller.close()
    return by_key


def test_writer_follows_scaling_without_loss_duplicates_or_reordering(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    token = standalone.token
    assert manager.create_scope(scope) is False  # exists already
    assert manager.create_stream(scope, "st", initial_segments=2) is False
    writer = manager.create_writer(scope, "st")
    keyed = Keyed(writer)
    for split in (True, False, True, False):
        keyed.write(200)
        scaler = threading.Thread(target=_scale, args=(standalone, token, scope, split))
        scaler.start()
        while scaler.is_alive():  # written while the worker seals segments under the writer
            keyed.write(50)
        scaler.join()
        keyed.write(100)  # the writer learns of the seal only from the segment store: it must
    keyed.write(200)
    writer.flush()  # raises the error of any batch that failed
    assert writer._writer.reroutes >= 4  # each scale sealed a segment the writer was writing to
    writer.close()

    _check_stored_once_in_order(standalone, scope, keyed)


def test_a_call_whose_first_blocks_were_stored_before_the_seal_is_not_stored_twice(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    """Blocks of four events, one in flight at a time: every call the writer hands the segment
    store client spans dozens of blocks, so a scale's seal lands in the middle of one, after
    its first blocks were stored. Those events are in the sealed segment; only the rest may go
    to the successors (re-sending the whole call stored its first blocks twice)."""
    _, scope = session
    limits = AppendLimits(block_events_max=4, blocks_in_flight_max=1, small_block_bytes=0)

    keyed = Keyed(None)

    async def write_while_scaling() -> int:
        controller = AsyncControllerClient(standalone.base, standalone.token)
        writer = AsyncEventWriter(controller, scope, "st", pending_events_max=2_000, limits=limits)
        done: list[asyncio.Future[None]] = []

        async def write(n: int) -> None:
            done.append(await writer.write_batch(*keyed.batch(n)))

        try:
            await write(400)
            for split in (True, False):
                scale = asyncio.ensure_future(
                    asyncio.to_thread(_scale, standalone, standalone.token, scope, split)
                )
                while not scale.done():
                    await write(200)
                await scale
                await write(400)
            await asyncio.gather(*done)
            await writer.flush()
            return writer.reroutes
        finally:
            await writer.close()
            await controller.close()

    assert asyncio.run(write_while_scaling()) >= 2
    _check_stored_once_in_order(standalone, scope, keyed)


def test_reader_reads_everything_in_key_order_across_scales_until_sealed(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    writer = manager.create_writer(scope, "st")
    reader = manager.create_reader(scope, "st")
    keyed = Keyed(writer)
    for split in (True, False, True):
        keyed.write(400)
        writer.flush()
        _scale(standalone, standalone.token, scope, split)
    writer.close()
    assert keyed.read_back(reader) == keyed.expected()
    assert reader.read_next(timeout=0.5) is None  # at the tail: nothing within the timeout
    assert not reader.finished
    manager.seal_stream(scope, "st")
    assert reader.read_next(timeout=30) is None  # sealed and read to the end
    assert reader.finished
    reader.close()


def test_transactions_are_all_or_nothing(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    reader = manager.create_reader(scope, "st")
    txns = manager.create_transaction_writer(scope, "st")
    kept, dropped = txns.begin_txn(), txns.begin_txn()
    for i in range(100):
        kept.write_event(f"kept:{i}", routing_key=KEYS[i % 4])
        dropped.write_event(f"dropped:{i}", routing_key=KEYS[i % 4])
    assert reader.read_next(timeout=1) is None  # nothing visible before the commit
    dropped.abort()
    _scale(standalone, standalone.token, scope, split=True)  # the commit rolls forward
    kept.commit()
    assert kept.check_status() == "COMMITTED"
    assert dropped.check_status() == "ABORTED"
    per_key: dict[str, list[int]] = defaultdict(list)
    for _ in range(100):
        event = reader.read_next(timeout=30)
        assert event is not None and event.data.startswith(b"kept:")
        seq = int(event.data.split(b":")[1])
        per_key[KEYS[seq % 4]].append(seq)
    assert all(seqs == sorted(seqs) for seqs in per_key.values())
    assert sorted(i for seqs in per_key.values() for i in seqs) == list(range(100))
    assert reader.read_next(timeout=1) is None  # and nothing of the aborted one
    reader.close()
    txns.close()


def test_a_transactions_first_write_opens_its_shadows_side_by_side(
    session: tuple[StreamManager, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append sessions of a transaction's shadow segments are opened at once, not one
    round trip after another; the events still commit whole and in order."""
    from millrace.client.transport.appends import AppendSessions

    manager, scope = session
    real, flight = AppendSessions.setup_append, {"now": 0, "most": 0}

    async def setup_append(self: Any, *args: Any, **kwargs: Any) -> int:
        flight["now"] += 1
        flight["most"] = max(flight["most"], flight["now"])
        try:
            return await real(self, *args, **kwargs)
        finally:
            flight["now"] -= 1

    monkeypatch.setattr(AppendSessions, "setup_append", setup_append)
    reader = manager.create_reader(scope, "st")
    txns = manager.create_transaction_writer(scope, "st")
    txn = txns.begin_txn()
    txn.write_events([(f"e:{i}", KEYS[i % 8]) for i in range(64)])  # both segments' keys
    assert flight["most"] == 2  # the stream's two shadows, together
    txn.commit()
    got = sorted(int(reader.read_next(timeout=30).data.split(b":")[1]) for _ in range(64))
    assert got == list(range(64))
    reader.close()
    txns.close()


def test_writer_resends_after_the_segment_store_is_killed(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    writer = manager.create_writer(scope, "st")
    keyed = Keyed(writer)
    keyed.write(2000)
    writer.flush()  # the writer's segment connections are up
    keyed.write(2000)  # buffered, handed over, in flight: the kill comes among them
    mark = len(standalone.lines)
    os.kill(standalone.child_running("segmentstore"), signal.SIGKILL)  # mid-stream
    keyed.write(2000)
    standalone.wait_for("segmentstore is back", timeout=60, after=mark)
    keyed.write(1000)
    writer.flush()  # raises the error of any batch that failed
    assert writer._writer.reconnects >= 1
    writer.close()
    reader = manager.create_reader(scope, "st")
    assert keyed.read_back(reader) == keyed.expected()  # no loss, no duplicate, in order
    assert reader.read_next(timeout=1) is None  # nothing more: the stream is open and quiet
    assert not reader.finished
    reader.close()


def test_a_saved_stream_cut_reads_exactly_the_later_events(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    writer = manager.create_writer(scope, "st")
    for i in range(300):
        writer.write_event(f"before:{i}", routing_key=KEYS[i % 8])
    writer.flush()
    saved = manager.get_stream_cut(scope, "st", "tail").to_text()  # e.g. kept in a file
    assert manager.get_stream_cut(scope, "st", "head").positions == dict.fromkeys(
        StreamCut.from_text(saved).positions, 0
    )
    _scale(standalone, standalone.token, scope, split=True)
    for i in range(200):
        writer.write_event(f"after:{i}", routing_key=KEYS[i % 8])
    writer.flush()
    writer.close()
    manager.seal_stream(scope, "st")
    reader = manager.create_reader(scope, "st", start=StreamCut.from_text(saved))
    got = []
    while (event := reader.read_next(timeout=30)) is not None:
        got.append(event.data.decode())
    assert sorted(got) == sorted(f"after:{i}" for i in range(200))
    reader.close()
    with pytest.raises(ValueError, match="of"):
        manager.create_reader(scope, "other", start=StreamCut.from_text(saved))


def test_next_stream_cuts_step_through_the_stream_in_pieces_across_a_scale(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    """``next_stream_cut`` (the controller's getNextStreamCut, what Spark's
    ``approx_bytes_per_trigger`` plans with): each step is a valid cut about the bytes asked
    after the last, on event boundaries; read between consecutive cuts, the steps give every
    event once, per key in order, across a scale; at the tail it stops moving."""
    manager, scope = session
    writer = manager.create_writer(scope, "st")
    keyed = Keyed(writer)
    keyed.write(300)
    writer.flush()
    _scale(standalone, standalone.token, scope, split=True)
    keyed.write(200)
    writer.flush()
    writer.close()
    base = f"/v1/scopes/{scope}/streams/st"
    cut = manager.get_stream_cut(scope, "st", "head")
    seen: dict[str, list[int]] = {key: [] for key in KEYS}
    steps = 0
    with manager.create_batch_client() as batch:
        while True:
            after, moved = manager.next_stream_cut(cut, 1_000)
            if moved == 0:
                assert after == cut
                break
            steps += 1
            assert 0 < moved <= 1_000 + 3 * 20  # past the share by under one event a segment
            status, check = request(
                standalone.base, "POST", f"{base}/stream-cut/validity", standalone.token,
                {"streamCut": {str(k): v for k, v in after.positions.items()}},
            )  # fmt: skip
            assert status == 200 and check["valid"], check
            ranges = batch.segment_ranges(scope, "st", cut, after)
            assert sum(r.size for r in ranges) == moved
            for segment in ranges:
                for event in batch.read_range(segment):  # from a boundary to a boundary
                    key, seq = event.data.decode().split(":")
                    seen[key].append(int(seq))
            cut = after
    assert steps >= 5
    assert seen == keyed.expected()  # every event once, per key in the order written
    assert after == manager.get_stream_cut(scope, "st", "tail")
    with pytest.raises(ValueError, match="positive"):
        manager.next_stream_cut(cut, 0)
    status, answer = request(
        standalone.base, "POST", f"{base}/stream-cut/next", standalone.token,
        {"streamCut": {"0": 0}, "approxBytes": 10},
    )  # fmt: skip
    assert status == 400 and "not a stream cut" in answer["message"], answer


def test_controller_errors_are_clear(standalone: Standalone) -> None:
    manager = StreamManager(standalone.base, token="wrong")
    try:
        with pytest.raises(ControllerError) as info:
            manager.create_scope("x")
        assert info.value.status == 401 and info.value.code == "authentication-failed"
    finally:
        manager.close()


def test_write_events_lists_survive_a_segment_store_kill_and_a_scale(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    """Lists of one key's events (``write_events``), written while the segment store is
    SIGKILLed and restarted and the stream scales: each event once, per key in order."""
    manager, scope = session
    token = standalone.token
    writer = manager.create_writer(scope, "st")
    counts = dict.fromkeys(KEYS, 0)

    def write(rounds: int) -> None:
        for _ in range(rounds):
            for key in KEYS:
                events = [f"{key}:{counts[key] + i}" for i in range(50)]
                writer.write_events(events, key)
                counts[key] += 50

    write(5)
    mark = len(standalone.lines)
    os.kill(standalone.child_running("segmentstore"), signal.SIGKILL)
    write(5)
    standalone.wait_for("segmentstore is back", timeout=60, after=mark)
    _scale(standalone, token, scope, True)
    write(5)
    writer.flush()  # raises the error of any batch that failed
    writer.close()
    reader = manager.create_reader(scope, "st")
    keyed = Keyed(writer)
    keyed.counts = counts
    assert keyed.read_back(reader) == keyed.expected()
    assert reader.read_next(timeout=1) is None  # nothing more: the stream is open and quiet
    assert not reader.finished
    reader.close()


def test_writer_and_reader_outlive_their_delegation_tokens(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With tokens of 3 s (MILLRACE_TOKEN_TTL_SECONDS), a writer and a reader created at the
    start go on past several lifetimes: the reader's reads and the writer's setups on the
    segments of a scale meet expired tokens, get new ones and carry on; nothing is lost."""
    from tests.acceptance.standalone_node import READY_LINE, free_ports

    node = Standalone(
        tmp_path_factory.mktemp("short-tokens") / "data",
        *free_ports(2),
        services={"MILLRACE_TOKEN_TTL_SECONDS": "3"},
    )
    try:
        node.wait_for(READY_LINE)
        scope = f"s{os.urandom(5).hex()}"
        manager = StreamManager(node.base, token=node.token)
        manager.create_scope(scope)
        manager.create_stream(scope, "st", initial_segments=2)
        writer = manager.create_writer(scope, "st")
        reader = manager.create_reader(scope, "st")
        keyed = Keyed(writer)
        keyed.write(100)
        writer.flush()
        for split in (True, False):
            threading.Event().wait(4.5)  # every token issued so far has expired
            _scale(node, node.token, scope, split)
            keyed.write(100)  # to the new segments: set up with a renewed token
            writer.flush()
        writer.close()
        threading.Event().wait(4.5)
        assert keyed.read_back(reader) == keyed.expected()  # reads renew the token too
        reader.close()
        manager.close()
        node.stop()
    finally:
        node.kill()
