"""The blocking Python client as programs call it, against a real ``millrace standalone``.

The writer buffers in the caller's thread and hands batches to the I/O loop; readers take
batches from it. Checked here: nothing is lost, duplicated or reordered per key; callbacks;
back-pressure bounds what a writer holds; a quiet open stream gives ``None`` (``finished``
tells the end apart); batch reads and segment slices (a slice's unused events are read again);
every object is a context manager; a program that exits without closing says what it left,
with no traceback; readers, group readers, byte streams and transactions outlive their
delegation tokens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from millrace.client.manager import StreamManager
from millrace.client.transactions import TxnFailedError
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports

KEYS = [f"key-{i}" for i in range(16)]


def _written(writer: object, count: int, prefix: str = "") -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for i in range(count):
        key = KEYS[i % len(KEYS)]
        writer.write_event(f"{prefix}{key}:{counts[key]}", routing_key=key)  # type: ignore[attr-defined]
        counts[key] += 1
    return counts


def _per_key(events: list[object]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = defaultdict(list)
    for event in events:
        key, seq = event.data.decode().rsplit(":", 1)  # type: ignore[attr-defined]
        seen[key].append(int(seq))
    return seen


def test_blocking_writer_and_batch_reads_keep_every_event_in_key_order(
    session: tuple[StreamManager, str],
) -> None:
    manager, scope = session
    with manager.create_writer(scope, "st", batch_events=500, linger_ms=1) as writer:
        counts = _written(writer, 30_000)
        writer.flush()
    got: list[object] = []
    with manager.create_reader(scope, "st") as reader:
        while len(got) < 30_000:
            batch = reader.read_batch(1000, timeout=30)
            assert batch, "the events stopped coming"
            assert len(batch) <= 1000
            got.extend(batch)
        assert reader.read_next(timeout=0.5) is None  # open and quiet: None, not an error
        assert not reader.finished
    assert dict(_per_key(got)) == {k: list(range(n)) for k, n in counts.items()}


def test_linger_sends_a_small_batch_without_a_flush(session: tuple[StreamManager, str]) -> None:
    """Three events and no flush: the linger hands them over; a reader sees them."""
    manager, scope = session
    writer = manager.create_writer(scope, "st", linger_ms=5)
    for i in range(3):
        writer.write_event(f"k:{i}", routing_key="k")
    reader = manager.create_reader(scope, "st")
    got = [reader.read_next(timeout=30) for _ in range(3)]
    assert [e.data for e in got if e is not None] == [b"k:0", b"k:1", b"k:2"]
    reader.close()
    writer.close()


def test_write_event_callback_fires_once_durable(session: tuple[StreamManager, str]) -> None:
    manager, scope = session
    outcomes: list[BaseException | None] = []
    landed = threading.Event()

    def done(error: BaseException | None) -> None:
        outcomes.append(error)
        landed.set()

    with manager.create_writer(scope, "st") as writer:
        _written(writer, 100)
        writer.write_event("with-callback:0", routing_key="cb", callback=done)
        assert landed.wait(30)
    assert outcomes == [None]


def test_writer_memory_is_bounded_by_its_limits(session: tuple[StreamManager, str]) -> None:
    """A writer of 1,000,000 events with no flush holds at most its cap (plus one batch):
    ``write_event`` waits for room instead of buffering without end."""
    manager, scope = session
    cap, batch = 20_000, 1000
    writer = manager.create_writer(scope, "st", pending_events_max=cap, batch_events=batch)
    most = 0
    for i in range(1_000_000):
        writer.write_event(b"x" * 10, routing_key=KEYS[i % len(KEYS)])
        if i % 1000 == 0:
            most = max(most, writer.pending_events)
    writer.flush()
    assert 0 < most <= cap + batch
    writer.close()


def test_bad_input_gets_clear_errors_and_the_writer_goes_on(
    session: tuple[StreamManager, str],
) -> None:
    manager, scope = session
    with pytest.raises(TypeError, match="unknown options"):
        manager.create_writer(scope, "st", batch_size=10)
    with pytest.raises(ValueError, match="batch_events must be at least 1"):
        manager.create_writer(scope, "st", batch_events=0)
    with manager.create_writer(scope, "st") as writer:
        with pytest.raises(ValueError, match="at most 8388608 bytes"):
            writer.write_event(b"x" * (8 * 1024 * 1024 + 1))
        writer.write_event(b"after", routing_key="k")
    reader = manager.create_reader(scope, "st")
    with pytest.raises(ValueError, match="max_events"):
        reader.read_batch(0)
    event = reader.read_next(timeout=30)
    assert event is not None and event.data == b"after"
    reader.close()


def test_sealed_end_is_told_apart_from_a_quiet_stream(session: tuple[StreamManager, str]) -> None:
    manager, scope = session
    with manager.create_writer(scope, "st") as writer:
        counts = _written(writer, 50)
    group = manager.create_reader_group(scope, "rg", [f"{scope}/st"], group_refresh_time_ms=200)
    with group.create_reader("r1") as member:
        first = member.read_batch(10, timeout=30)
        assert 1 <= len(first) <= 10
        rest = [first]
        while sum(map(len, rest)) < 50:
            rest.append(member.read_batch(100, timeout=30))
        assert member.read_next(timeout=0.5) is None and not member.finished
        manager.seal_stream(scope, "st")
        assert list(member) == []  # iteration ends at the sealed end
        assert member.finished
    got = _per_key([e for batch in rest for e in batch])
    assert {k: sorted(v) for k, v in got.items()} == {k: list(range(n)) for k, n in counts.items()}


def test_a_slice_gives_back_what_it_did_not_use(session: tuple[StreamManager, str]) -> None:
    """A reader takes a segment slice, uses 3 of its events and releases it, then leaves:
    a new reader of the group starts right after those 3 in that segment."""
    manager, scope = session
    with manager.create_writer(scope, "st") as writer:
        for i in range(20):
            writer.write_event(f"one:{i}", routing_key="one")
    group = manager.create_reader_group(scope, "sl", [f"{scope}/st"], group_refresh_time_ms=200)
    first = group.create_reader("a")
    piece = first.get_segment_slice(timeout=30)
    while piece is not None and len(piece) == 0:
        piece = first.get_segment_slice(timeout=30)
    assert piece is not None
    used = []
    for event in piece:
        used.append(event.data)
        if len(used) == 3:
            break
    first.release_segment(piece)
    first.close()
    second = group.create_reader("b")
    again: list[bytes] = []
    while len(again) < 17:
        event = second.read_next(timeout=30)
        assert event is not None
        if not event.is_checkpoint:
            again.append(event.data)
    assert used == [b"one:0", b"one:1", b"one:2"]
    assert again == [f"one:{i}".encode() for i in range(3, 20)]
    second.close()


def test_every_client_object_is_a_context_manager(
    standalone: Standalone, session: tuple[StreamManager, str]
) -> None:
    manager, scope = session
    with StreamManager(standalone.base, token=standalone.token) as other:
        with other.create_byte_stream(scope, "bytes") as stream:
            stream.write(b"hello")
            stream.flush()
        with other.create_transaction_writer(scope, "st") as txns:
            with txns.begin_txn() as txn:  # committed when the block ends
                txn.write_event("in-txn", routing_key="t")
            assert txn.check_status() == "COMMITTED"
            with pytest.raises(RuntimeError, match="boom"), txns.begin_txn() as failed:
                failed.write_event("never", routing_key="t")
                raise RuntimeError("boom")
            assert failed.check_status() == "ABORTED"
    with manager.create_reader(scope, "st") as reader:
        event = reader.read_next(timeout=30)
        assert event is not None and event.data == b"in-txn"
        assert reader.read_next(timeout=1) is None


def test_writing_to_a_transaction_aborted_meanwhile_says_so(
    session: tuple[StreamManager, str],
) -> None:
    """A transaction aborted behind its writer's back (as its lease running out does): the
    next write, to a shadow set up already or not, is ``TxnFailedError`` naming the state,
    not the segment store's bare NoSuchSegment."""
    manager, scope = session
    with manager.create_transaction_writer(scope, "st") as txns:
        for written_before in (True, False):
            txn = txns.begin_txn()
            if written_before:
                txn.write_event("before", routing_key="t")
                txn.flush()
            assert txns.abort_txn(txn.txn_id) == "ABORTED"
            with pytest.raises(TxnFailedError, match="is ABORTED") as failed:
                txn.write_events([("after", "t"), ("also", "u")])
                txn.flush()
            assert failed.value.state == "ABORTED" and failed.value.txn_id == txn.txn_id


EXIT_PROGRAM = """
import sys
from millrace.client.manager import StreamManager

base, token, scope = sys.argv[1:4]
manager = StreamManager(base, token=token)
writer = manager.create_writer(scope, "st", linger_ms=60_000, batch_events=100_000)  # all held
for i in range(10_000):
    writer.write_event(f"left:{i}", routing_key="k")
reader = manager.create_reader(scope, "st")
reader.read_next(timeout=0.1)
group = manager.create_reader_group(scope, "exit-rg", [f"{scope}/st"])
member = group.create_reader("m")
member.read_next(timeout=0.1)
print("leaving without close", flush=True)
"""


def test_exit_without_close_is_quiet_and_flushes(
    standalone: Standalone, session: tuple[StreamManager, str], tmp_path: Path
) -> None:
    manager, scope = session
    program = tmp_path / "leave.py"
    program.write_text(textwrap.dedent(EXIT_PROGRAM))
    done = subprocess.run(
        [sys.executable, str(program), standalone.base, standalone.token, scope],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == 0, done.stderr
    assert "leaving without close" in done.stdout
    assert "Traceback" not in done.stderr
    assert "Task was destroyed" not in done.stderr
    assert "was not closed" in done.stderr and f"{scope}/st" in done.stderr
    got = 0
    with manager.create_reader(scope, "st") as reader:
        while batch := reader.read_batch(5000, timeout=5):
            got += len(batch)
    assert got == 10_000  # the writer's buffer was flushed at exit


SIGTERM_PROGRAM = """
import sys
from millrace.client.manager import StreamManager

base, token, scope = sys.argv[1:4]
manager = StreamManager(base, token=token)
group = manager.reader_group(scope, "term-rg")
member = group.create_reader("doomed")
print("reading", flush=True)
while True:
    member.read_next(timeout=1)
"""


def test_a_reader_stopped_with_sigterm_leaves_its_group_at_once(
    standalone: Standalone, session: tuple[StreamManager, str], tmp_path: Path
) -> None:
    """``kill`` (SIGTERM) of a program blocked in ``read_next``: the client turns it into a
    clean exit (status 143), so the reader leaves its group then, not after the group's reader
    timeout (here an hour), and a checkpoint does not wait for it."""
    manager, scope = session
    group = manager.create_reader_group(
        scope, "term-rg", [f"{scope}/st"], reader_timeout_ms=3_600_000
    )
    program = tmp_path / "term.py"
    program.write_text(SIGTERM_PROGRAM)
    process = subprocess.Popen(
        [sys.executable, str(program), standalone.base, standalone.token, scope],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "reading"
        assert "doomed" in group.describe()["onlineReaderIds"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 143, process.stderr.read() if process.stderr else ""
        assert "doomed" not in group.describe()["onlineReaderIds"]  # left at exit, not timed out
        assert group.initiate_checkpoint("after-term", timeout=10) is not None
    finally:
        process.kill()


def test_readers_byte_streams_and_transactions_outlive_their_tokens(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With 3 s tokens, objects made at the start go on through several lifetimes."""
    node = Standalone(
        tmp_path_factory.mktemp("short-tokens-all") / "data",
        *free_ports(2),
        services={"MILLRACE_TOKEN_TTL_SECONDS": "3"},
    )
    try:
        node.wait_for(READY_LINE)
        scope = f"s{os.urandom(5).hex()}"
        with StreamManager(node.base, token=node.token) as manager:
            manager.create_scope(scope)
            manager.create_stream(scope, "st", initial_segments=2)
            writer = manager.create_writer(scope, "st")
            reader = manager.create_reader(scope, "st")
            group = manager.create_reader_group(
                scope, "rg", [f"{scope}/st"], group_refresh_time_ms=200
            )
            member = group.create_reader("m")
            stream = manager.create_byte_stream(scope, "bytes")
            txns = manager.create_transaction_writer(scope, "st")
            read: list[object] = []
            taken: list[object] = []
            for life in range(3):
                threading.Event().wait(3.5)  # every token issued so far has expired
                for i in range(100):
                    writer.write_event(f"life{life}:{i}", routing_key=KEYS[i % 4])
                writer.flush()
                stream.write(f"life{life};".encode())
                stream.flush()
                txn = txns.begin_txn()
                txn.write_event(f"txn{life}", routing_key="t")
                txn.commit()
                while len(read) < (life + 1) * 101:
                    batch = reader.read_batch(500, timeout=30)
                    assert batch
                    read.extend(batch)
                while len([e for e in taken if not e.is_checkpoint]) < (life + 1) * 101:  # type: ignore[attr-defined]
                    event = member.read_next(timeout=30)
                    assert event is not None
                    taken.append(event)
            stream.seek(0)
            assert stream.read(100) == b"life0;life1;life2;"
            assert len(read) == len({e.data for e in read}) == 303  # type: ignore[attr-defined]
            for closing in (writer, reader, member, stream, txns):
                closing.close()
    finally:
        node.kill()
