"""``FileSystemChunkStorage`` beyond the contract: name mapping, fsync, directories, concat."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tiers.filesystem import FileSystemChunkStorage, chunk_path


def test_names_map_inside_the_root_without_collisions() -> None:
    assert chunk_path("/r", "scope/stream/0.#epoch.0") == "/r/scope/stream/0.#epoch.0~c"
    assert chunk_path("/r", "a") != chunk_path("/r", "a/b")
    assert chunk_path("/r", "a b/%~") == "/r/a%20b/%25%7E~c"
    assert chunk_path("/r", "a~c") != chunk_path("/r", "a")
    assert chunk_path("/r", "ü").startswith("/r/%C3%BC")


@pytest.mark.parametrize(
    "name", ["../escape", "a/../../b", "/absolute", "a//b", "a/", ".", "x" * 300]
)
def test_names_that_could_escape_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        chunk_path("/r", name)


async def test_fsync_switch_is_honoured(tmp_path: Path) -> None:
    synced = FileSystemChunkStorage(root=tmp_path / "a")
    await synced.create("s/c")
    await synced.write("s/c", 0, b"x")
    assert synced.fsync_count >= 2
    unsynced = FileSystemChunkStorage(root=tmp_path / "b", fsync=False)
    await unsynced.create("s/c")
    await unsynced.write("s/c", 0, b"x")
    await unsynced.create_with_data("s/d", b"y")
    await unsynced.concat("s/c", ["s/d"])
    assert unsynced.fsync_count == 0


async def test_delete_removes_empty_directories_only(tmp_path: Path) -> None:
    storage = FileSystemChunkStorage(root=tmp_path, fsync=False)
    await storage.create("scope/stream/a")
    await storage.create("scope/other/b")
    await storage.delete("scope/stream/a")
    assert not (tmp_path / "scope" / "stream").exists()
    assert (tmp_path / "scope" / "other").is_dir()
    await storage.delete("scope/other/b")
    assert tmp_path.is_dir() and not any(tmp_path.iterdir())


async def test_concat_without_copy_file_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(*args: object) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    storage = FileSystemChunkStorage(root=tmp_path, fsync=False)
    await storage.create_with_data("t", b"t" * 10)
    await storage.create_with_data("s", b"s" * 20_000_000)
    assert await storage.concat("t", ["s"]) == 20_000_010
    assert await storage.read("t", 9, 3) == b"tss"


async def test_failed_write_leaves_chunk_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = FileSystemChunkStorage(root=tmp_path)
    await storage.create_with_data("c", b"abc")

    def fail(fd: int) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "fdatasync", fail)
    with pytest.raises(Exception, match="injected"):
        await storage.write("c", 3, b"def")
    monkeypatch.undo()
    assert await storage.length("c") == 3


async def test_large_writes_are_synced_piece_by_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write over ``sync_piece_bytes`` is fdatasync'ed after each piece is written (so a
    tier-1 sync on the same disk never waits behind a whole large flush), for appends, new
    chunks and ``write_many``; the bytes land as one write's would."""
    from tiers.base import ChunkWrite

    storage = FileSystemChunkStorage(root=tmp_path / "a", sync_piece_bytes=4)
    written: list[int] = []  # file size at each fdatasync
    real_fdatasync = os.fdatasync

    def spy(fd: int) -> None:
        written.append(os.fstat(fd).st_size)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    await storage.create_with_data("s/c", b"0123456789")  # pieces 4, 4, 2
    assert written == [4, 8, 10]
    written.clear()
    assert await storage.write("s/c", 10, b"abcdef") == 16  # pieces 4, 2
    assert written == [14, 16]
    written.clear()
    outcomes = await storage.write_many([ChunkWrite("s/c", 16, b"ABCDEFGHI")])
    assert outcomes == [None] and sorted(written) == [20, 24, 25]
    assert await storage.read("s/c", 0, 25) == b"0123456789abcdefABCDEFGHI"
    written.clear()
    whole = FileSystemChunkStorage(root=tmp_path / "b", sync_piece_bytes=0)
    await whole.create_with_data("s/c", b"0123456789")
    assert written == [10]


def test_bad_sync_piece_option_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sync_piece_bytes"):
        FileSystemChunkStorage(root=tmp_path, sync_piece_bytes=-1)


async def test_direct_writes_leave_the_chunks_buffered_writes_would(tmp_path: Path) -> None:
    """Appends of sizes around the block, direct and buffered, through ``write``,
    ``create_with_data`` and ``write_many``: the same files, each exactly as long as its
    chunk (the zeros a direct write leaves past the end are cut off), the same bytes read."""
    from tiers.base import ChunkWrite

    sizes = [1, 4095, 4096, 4097, 70_000, 3, 5 << 20, 9]
    pieces = [bytes([65 + i % 26]) * size for i, size in enumerate(sizes)]
    files: dict[bool, bytes] = {}
    for direct in (True, False):
        storage = FileSystemChunkStorage(root=tmp_path / str(direct), direct_io=direct)
        await storage.create_with_data("s/c", pieces[0])
        if direct and not storage.direct_io:
            pytest.skip("this file system refuses O_DIRECT")
        assert storage.direct_io == direct
        length = len(pieces[0])
        for piece in pieces[1:4]:
            length = await storage.write("s/c", length, piece)
        outcomes = await storage.write_many(
            [ChunkWrite("s/c", length, b"".join(pieces[4:])), ChunkWrite("s/d", 0, pieces[5], True)]
        )
        assert outcomes == [None, None]
        assert await storage.length("s/c") == sum(sizes)
        assert await storage.read("s/c", 0, sum(sizes)) == b"".join(pieces)
        assert storage.direct_io == direct  # nothing refused on the way
        files[direct] = Path(chunk_path(str(tmp_path / str(direct)), "s/c")).read_bytes()
    assert files[True] == files[False]


def test_bad_direct_io_option_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="option 'direct_io' must be true or false, not 1"):
        FileSystemChunkStorage(root=tmp_path, direct_io=1)  # type: ignore[arg-type]


async def test_direct_reads_give_what_buffered_reads_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads at offsets and of lengths around the block and the aligned buffer (4 MiB), up
    to the end, direct and buffered: the same bytes; the direct ones went direct."""
    from tiers import direct_io

    data = os.urandom(9 << 20)
    direct = FileSystemChunkStorage(root=tmp_path, direct_io=True)
    buffered = FileSystemChunkStorage(root=tmp_path, direct_io=False)
    await direct.create_with_data("s/c", data)
    if not direct.direct_io:
        pytest.skip("this file system refuses O_DIRECT")
    scratch = direct_io.SCRATCH_BYTES
    cases = [(0, 1), (1, 4095), (4095, 2), (4096, 4096), (100, 5 << 20), (3, len(data) - 3),
             (scratch - 1, scratch + 2), (len(data) - 5, 5)]  # fmt: skip
    real_preadv, direct_reads = os.preadv, []

    def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        direct_reads.append(offset)
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    for offset, length in cases:
        want = data[offset : offset + length]
        assert await buffered.read("s/c", offset, length) == want, (offset, length)
        assert not direct_reads
        assert await direct.read("s/c", offset, length) == want, (offset, length)
        assert direct_reads and all(at % direct_io.BLOCK == 0 for at in direct_reads)
        direct_reads.clear()
    assert direct.direct_io  # nothing refused on the way


async def test_a_refused_direct_read_is_read_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = FileSystemChunkStorage(root=tmp_path, direct_io=True)
    await storage.create_with_data("c", b"0123456789" * 1000)
    if not storage.direct_io:
        pytest.skip("this file system refuses O_DIRECT")

    def refuse(fd: int, buffers: list[memoryview], offset: int) -> int:
        raise OSError(errno.EINVAL, "injected: bad alignment")

    monkeypatch.setattr(os, "preadv", refuse)
    assert await storage.read("c", 5, 20) == b"56789012345678901234"
    assert not storage.direct_io  # from now on buffered, reads and writes
