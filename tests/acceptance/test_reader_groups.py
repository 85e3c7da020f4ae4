"""Reader groups of the Python client against a real standalone node (segment store, Celery
worker, controller): shared reading across scaling, checkpoints and reset, truncation."""

from __future__ import annotations

import threading
import time
from typing import Any

from millrace.client.manager import GroupReader, StreamManager
from millrace.client.reader_group import TruncatedDataError
from tests.acceptance.standalone_node import Standalone, request
from tests.acceptance.test_event_writer import KEYS, Keyed, _scale


def _drain(reader: GroupReader, into: list[Any], stop: threading.Event, quiet: float = 2.0) -> None:
    """Read into ``into`` until ``stop`` is set and nothing came for ``quiet`` s."""
    while True:
        event = reader.read_next(timeout=quiet)
        if event is None:
            if reader.finished or stop.is_set():
                return
            continue
        into.append(event)


def _keyed(events: list[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {key: [] for key in KEYS}
    for event in events:
        if event.is_checkpoint:
            continue
        key, seq = event.data.decode().split(":")
        out[key].append(int(seq))
    return out


def test_two_readers_share_a_stream_across_scaling(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    token = standalone.token
    writer = manager.create_writer(scope, "st")
    keyed = Keyed(writer)
    group = manager.create_reader_group(scope, "rg", [f"{scope}/st"], group_refresh_time_ms=200)
    readers = [group.create_reader(f"r{i}") for i in range(2)]
    got: list[list[Any]] = [[], []]
    stop = threading.Event()
    threads = [
        threading.Thread(target=_drain, args=(r, got[i], stop)) for i, r in enumerate(readers)
    ]
    for thread in threads:
        thread.start()
    for split in (True, False):
        keyed.write(300)
        _scale(standalone, token, scope, split)
    keyed.write(300)
    writer.flush()
    stop.set()
    for thread in threads:
        thread.join(60)
    assert all(len(g) > 0 for g in got), [len(g) for g in got]  # both readers took part
    merged: dict[str, list[int]] = {key: [] for key in KEYS}
    for events in got:
        for key, seqs in _keyed(events).items():
            merged[key].extend(seqs)
            assert seqs == sorted(seqs), key  # in order within each reader
    assert {k: sorted(v) for k, v in merged.items()} == keyed.expected()  # once each
    for reader in readers:
        reader.close()
    assert group.describe()["onlineReaderIds"] == []


def test_checkpoint_then_reset_rereads_exactly_the_later_events(
    session: tuple[StreamManager, str],
) -> None:
    manager, scope = session
    writer = manager.create_writer(scope, "st")
    keyed = Keyed(writer)
    keyed.write(400)
    writer.flush()
    group = manager.create_reader_group(scope, "rg", [f"{scope}/st"], group_refresh_time_ms=200)
    reader = group.create_reader("only")
    before = [reader.read_next(timeout=30) for _ in range(150)]
    cuts: dict[str, Any] = {}
    checkpointer = threading.Thread(
        target=lambda: cuts.update(group.initiate_checkpoint("cp1", timeout=30))
    )
    checkpointer.start()
    deadline = time.monotonic() + 30
    while reader._reader._checkpoint_due is None:  # learnt at its next sync (every 0.2 s)
        assert time.monotonic() < deadline, "the reader never heard of the checkpoint"
        time.sleep(0.05)
    after: list[Any] = []
    marker = False
    while len(before) + len(after) < 400:
        event = reader.read_next(timeout=30)
        assert event is not None
        if event.is_checkpoint:
            assert event.checkpoint_name == "cp1" and not marker
            marker = True
        else:
            (after if marker else before).append(event)
    assert marker and after, (len(before), len(after))  # the marker came before the end
    checkpointer.join(30)
    assert f"{scope}/st" in cuts
    later = list(after)
    # The events after the marker are exactly those after the checkpoint's stream cut.
    group.reset({f"{scope}/st": cuts[f"{scope}/st"]})
    again: list[Any] = []
    while len(again) < len(later):
        event = reader.read_next(timeout=30)
        assert event is not None
        if not event.is_checkpoint:
            again.append(event)
    assert reader.read_next(timeout=1.5) is None  # nothing more: the stream is open
    assert sorted((e.segment, e.offset) for e in again) == sorted(
        (e.segment, e.offset) for e in later
    )
    reader.close()


def test_truncation_new_group_reads_the_rest_and_an_old_reader_is_told(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    token = standalone.token
    writer = manager.create_writer(scope, "st")
    keyed = Keyed(writer)
    keyed.write(200)
    writer.flush()
    old = manager.create_reader_group(scope, "old", [f"{scope}/st"], group_refresh_time_ms=200)
    old_reader = old.create_reader("slow", read_bytes=64, segment_buffer_bytes=64)
    first = old_reader.read_next(timeout=30)
    assert first is not None and not first.is_checkpoint
    cut = manager.get_stream_cut(scope, "st", "tail")
    keyed.write(100)
    writer.flush()
    body = {"streamCut": {str(k): v for k, v in cut.positions.items()}}
    status, answer = request(standalone.base, "POST", f"/v1/scopes/{scope}/streams/st/truncate",
                             token, body)  # fmt: skip
    assert status == 200, answer
    # A new group starts at the new head: exactly the 100 later events.
    fresh = manager.create_reader_group(scope, "fresh", [f"{scope}/st"], group_refresh_time_ms=200)
    reader = fresh.create_reader("r")
    rest = [reader.read_next(timeout=30) for _ in range(100)]
    assert reader.read_next(timeout=1.5) is None  # nothing more: the stream is open
    assert sorted(e.data.decode() for e in rest) == sorted(
        f"{key}:{seq}" for key, seqs in keyed.expected().items() for seq in seqs if seq >= 25
    )
    # The old reader had buffered some events before the truncation; then it is told, and
    # goes on with the remaining events.
    told = 0
    later: list[Any] = []
    while len(later) < 100:
        try:
            event = old_reader.read_next(timeout=30)
        except TruncatedDataError as exc:
            assert "truncated" in str(exc)
            told += 1
            continue
        assert event is not None
        seq = int(event.data.decode().split(":")[1])
        if seq >= 25:
            later.append(event)
    assert told >= 1
    reader.close()
    old_reader.close()


def test_rest_pages_follow_scaling_in_key_order(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    token = standalone.token
    writer = manager.create_writer(scope, "st")
    keyed = Keyed(writer)
    for split in (True, False):
        keyed.write(300)
        writer.flush()
        _scale(standalone, token, scope, split)
    keyed.write(300)
    writer.flush()
    path = f"/v1/scopes/{scope}/streams/st/events?limit=64"
    got: list[str] = []
    query = "&from=head"
    while True:
        status, page = request(standalone.base, "GET", path + query, token)
        assert status == 200, page
        got += [e["data"] for e in page["events"]]
        if not page["events"]:
            break
        query = f"&continuation={page['continuation']}"
    by_key: dict[str, list[int]] = {key: [] for key in KEYS}
    for text in got:
        key, seq = text.split(":")
        by_key[key].append(int(seq))
    assert by_key == keyed.expected()  # all, once, per key in order across both scales
