"""The conformance suite every tier backend passes, in-tree or third-party.

Responsibility: state the tier contracts of ``tiers.base`` as executable pytest tests. A backend
author subclasses ``DurableDataLogContract`` or ``ChunkStorageContract`` in a class named
``Test...`` and defines one factory method; pytest collects the inherited tests::

    from tiers.testing.contract import DurableDataLogContract

    class TestMyLog(DurableDataLogContract):
        def make_log(self, tmp_path, log_id):
            return MyDurableDataLog(path=tmp_path / log_id)

Calling the factory twice with the same arguments must give two instances of the *same*
underlying log (or chunk store), as two container processes would have: the fencing and reopen
tests depend on it. Tests branch on the capability flags (``supports_fencing``,
``supports_append``, ``supports_concat``), never on classes. Needs pytest and pytest-asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tiers.base import (
    BadChunkOffsetError,
    ChunkExistsError,
    ChunkNotFoundError,
    ChunkStorage,
    ChunkWrite,
    DataLogClosedError,
    DataLogError,
    DataLogFencedError,
    DataLogFullError,
    DurableDataLog,
    Frame,
    LogAddress,
    StorageError,
)

__all__ = ["ChunkStorageContract", "DurableDataLogContract", "LogFactory", "StorageFactory"]

_CONCURRENT_APPENDS = 200


def _frame(i: int, size: int = 0) -> bytes:
    """A recognisable frame: its index, padded to ``size`` bytes."""
    head = f"frame-{i:08d};".encode()
    return head + bytes((i + k) % 251 for k in range(max(0, size - len(head))))


async def _read_all(log: DurableDataLog) -> list[tuple[LogAddress, bytes]]:
    return [item async for item in log.read_all()]


def _assert_increasing(addresses: list[LogAddress]) -> None:
    for before, after in itertools.pairwise(addresses):
        assert before.sequence < after.sequence, (before, after)
        assert before < after, (before, after)


# -- tier-1 ---------------------------------------------------------------------------------


class LogFactory:
    """Makes log instances for one test and closes them all at its end."""

    def __init__(self, contract: DurableDataLogContract, tmp_path: Path) -> None:
        self._contract = contract
        self._tmp_path = tmp_path
        self._made: list[DurableDataLog] = []

    def __call__(self, log_id: str = "log") -> DurableDataLog:
        log = self._contract.make_log(self._tmp_path, log_id)
        self._made.append(log)
        return log

    async def opened(self, epoch: int = 1, log_id: str = "log") -> DurableDataLog:
        log = self(log_id)
        await log.open(epoch)
        return log

    async def close_all(self) -> None:
        for log in self._made:
            with contextlib.suppress(Exception):
                await log.close()


class DurableDataLogContract:
    """Tier-1 contract tests. Subclasses define ``make_log``."""

    def make_log(self, tmp_path: Path, log_id: str) -> DurableDataLog:
        """A new instance of the log ``log_id`` (same arguments: same underlying log)."""
        raise NotImplementedError

    @pytest_asyncio.fixture
    async def logs(self, tmp_path: Path) -> AsyncIterator[LogFactory]:
        factory = LogFactory(self, tmp_path)
        yield factory
        await factory.close_all()

    def _skip_unless_fencing(self, log: DurableDataLog) -> None:
        if not log.supports_fencing:
            pytest.skip("backend does not support fencing")

    # -- basics ------------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_declares_capabilities(self, logs: LogFactory) -> None:
        log = logs()
        assert isinstance(log, DurableDataLog)
        for flag in ("is_durable", "supports_fencing", "blocking"):
            assert isinstance(getattr(log, flag), bool), flag
        assert log.epoch is None

    @pytest.mark.asyncio
    async def test_append_before_open_is_refused(self, logs: LogFactory) -> None:
        with pytest.raises(DataLogClosedError):
            await logs().append(b"x")

    @pytest.mark.asyncio
    async def test_new_log_reads_empty(self, logs: LogFactory) -> None:
        log = await logs.opened()
        assert await _read_all(log) == []

    @pytest.mark.asyncio
    async def test_appends_read_back_in_order(self, logs: LogFactory) -> None:
        log = await logs.opened()
        frames = [_frame(i, size) for i, size in enumerate([1, 17, 4096, 100_000, 3, 65_536])]
        frames[0] = b"z"
        addresses = [await log.append(frame) for frame in frames]
        _assert_increasing(addresses)
        assert await _read_all(log) == list(zip(addresses, frames, strict=True))

    @pytest.mark.asyncio
    async def test_accepts_any_bytes_like_frame(self, logs: LogFactory) -> None:
        log = await logs.opened()
        await log.append(memoryview(bytearray(b"from a bytearray")))
        await log.append(memoryview(b"..from a memoryview..")[2:-2])
        assert [f for _, f in await _read_all(log)] == [b"from a bytearray", b"from a memoryview"]

    @pytest.mark.asyncio
    async def test_a_frame_given_in_parts_reads_back_whole(self, logs: LogFactory) -> None:
        log = await logs.opened()
        big = _frame(1, 100_000)  # (past the file log's gathering size: written as it is)
        parts: list[bytes | memoryview] = [b"head", memoryview(big), b"", b"tail", big[:70_000]]
        whole = b"".join(parts)
        frames: list[Frame] = [parts, [b"one part"], b"after", [memoryview(big)[:10], b"x"]]
        addresses = [await log.append(frame) for frame in frames]
        _assert_increasing(addresses)
        read = [f for _, f in await _read_all(log)]
        assert read == [whole, b"one part", b"after", big[:10] + b"x"]
        with pytest.raises(DataLogFullError):
            await log.append([big] * (log.frame_bytes_max // len(big) + 1))
        with pytest.raises(ValueError):
            await log.append([b"", b""])

    @pytest.mark.asyncio
    async def test_concurrent_appends_complete_in_issue_order(self, logs: LogFactory) -> None:
        log = await logs.opened()
        completed: list[int] = []

        async def append(i: int) -> LogAddress:
            address = await log.append(_frame(i, 64 + i))
            completed.append(i)
            return address

        addresses = await asyncio.gather(*(append(i) for i in range(_CONCURRENT_APPENDS)))
        assert completed == list(range(_CONCURRENT_APPENDS))
        _assert_increasing(list(addresses))
        read = await _read_all(log)
        assert [a for a, _ in read] == list(addresses)
        assert [f for _, f in read] == [_frame(i, 64 + i) for i in range(_CONCURRENT_APPENDS)]

    @pytest.mark.asyncio
    async def test_many_frames_span_read_batches(self, logs: LogFactory) -> None:
        log = await logs.opened()
        count = 3000
        for start in range(0, count, 500):
            await asyncio.gather(*(log.append(_frame(i)) for i in range(start, start + 500)))
        read = await _read_all(log)
        assert [f for _, f in read] == [_frame(i) for i in range(count)]
        _assert_increasing([a for a, _ in read])

    @pytest.mark.asyncio
    async def test_frame_size_limits(self, logs: LogFactory) -> None:
        log = await logs.opened()
        largest = _frame(7, log.frame_bytes_max)
        address = await log.append(largest)
        with pytest.raises(DataLogFullError):
            await log.append(b"x" * (log.frame_bytes_max + 1))
        with pytest.raises(ValueError):
            await log.append(b"")
        assert await _read_all(log) == [(address, largest)]

    @pytest.mark.asyncio
    async def test_closed_log_refuses_appends(self, logs: LogFactory) -> None:
        log = await logs.opened()
        await log.append(b"x")
        await log.close()
        assert log.epoch is None
        with pytest.raises(DataLogClosedError):
            await log.append(b"y")

    # -- truncation --------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_truncate_drops_frames_up_to_address(self, logs: LogFactory) -> None:
        log = await logs.opened()
        addresses = [await log.append(_frame(i)) for i in range(10)]
        await log.truncate(addresses[4])
        assert await _read_all(log) == [(addresses[i], _frame(i)) for i in range(5, 10)]
        await log.truncate(addresses[2])  # going back is a no-op
        assert len(await _read_all(log)) == 5
        later = await log.append(b"later")
        assert (await _read_all(log))[-1] == (later, b"later")
        await log.truncate(later)
        assert await _read_all(log) == []

    @pytest.mark.asyncio
    async def test_truncation_survives_reopen(self, logs: LogFactory) -> None:
        first = await logs.opened(epoch=1)
        addresses = [await first.append(_frame(i)) for i in range(6)]
        await first.truncate(addresses[2])
        await first.close()
        second = await logs.opened(epoch=2)
        assert await _read_all(second) == [(addresses[i], _frame(i)) for i in range(3, 6)]

    # -- reopen and epochs -------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_reopen_after_close_sees_everything(self, logs: LogFactory) -> None:
        first = await logs.opened(epoch=1)
        written = [(await first.append(_frame(i, 300)), _frame(i, 300)) for i in range(20)]
        await first.close()
        second = await logs.opened(epoch=2)
        assert await _read_all(second) == written

    @pytest.mark.asyncio
    async def test_reopen_without_close_sees_every_acknowledged_frame(
        self, logs: LogFactory
    ) -> None:
        first = await logs.opened(epoch=3)
        addresses = await asyncio.gather(*(first.append(_frame(i)) for i in range(50)))
        second = await logs.opened(epoch=7)  # the first instance "crashed": never closed
        assert await _read_all(second) == [(a, _frame(i)) for i, a in enumerate(addresses)]

    @pytest.mark.asyncio
    async def test_new_epoch_continues_after_old_frames(self, logs: LogFactory) -> None:
        first = await logs.opened(epoch=1)
        old = [await first.append(_frame(i)) for i in range(3)]
        await first.close()
        second = await logs.opened(epoch=2)
        new = [await second.append(_frame(i)) for i in range(3, 6)]
        _assert_increasing(old + new)
        assert [a for a, _ in await _read_all(second)] == old + new
        await second.close()
        third = await logs.opened(epoch=3)
        assert [f for _, f in await _read_all(third)] == [_frame(i) for i in range(6)]

    @pytest.mark.asyncio
    async def test_epoch_must_grow(self, logs: LogFactory) -> None:
        owner = await logs.opened(epoch=5)
        if not owner.supports_fencing:
            pytest.skip("backend does not support fencing")
        for epoch in (5, 4, 0):
            with pytest.raises(DataLogFencedError):
                await logs().open(epoch)
        await owner.append(b"still the owner")  # failed opens changed nothing
        await owner.close()
        with pytest.raises(DataLogFencedError):
            await logs().open(5)  # not even after the owner closed

    # -- fencing -----------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_fenced_instance_can_no_longer_write(self, logs: LogFactory) -> None:
        old = await logs.opened(epoch=1)
        self._skip_unless_fencing(old)
        kept = await old.append(b"before")
        new = await logs.opened(epoch=2)
        with pytest.raises(DataLogFencedError):
            await old.append(b"after")
        with pytest.raises(DataLogFencedError):
            await old.append(b"after again")
        with pytest.raises(DataLogFencedError):
            await old.truncate(kept)
        assert await _read_all(new) == [(kept, b"before")]
        await new.append(b"new owner")
        assert [f for _, f in await _read_all(new)] == [b"before", b"new owner"]

    @pytest.mark.asyncio
    async def test_fencing_while_appends_are_in_flight(self, logs: LogFactory) -> None:
        old = await logs.opened(epoch=1)
        self._skip_unless_fencing(old)
        acknowledged: list[bytes] = []
        issued_after_open: list[bytes] = []
        new_opened = asyncio.Event()

        async def write(i: int) -> None:
            frame = _frame(i, 512)
            if new_opened.is_set():
                issued_after_open.append(frame)
            with contextlib.suppress(DataLogError):
                await old.append(frame)
                acknowledged.append(frame)

        async def writer() -> None:
            # Until some appends were issued after the takeover, however fast the log is.
            for start in itertools.count(0, 20):
                await asyncio.gather(*(write(i) for i in range(start, start + 20)))
                if issued_after_open:
                    return

        task = asyncio.create_task(writer())
        async with asyncio.timeout(30):
            while len(acknowledged) < 100:  # take over in the middle of a stream of appends
                await asyncio.sleep(0.001)
        new = await logs.opened(epoch=2)
        new_opened.set()
        async with asyncio.timeout(30):
            await task
        frames = [f for _, f in await _read_all(new)]
        assert set(acknowledged) <= set(frames)
        assert issued_after_open
        assert not set(issued_after_open) & set(frames)
        with pytest.raises(DataLogFencedError):
            await old.append(b"x")


# -- tier-2 ---------------------------------------------------------------------------------


class StorageFactory:
    """Makes chunk-storage instances for one test and closes them at its end."""

    def __init__(self, contract: ChunkStorageContract, tmp_path: Path) -> None:
        self._contract = contract
        self._tmp_path = tmp_path
        self._made: list[ChunkStorage] = []

    def __call__(self) -> ChunkStorage:
        storage = self._contract.make_storage(self._tmp_path)
        self._made.append(storage)
        return storage

    async def close_all(self) -> None:
        for storage in self._made:
            with contextlib.suppress(Exception):
                await storage.close()


async def _put(storage: ChunkStorage, name: str, data: bytes) -> None:
    """Create chunk ``name`` holding ``data`` the way the backend's flags allow."""
    if storage.supports_append:
        await storage.create(name)
        await storage.write(name, 0, data)
    else:
        await storage.create_with_data(name, data)


class ChunkStorageContract:
    """Tier-2 contract tests. Subclasses define ``make_storage``."""

    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        """A new instance over the chunk store of ``tmp_path`` (same path: same chunks)."""
        raise NotImplementedError

    @pytest_asyncio.fixture
    async def storages(self, tmp_path: Path) -> AsyncIterator[StorageFactory]:
        factory = StorageFactory(self, tmp_path)
        yield factory
        await factory.close_all()

    @pytest_asyncio.fixture
    async def storage(self, storages: StorageFactory) -> ChunkStorage:
        return storages()

    # -- create, exists, length, delete ------------------------------------------------------

    @pytest.mark.asyncio
    async def test_declares_capabilities(self, storage: ChunkStorage) -> None:
        for flag in ("supports_append", "supports_concat", "is_durable", "blocking"):
            assert isinstance(getattr(storage, flag), bool), flag
        assert isinstance(storage.write_many_concurrency, int)
        assert storage.write_many_concurrency >= 1

    @pytest.mark.asyncio
    async def test_create_makes_an_empty_chunk(self, storage: ChunkStorage) -> None:
        assert not await storage.exists("c")
        await storage.create("c")
        assert await storage.exists("c")
        assert await storage.length("c") == 0
        with pytest.raises(ChunkExistsError):
            await storage.create("c")
        with pytest.raises(ChunkExistsError):
            await storage.create_with_data("c", b"data")

    @pytest.mark.asyncio
    async def test_create_with_data(self, storage: ChunkStorage) -> None:
        await storage.create_with_data("c", b"hello world")
        assert await storage.length("c") == 11
        assert await storage.read("c", 0, 11) == b"hello world"

    @pytest.mark.asyncio
    async def test_delete(self, storage: ChunkStorage) -> None:
        await _put(storage, "a/b/c", b"x")
        await storage.delete("a/b/c")
        assert not await storage.exists("a/b/c")
        with pytest.raises(ChunkNotFoundError):
            await storage.delete("a/b/c")
        await _put(storage, "a/b/c", b"again")  # the name can be used again
        assert await storage.read("a/b/c", 0, 5) == b"again"

    @pytest.mark.asyncio
    async def test_missing_chunk_errors(self, storage: ChunkStorage) -> None:
        with pytest.raises(ChunkNotFoundError):
            await storage.length("nope")
        with pytest.raises(ChunkNotFoundError):
            await storage.read("nope", 0, 1)
        with pytest.raises(ChunkNotFoundError):
            await storage.delete("nope")
        if storage.supports_append:
            with pytest.raises(ChunkNotFoundError):
                await storage.write("nope", 0, b"x")

    @pytest.mark.asyncio
    async def test_invalid_names_are_refused(self, storage: ChunkStorage) -> None:
        for name in ["", "a\x00b", "x" * 1025]:
            with pytest.raises(ValueError):
                await storage.create(name)

    @pytest.mark.asyncio
    async def test_segment_style_names(self, storage: ChunkStorage) -> None:
        names = [
            "scope/stream/0.#epoch.0",
            "scope/stream/0.#epoch.0.E-1-O-0.chunk",
            "scope/stream/3.#epoch.2#transaction.0123456789abcdef0123456789abcdef",
            "_system/containers/metadata_7:attributes",
            "a",
            "a/b",
            "a b/ü%~",
        ]
        for i, name in enumerate(names):
            await _put(storage, name, f"chunk {i}".encode())
        for i, name in enumerate(names):
            data = f"chunk {i}".encode()
            assert await storage.read(name, 0, len(data)) == data, name

    # -- write and read ----------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_write_appends_at_length(self, storage: ChunkStorage) -> None:
        if not storage.supports_append:
            pytest.skip("backend cannot append")
        await storage.create("c")
        assert await storage.write("c", 0, b"abc") == 3
        assert await storage.write("c", 3, memoryview(b"defg")) == 7
        assert await storage.write("c", 7, b"") == 7
        assert await storage.length("c") == 7
        assert await storage.read("c", 0, 7) == b"abcdefg"

    @pytest.mark.asyncio
    async def test_write_at_wrong_offset_is_refused(self, storage: ChunkStorage) -> None:
        if not storage.supports_append:
            pytest.skip("backend cannot append")
        await _put(storage, "c", b"abc")
        for offset in (0, 2, 4, 100):
            with pytest.raises(BadChunkOffsetError):
                await storage.write("c", offset, b"x")
        with pytest.raises(BadChunkOffsetError):
            await storage.write("c", 5, b"")
        with pytest.raises(BadChunkOffsetError):
            await storage.write("c", -1, b"x")
        assert await storage.read("c", 0, 3) == b"abc"

    @pytest.mark.asyncio
    async def test_write_many_reports_each_item(self, storage: ChunkStorage) -> None:
        await _put(storage, "old", b"abc")
        writes = [
            ChunkWrite("new/1", 0, b"one", create=True),
            ChunkWrite("old", 0, b"x", create=True),  # exists
            ChunkWrite("new/2", 0, memoryview(b"two"), create=True),
        ]
        if storage.supports_append:
            writes += [
                ChunkWrite("old", 3, b"def"),
                ChunkWrite("old", 1, b"zz"),  # not at the end
                ChunkWrite("missing", 0, b"q"),
            ]
        outcomes = await storage.write_many(writes)
        assert len(outcomes) == len(writes)
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], ChunkExistsError)
        assert await storage.read("new/1", 0, 3) == b"one"
        assert await storage.read("new/2", 0, 3) == b"two"
        if storage.supports_append:
            assert outcomes[3] is None
            assert isinstance(outcomes[4], BadChunkOffsetError)
            assert isinstance(outcomes[5], ChunkNotFoundError)
            assert await storage.read("old", 0, 6) == b"abcdef"
        else:
            assert await storage.read("old", 0, 3) == b"abc"
        assert await storage.write_many([]) == []

    @pytest.mark.asyncio
    async def test_no_append_backend_refuses_write(self, storage: ChunkStorage) -> None:
        if storage.supports_append:
            pytest.skip("backend can append")
        await storage.create_with_data("c", b"abc")
        with pytest.raises(StorageError):
            await storage.write("c", 3, b"x")

    @pytest.mark.asyncio
    async def test_reads_return_exactly_the_range(self, storage: ChunkStorage) -> None:
        data = bytes(range(256)) * 40
        await _put(storage, "c", data)
        for offset, length in [(0, 1), (0, len(data)), (100, 1000), (len(data) - 1, 1)]:
            assert await storage.read("c", offset, length) == data[offset : offset + length]
        assert await storage.read("c", 5, 0) == b""
        for offset, length in [(0, len(data) + 1), (len(data), 1), (-1, 1), (0, -1)]:
            with pytest.raises(BadChunkOffsetError):
                await storage.read("c", offset, length)

    @pytest.mark.asyncio
    async def test_large_chunk(self, storage: ChunkStorage) -> None:
        part = bytes(i % 253 for i in range(1 << 20))
        if storage.supports_append:
            await storage.create("big")
            for i in range(4):
                await storage.write("big", i * len(part), part)
        else:
            await storage.create_with_data("big", part * 4)
        assert await storage.length("big") == 4 * len(part)
        assert await storage.read("big", len(part) - 10, len(part)) == part[-10:] + part[:-10]

    @pytest.mark.asyncio
    async def test_concurrent_work_on_different_chunks(self, storage: ChunkStorage) -> None:
        await asyncio.gather(*(_put(storage, f"s/{i}", b"%d" % i * 100) for i in range(20)))
        for i in range(20):
            assert await storage.read(f"s/{i}", 0, 100 * len(b"%d" % i)) == b"%d" % i * 100

    @pytest.mark.asyncio
    async def test_another_instance_sees_the_chunks(self, storages: StorageFactory) -> None:
        await _put(storages(), "shared/c", b"persisted")
        other = storages()
        assert await other.exists("shared/c")
        assert await other.read("shared/c", 0, 9) == b"persisted"

    # -- concat ------------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_concat_appends_whole_sources(self, storage: ChunkStorage) -> None:
        if not storage.supports_concat:
            with pytest.raises(StorageError):
                await storage.concat("t", ["s"])
            pytest.skip("backend has no native concat")
        await _put(storage, "t", b"target;")
        await _put(storage, "s1", b"one;")
        await _put(storage, "s2", b"two" * 1000)
        assert await storage.concat("t", ["s1", "s2"]) == 7 + 4 + 3000
        assert await storage.read("t", 0, 3011) == b"target;one;" + b"two" * 1000
        assert await storage.read("s1", 0, 4) == b"one;"  # sources are left as they were

    @pytest.mark.asyncio
    async def test_concat_with_a_missing_chunk_changes_nothing(self, storage: ChunkStorage) -> None:
        if not storage.supports_concat:
            pytest.skip("backend has no native concat")
        await _put(storage, "t", b"target")
        await _put(storage, "s1", b"one")
        with pytest.raises(ChunkNotFoundError):
            await storage.concat("t", ["s1", "missing"])
        with pytest.raises(ChunkNotFoundError):
            await storage.concat("missing", ["s1"])
        assert await storage.length("t") == 6
        with pytest.raises(ValueError):
            await storage.concat("t", ["s1", "t"])
