"""``FileDurableDataLog`` beyond the contract: crashes, torn tails, corruption, fsync, ledgers."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tiers.base import DataLogCorruptionError, DataLogError, DataLogFencedError, LogAddress
from tiers.direct_io import BLOCK
from tiers.file import FileDurableDataLog
from tiers.file import format as fmt
from tiers.file.thread import SerialThread


def frame(i: int, size: int = 100) -> bytes:
    return f"frame-{i};".encode().ljust(size, b".")


async def read_frames(log: FileDurableDataLog) -> list[bytes]:
    return [f async for _, f in log.read_all()]


#: The frames here go up to 8 MiB, past the default largest frame (``defaults.FRAME_BYTES_MAX``).
LARGEST_FRAME = 8 << 20


async def opened(path: Path, epoch: int, **options: object) -> FileDurableDataLog:
    options.setdefault("frame_bytes_max", LARGEST_FRAME)
    log = FileDurableDataLog(path=path, **options)  # type: ignore[arg-type]
    await log.open(epoch)
    return log


async def write_and_abandon(path: Path, count: int, epoch: int = 1) -> list[LogAddress]:
    """Append ``count`` frames and drop the instance without closing it (a crash)."""
    log = await opened(path, epoch)
    return list(await asyncio.gather(*(log.append(frame(i)) for i in range(count))))


def ledger(path: Path, ledger_id: int = 1) -> Path:
    return path / fmt.ledger_file_name(ledger_id)


# -- torn tails and corruption ---------------------------------------------------------------

TORN_TAILS = {
    "header cut short": b"\x10\x00\x00",
    "payload cut short": fmt.RECORD.pack(1000, 0, 11) + b"partial",
    "bad checksum in last record": fmt.RECORD.pack(5, 1234, 11) + b"abcde",
    "zero-filled tail": bytes(4096),
}


@pytest.mark.parametrize("tail", TORN_TAILS.values(), ids=TORN_TAILS.keys())
async def test_torn_tail_is_ignored(tmp_path: Path, tail: bytes) -> None:
    await write_and_abandon(tmp_path, 10)
    with ledger(tmp_path).open("ab") as file:
        file.write(tail)
    second = await opened(tmp_path, 2)
    assert await read_frames(second) == [frame(i) for i in range(10)]
    await second.append(b"after recovery")
    third = await opened(tmp_path, 3)  # the torn bytes were sealed off for good
    assert await read_frames(third) == [*(frame(i) for i in range(10)), b"after recovery"]


async def test_torn_last_record_of_a_real_batch_is_ignored(tmp_path: Path) -> None:
    addresses = await write_and_abandon(tmp_path, 10)
    end = addresses[-1].offset + fmt.RECORD.size + len(frame(9))  # (the file may be longer:
    os.truncate(ledger(tmp_path), end - 7)  # direct writes pad it to a block) the last write
    # stopped halfway through a record
    log = await opened(tmp_path, 2)
    assert await read_frames(log) == [frame(i) for i in range(9)]
    assert (await log.append(b"next")).sequence == addresses[-1].sequence  # 10 is reused


def flip_bit(path: Path, offset: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ 0x10]))


@pytest.mark.parametrize("where", [0, 4, 8, 16, 60], ids=["length", "crc", "seq", "payload", "p60"])
async def test_bit_flip_in_live_ledger_is_corruption(tmp_path: Path, where: int) -> None:
    addresses = await write_and_abandon(tmp_path, 10)
    damaged = addresses[3].offset
    flip_bit(ledger(tmp_path), damaged + where)
    with pytest.raises(DataLogCorruptionError) as error:
        await opened(tmp_path, 2)
    assert str(ledger(tmp_path)) in str(error.value)
    assert f"byte offset {damaged}" in str(error.value)


async def test_bit_flip_in_sealed_ledger_is_corruption_on_read(tmp_path: Path) -> None:
    addresses = await write_and_abandon(tmp_path, 10)
    log = await opened(tmp_path, 2)  # seals ledger 1
    await log.append(b"in ledger 2")
    flip_bit(ledger(tmp_path), addresses[9].offset + 20)  # even the last record: it is sealed
    with pytest.raises(DataLogCorruptionError) as error:
        await read_frames(log)
    assert f"{ledger(tmp_path)}: CRC32C mismatch at byte offset {addresses[9].offset}" in str(
        error.value
    )


async def test_unreadable_manifest_is_corruption(tmp_path: Path) -> None:
    await write_and_abandon(tmp_path, 1)
    (tmp_path / "manifest").write_bytes(b"{not json")
    with pytest.raises(DataLogCorruptionError, match="manifest"):
        await opened(tmp_path, 2)


async def test_missing_ledger_is_corruption(tmp_path: Path) -> None:
    await write_and_abandon(tmp_path, 1)
    ledger(tmp_path).unlink()
    with pytest.raises(DataLogCorruptionError, match="missing"):
        await opened(tmp_path, 2)


# -- crash ----------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from tiers.file import FileDurableDataLog

    async def main():
        log = FileDurableDataLog(path=sys.argv[1])
        await log.open(1)
        i = 0
        while True:
            frames = [b"frame-%d;" % (i + k) * (1 + (i + k) % 50) for k in range(16)]
            await asyncio.gather(*(log.append(f) for f in frames))
            print(i + 15, flush=True)  # frames up to here are acknowledged
            i += 16

    asyncio.run(main())
    """
)


def expected_crash_frame(i: int) -> bytes:
    return b"frame-%d;" % i * (1 + i % 50)


async def test_kill_9_loses_no_acknowledged_frame(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    acknowledged = -1
    for _ in range(200):
        acknowledged = int(process.stdout.readline())
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    log = await opened(tmp_path, 2)
    frames = await read_frames(log)
    assert len(frames) > acknowledged
    assert frames == [expected_crash_frame(i) for i in range(len(frames))]


async def test_another_process_fences_this_one(tmp_path: Path) -> None:
    log = await opened(tmp_path, 1)
    await log.append(b"mine")
    code = "import asyncio, sys; from tiers.file import FileDurableDataLog as L; " + (
        "asyncio.run(L(path=sys.argv[1]).open(2))"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    with pytest.raises(DataLogFencedError):
        await log.append(b"too late")


async def test_concurrent_openers_leave_one_owner(tmp_path: Path) -> None:
    logs = [FileDurableDataLog(path=tmp_path, fsync=False) for _ in range(6)]
    results = await asyncio.gather(
        *(log.open(epoch) for epoch, log in enumerate(logs, 1)), return_exceptions=True
    )
    assert not isinstance(results[-1], BaseException)  # the highest epoch always wins
    assert all(r is None or isinstance(r, DataLogFencedError) for r in results)
    await logs[-1].append(b"owner")
    for log, result in zip(logs[:-1], results[:-1], strict=True):
        if result is None:
            with pytest.raises(DataLogFencedError):
                await log.append(b"not the owner")
    epoch = fmt.decode_epoch((tmp_path / "epoch").read_bytes(), "epoch")
    assert epoch == 6


# -- failures while writing -------------------------------------------------------------------


async def test_failed_write_is_never_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await opened(tmp_path, 1)
    await log.append(b"good-1")

    def half_then_fail(fd: int, buffers: list[bytes], offset: int) -> int:
        data = b"".join(buffers)
        os.pwrite(fd, data[: len(data) // 2], offset)  # garbage is left behind
        raise OSError(5, "injected EIO")

    monkeypatch.setattr(os, "pwritev", half_then_fail)
    with pytest.raises(DataLogError, match="injected EIO"):
        await log.append(frame(1, 5000))
    monkeypatch.undo()
    with pytest.raises(DataLogError, match="injected EIO"):
        await log.append(b"refused: failures are sticky")
    second = await opened(tmp_path, 2)
    assert await read_frames(second) == [b"good-1"]
    await second.append(b"good-2")
    assert await read_frames(await opened(tmp_path, 3)) == [b"good-1", b"good-2"]


@pytest.mark.parametrize("cut_fails", [False, True], ids=["cut", "cut-fails"])
async def test_failed_fdatasync_is_not_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut_fails: bool
) -> None:
    log = await opened(tmp_path, 1)
    await log.append(b"good-1")

    def fail(*args: object) -> None:
        raise OSError(28, "injected ENOSPC")

    monkeypatch.setattr(os, "fdatasync", fail)
    if cut_fails:
        monkeypatch.setattr(os, "ftruncate", fail)
        monkeypatch.setattr(os, "fsync", fail)  # the manifest cannot be updated either
    results = await asyncio.gather(*(log.append(b"lost") for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, DataLogError) for r in results)
    monkeypatch.undo()
    second = await opened(tmp_path, 2)
    frames = await read_frames(second)
    # The failed frames were never acknowledged: gone, or (if nothing could cut them off and
    # the page cache kept them) found by the next owner: "outcome unknown", never corruption.
    assert frames[0] == b"good-1"
    assert set(frames[1:]) <= {b"lost"}
    if not cut_fails:
        assert frames == [b"good-1"]


# -- direct writes --------------------------------------------------------------------------------

ODD_FRAMES = [frame(i, size) for i, size in enumerate([1, 4095, 4096, 4097, 70_000, 3, 5 << 20, 9])]


async def test_direct_writes_leave_the_bytes_buffered_writes_would(tmp_path: Path) -> None:
    """Frames of sizes around the block, one at a time and in a group: the direct ledger
    holds byte for byte what the buffered one does up to its end, zeros past it, and reads
    back after a crash (instance dropped) and a new epoch."""
    written: dict[bool, bytes] = {}
    for direct in (True, False):
        path = tmp_path / f"direct-{direct}"
        log = await opened(path, 1, direct_io=direct)
        assert log._appender is not None
        if direct and not log._appender.direct:
            pytest.skip("this file system refuses O_DIRECT")
        assert log._appender.direct == direct
        for data in ODD_FRAMES:
            await log.append(data)
        addresses = await asyncio.gather(*(log.append(data) for data in ODD_FRAMES))
        end = addresses[-1].offset + fmt.RECORD.size + len(ODD_FRAMES[-1])
        content = ledger(path).read_bytes()
        assert content[end:] == bytes(len(content) - end)  # (buffered: nothing past the end)
        assert len(content) % BLOCK == 0 or not direct
        written[direct] = content[:end]
        again = await opened(path, 2)
        assert await read_frames(again) == ODD_FRAMES * 2
        await again.append(b"after")
        assert await read_frames(await opened(path, 3)) == [*ODD_FRAMES * 2, b"after"]
    assert written[True] == written[False]


async def test_a_device_refusing_the_alignment_gets_buffered_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await opened(tmp_path, 1)
    await log.append(b"first")
    assert log._appender is not None
    was_direct = log._appender.direct
    real_pwritev = os.pwritev
    refused = []

    def refuse_direct(fd: int, buffers: list[bytes], offset: int) -> int:
        if log._appender is not None and log._appender.direct:
            refused.append(offset)
            raise OSError(errno.EINVAL, "injected: bad alignment")
        return real_pwritev(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", refuse_direct)
    await log.append(b"second")
    await log.append(b"third")
    assert log._appender is not None and not log._appender.direct
    assert len(refused) == (1 if was_direct else 0)  # (none where O_DIRECT was refused at open)
    monkeypatch.undo()
    assert await read_frames(await opened(tmp_path, 2)) == [b"first", b"second", b"third"]


async def test_direct_io_must_be_true_or_false(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="option 'direct_io' must be true or false, not 'yes'"):
        FileDurableDataLog(path=tmp_path, direct_io="yes")  # type: ignore[arg-type]


# -- fsync, group commit, ledgers ---------------------------------------------------------------


async def test_fsync_off_means_no_fsync_at_all(tmp_path: Path) -> None:
    log = await opened(tmp_path, 1, fsync=False, ledger_bytes_max=1024)
    addresses = [await log.append(frame(i)) for i in range(30)]
    await log.truncate(addresses[10])
    await log.close()
    again = await opened(tmp_path, 2, fsync=False)
    assert len(await read_frames(again)) == 19
    assert log.fsync_count == again.fsync_count == 0


async def test_group_commit_uses_one_fdatasync_per_batch(tmp_path: Path) -> None:
    log = await opened(tmp_path, 1)
    before = log.fsync_count
    await log.append(b"alone")
    assert log.fsync_count == before + 1
    before = log.fsync_count
    await asyncio.gather(*(log.append(frame(i)) for i in range(200)))
    assert 1 <= log.fsync_count - before < 20  # 200 frames, a handful of batches


async def test_ledgers_roll_and_truncation_deletes_them(tmp_path: Path) -> None:
    log = await opened(tmp_path, 1, ledger_bytes_max=4096, fsync=False)
    addresses = [await log.append(frame(i, 1000)) for i in range(40)]
    ledgers = sorted(tmp_path.glob("ledger-*.log"))
    assert len(ledgers) >= 10
    assert len({a.ledger for a in addresses}) == len(ledgers)
    await log.truncate(addresses[29])
    remaining = {int(p.stem.split("-")[1]) for p in tmp_path.glob("ledger-*.log")}
    assert min(remaining) == addresses[30].ledger or min(remaining) == addresses[29].ledger
    assert await read_frames(log) == [frame(i, 1000) for i in range(30, 40)]
    assert await read_frames(await opened(tmp_path, 2)) == [frame(i, 1000) for i in range(30, 40)]


async def test_orphan_ledger_files_are_removed_on_open(tmp_path: Path) -> None:
    await write_and_abandon(tmp_path, 3)
    ledger(tmp_path, 2).write_bytes(b"left by a crash during a roll")
    log = await opened(tmp_path, 2)
    assert fmt.decode_ledger_header(ledger(tmp_path, 2).read_bytes(), "x").epoch == 2
    assert await read_frames(log) == [frame(i) for i in range(3)]


async def test_large_frames_cross_read_windows(tmp_path: Path) -> None:
    log = await opened(tmp_path, 1, fsync=False, read_batch_bytes_max=3 << 20)
    sizes = [300_000, 5, 2 << 20, 1 << 20, 70_000, 1, 8 << 20]
    frames = [bytes([i]) * size for i, size in enumerate(sizes)]
    await asyncio.gather(*(log.append(f) for f in frames))
    assert await read_frames(log) == frames
    assert await read_frames(await opened(tmp_path, 2, fsync=False)) == frames


# -- the byte format is frozen ----------------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden" / "file-log-v1"
GOLDEN_FRAMES = [b"golden-%d;" % i * (1 + i) for i in range(12)]


async def test_golden_v1_log_still_decodes(tmp_path: Path) -> None:
    """A log written by format v1 (epochs 1 and 2, truncated through sequence 3) still reads."""
    for name in os.listdir(GOLDEN):
        (tmp_path / name).write_bytes((GOLDEN / name).read_bytes())
    log = await opened(tmp_path, 3)
    read = [item async for item in log.read_all()]
    assert [f for _, f in read] == GOLDEN_FRAMES[3:]
    assert [a.sequence for a, _ in read] == list(range(4, 13))


async def make_golden(path: Path) -> None:  # pragma: no cover - run by hand to make the fixture
    first = await opened(path, 1)
    addresses = [await first.append(f) for f in GOLDEN_FRAMES[:8]]
    await first.close()
    second = await opened(path, 2)
    for f in GOLDEN_FRAMES[8:]:
        await second.append(f)
    await second.truncate(addresses[2])
    await second.close()


# -- the writer thread ------------------------------------------------------------------------


async def test_writer_thread_runs_in_order_and_stops_when_idle() -> None:
    thread = SerialThread("test-writer", idle_seconds=0.05)
    seen: list[int] = []
    results = await asyncio.gather(*(thread.submit(seen.append, i) for i in range(100)))
    assert seen == list(range(100)) and results == [None] * 100
    with pytest.raises(ZeroDivisionError):
        await thread.submit(divmod, 1, 0)
    await asyncio.sleep(0.2)
    assert not any(t.name == "test-writer" for t in threading.enumerate())
    assert await thread.submit(len, "again") == 5  # starts again on demand


async def test_waiting_batches_are_joined_into_one_call_and_each_caller_gets_its_part() -> None:
    """Group commit across callers: calls queued while the thread was busy become one call;
    each caller gets the results of its own items, and a failure fails all of them."""
    thread = SerialThread("test-merge", idle_seconds=0.05)
    calls: list[list[int]] = []
    gate = threading.Event()

    def write(items: list[int]) -> list[int]:
        gate.wait(5)
        calls.append(list(items))
        if -1 in items:
            raise OSError("disk gone")
        return [item * 10 for item in items]

    first = thread.submit(write, [0], merge=True)  # holds the thread until the gate opens
    await asyncio.sleep(0.05)
    waiting = [thread.submit(write, [i, i + 100], merge=True) for i in range(1, 6)]
    gate.set()
    assert await first == [0]
    assert await asyncio.gather(*waiting) == [[i * 10, (i + 100) * 10] for i in range(1, 6)]
    assert calls[1] == [1, 101, 2, 102, 3, 103, 4, 104, 5, 105]  # one call for the five
    gate.clear()
    blocker = thread.submit(write, [7], merge=True)
    await asyncio.sleep(0.05)
    doomed = [thread.submit(write, [-1], merge=True), thread.submit(write, [8], merge=True)]
    gate.set()
    assert await blocker == [70]
    for future in doomed:
        with pytest.raises(OSError, match="disk gone"):
            await future


# -- appends on the caller's thread (append_now) -----------------------------------------------


async def test_append_now_writes_on_the_callers_thread_durable_in_order(tmp_path: Path) -> None:
    log = await opened(tmp_path, 1)
    first = await log.append(frame(0))
    before = log.fsync_count
    addresses = [log.append_now(frame(i)) for i in range(1, 6)]
    assert all(a is not None for a in addresses)
    assert log.fsync_count == before + 5  # each durable on return
    assert await log.append(frame(6)) > addresses[-1] > first  # type: ignore[operator]
    successor = await opened(tmp_path, 2)  # a new owner reads every acknowledged frame
    assert await read_frames(successor) == [frame(i) for i in range(7)]


async def test_append_now_declines_while_an_append_is_under_way(tmp_path: Path) -> None:
    log = await opened(tmp_path, 1)
    pending = asyncio.ensure_future(log.append(b"queued"))
    await asyncio.sleep(0)  # queued, handed to the writer thread
    assert log.append_now(b"would overtake it") is None
    await pending
    assert log.append_now(b"alone") is not None
    assert await read_frames(await opened(tmp_path, 2)) == [b"queued", b"alone"]


async def test_append_now_is_fenced_and_its_failure_sticks(tmp_path: Path) -> None:
    log = await opened(tmp_path, 1)
    log.append_now(b"mine")
    await opened(tmp_path, 2)
    with pytest.raises(DataLogFencedError):
        log.append_now(b"too late")
    with pytest.raises(DataLogFencedError):
        await log.append(b"still too late")
    assert await read_frames(await opened(tmp_path, 3)) == [b"mine"]
