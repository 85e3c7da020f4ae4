"""The two storage-tier contracts: tier-1 ``DurableDataLog`` and tier-2 ``ChunkStorage``.

Responsibility: define what the segment store engine may assume of a storage backend, and own
everything every backend needs alike (argument validation, the group-commit queue of tier-1,
running blocking primitives off the event loop, state checks). A backend subclasses one base and
fills in a few small synchronous primitives (the ``_do_*`` methods); the engine only ever calls
the public async methods. Backends declare capabilities as class flags and core code branches on
those flags, never on backend classes.

Contract of ``DurableDataLog`` (tier-1, the container's write-ahead log):

* ``open(epoch)`` takes the log over for ``epoch`` and fences every instance that opened it with a
  lower epoch: from then on their ``append`` and ``truncate`` raise ``DataLogFencedError`` and
  nothing they write afterwards is ever returned by ``read_all``. Opening with an epoch not higher
  than the log's current one raises ``DataLogFencedError``.
* ``append(frame)`` returns once the frame is durable (for durable backends) and returns its
  ``LogAddress``. A frame is one buffer or ``FrameParts`` (buffers whose bytes, in order, are
  the frame; none is changed while the append runs): a backend whose ``accepts_frame_parts``
  is set gets them as they are, any other the parts joined into one buffer. Appends issued
  concurrently complete in the order they were issued and get increasing addresses. The base
  batches frames queued while a write is in progress into one ``_do_append_batch`` call
  (group commit: one fsync for many frames).
* Failures are sticky: once an append fails, that append, every append queued behind it and every
  later ``append``, ``read_all`` and ``truncate`` of the instance raise (the same error type) until
  it is opened again with a higher epoch. A frame written after a lost one would leave a gap
  recovery cannot replay, so an acknowledged frame never follows a lost one.
  A frame whose ``append`` raised is not acknowledged; the instance never returns it, and the
  backend keeps it from later owners where it can, but after a fence or a crash a new owner may
  still find it (like a BookKeeper recovery read), so the engine treats it as "outcome unknown"
  (idempotent writers make retries of such appends harmless).
* ``read_all()`` yields ``(address, frame)`` for every frame appended and not truncated, in order.
* ``truncate(upto)`` drops every frame whose address is ``<= upto``.

Contract of ``ChunkStorage`` (tier-2, long-term storage of segment data in chunks):

* A chunk is a named byte sequence. ``create`` makes an empty one (``ChunkExistsError`` if it
  exists); ``write(name, offset, data)`` appends at ``offset``, which must equal the chunk's
  current length (``BadChunkOffsetError`` otherwise); backends without native append
  (``supports_append = False``) only accept one write, at offset 0, into a new chunk, through
  ``create_with_data``. ``write_many`` applies several such creates and appends, each to a
  different chunk, in one call (each item durable on return, its own outcome reported;
  backends may share one sync among them, or run ``write_many_concurrency`` at a time).
  ``read`` returns exactly the requested bytes or raises; ``delete`` removes a chunk;
  ``concat`` (only when ``supports_concat``) appends whole chunks to a target chunk.
* Segment-level logic (which chunks make a segment, truncation, relinking on merge, fencing)
  lives in the engine, not here.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, ClassVar, TypeVar, TypeVarTuple, Unpack

from millrace.kernel import defaults

__all__ = [
    "BadChunkOffsetError",
    "ChunkExistsError",
    "ChunkInfo",
    "ChunkNotFoundError",
    "ChunkStorage",
    "ChunkWrite",
    "DataLogClosedError",
    "DataLogCorruptionError",
    "DataLogError",
    "DataLogFencedError",
    "DataLogFullError",
    "DurableDataLog",
    "Frame",
    "FrameParts",
    "Gathered",
    "LogAddress",
    "StorageError",
    "TierError",
    "frame_bytes",
    "frame_size",
]


#: A frame given as the buffers that are its bytes in order (``DurableDataLog.append``).
FrameParts = list[bytes | memoryview]
#: What ``DurableDataLog.append`` takes, and what ``_do_append_batch`` gets of it.
Frame = bytes | memoryview | FrameParts

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class TierError(Exception):
    """Base of every error a storage tier raises."""


class DataLogError(TierError):
    """A tier-1 operation failed; the frame it carried is not durable."""


class DataLogFencedError(DataLogError):
    """This log instance was fenced by an instance that opened the log with a higher epoch."""


class DataLogClosedError(DataLogError):
    """The log is not open."""


class DataLogFullError(DataLogError):
    """The frame is larger than ``frame_bytes_max``."""


class DataLogCorruptionError(DataLogError):
    """Stored bytes fail their checksum; the message names the place (file and offset)."""


class StorageError(TierError):
    """A tier-2 operation failed."""


class ChunkNotFoundError(StorageError):
    """The chunk does not exist."""


class ChunkExistsError(StorageError):
    """The chunk already exists."""


class BadChunkOffsetError(StorageError):
    """A write did not start at the chunk's current length, or a read went past its end."""


@dataclasses.dataclass(frozen=True, order=True, slots=True)
class LogAddress:
    """Position of one frame in a durable data log.

    ``sequence`` orders frames across the whole log and is all the engine compares; ``ledger``
    and ``offset`` locate the frame for the backend that wrote it.
    """

    sequence: int
    ledger: int = 0
    offset: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkInfo:
    """What tier-2 knows of one chunk."""

    name: str
    length: int


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkWrite:
    """One item of ``ChunkStorage.write_many``: create chunk ``name`` holding ``data``
    (``create``), or append ``data`` at ``offset`` (= the chunk's length)."""

    name: str
    offset: int
    data: bytes | memoryview
    create: bool = False


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 1024 or "\x00" in name:
        raise ValueError(f"invalid chunk name {name!r}")


#: The suffix ``chunk_file_parts`` gives a chunk's file, so that chunk ``a`` (a file) and chunk
#: ``a/b`` (a file in directory ``a``) can both exist.
CHUNK_FILE_SUFFIX = "~c"


def chunk_file_parts(name: str, safe: frozenset[str], component_bytes_max: int) -> list[str]:
    """For backends that keep chunks as files in a directory tree: the path components of
    chunk ``name`` (split at ``/``), each character outside ``safe`` percent-encoded, the last
    with ``CHUNK_FILE_SUFFIX``. ValueError for an empty, ``.`` or ``..`` component, or one
    longer than ``component_bytes_max`` once encoded."""
    parts = []
    for component in name.split("/"):
        if component in ("", ".", ".."):
            raise ValueError(f"chunk name {name!r} has an empty, '.' or '..' path component")
        encoded = "".join(
            ch if ch in safe else "".join(f"%{b:02X}" for b in ch.encode()) for ch in component
        )
        if len(encoded) > component_bytes_max:
            raise ValueError(f"chunk name {name!r} has a path component too long for a file name")
        parts.append(encoded)
    parts[-1] += CHUNK_FILE_SUFFIX
    return parts


def frame_size(frame: Frame) -> int:
    """A frame's length in bytes (of its parts, if given in parts)."""
    if isinstance(frame, list):
        return sum(len(part) for part in frame)
    return len(frame)


def frame_bytes(frame: Frame) -> bytes | memoryview:
    """A frame as one buffer (its parts joined, if given in parts)."""
    return b"".join(frame) if isinstance(frame, list) else frame


class Gathered:
    """Buffers added in order, given back (``parts``) with each run of ones shorter than
    ``big`` joined into one and each of ``big`` bytes or more as it is, not copied: what a
    frame in parts and a batch of tier-1 records are made of."""

    __slots__ = ("_run", "big", "parts")

    def __init__(self, big: int) -> None:
        self.big = big
        self.parts: FrameParts = []
        self._run: list[bytes | bytearray | memoryview] = []

    def add(self, piece: bytes | bytearray | memoryview) -> None:
        if len(piece) < self.big:
            self._run.append(piece)
            return
        if self._run:
            self.parts.append(b"".join(self._run))
            self._run.clear()
        self.parts.append(piece)  # type: ignore[arg-type]  # (a big piece is never a bytearray)

    def done(self) -> FrameParts:
        """The parts, the last run joined."""
        if self._run:
            self.parts.append(b"".join(self._run))
            self._run.clear()
        return self.parts


class DurableDataLog(abc.ABC):
    """Tier-1: an ordered, durable, fenced, truncatable log of frames (see the module doc)."""

    #: The name the plugin registry knows this backend by.
    name: ClassVar[str] = ""
    #: Frames survive a crash of the process (and of the machine, for fsyncing backends).
    is_durable: ClassVar[bool] = True
    #: ``open(epoch)`` fences older instances, including ones in other processes.
    supports_fencing: ClassVar[bool] = True
    #: The primitives block (disk or network I/O) and run in a worker thread.
    blocking: ClassVar[bool] = False
    #: ``_do_append_batch`` takes a frame given as ``FrameParts`` as it is (else joined).
    accepts_frame_parts: ClassVar[bool] = False
    #: ``append_now`` may write on the caller's thread: the write is local and short (a
    #: file and its fdatasync), shorter than a hand-over to a worker thread and back.
    appends_inline: ClassVar[bool] = False

    @classmethod
    def default_options(cls, data_dir: str, log_id: str) -> dict[str, Any]:
        """Options the composition root gives the log ``log_id`` (one per container, e.g.
        ``container-0``) of a node whose local state is under ``data_dir``, unless the user's
        tier options set them: where a local backend keeps its files, which log to open."""
        return {}

    def __init__(
        self, *, frame_bytes_max: int = defaults.FRAME_BYTES_MAX, batch_frames_max: int = 256
    ):
        self.frame_bytes_max = frame_bytes_max
        self.batch_frames_max = batch_frames_max
        self._epoch: int | None = None
        self._pending: list[tuple[Frame, asyncio.Future[LogAddress]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._failure: DataLogError | None = None
        self._closing = False

    # -- public API (the engine calls only these) ---------------------------------------------

    @property
    def epoch(self) -> int | None:
        """The epoch this instance opened the log with, or None when closed."""
        return self._epoch

    async def current_epoch(self) -> int:
        """The highest epoch any instance opened this log with (0 if never opened).

        A container starts by opening the log with ``current_epoch() + 1``; if another instance
        won that epoch first, ``open`` raises ``DataLogFencedError``.
        """
        result: int = await self._call(self._do_current_epoch)
        return result

    async def open(self, epoch: int) -> None:
        if epoch < 0:
            raise ValueError("epoch must be >= 0")
        await self._call(self._do_open, epoch)
        self._epoch = epoch
        self._failure = None
        self._closing = False

    async def append(self, frame: Frame) -> LogAddress:
        frame = self._checked(frame)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[LogAddress] = loop.create_future()
        self._pending.append((frame, future))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_pending())
        return await future

    def append_now(self, frame: Frame) -> LogAddress | None:
        """Append ``frame`` on the caller's thread, durable on return, where the backend
        ``appends_inline`` and no other append is under way; else ``None`` (call ``append``).
        It blocks the caller for one write and its sync: for a lone frame, which nothing
        would share that write with. A failure is as in ``append``: raised, and sticky."""
        if not self.appends_inline or self._pending:
            return None
        if self._writer is not None and not self._writer.done():
            return None
        frame = self._checked(frame)
        try:
            addresses = self._append_inline([frame])
        except Exception as error:
            self._failure = _as_log_error(error)
            raise _fresh(self._failure) from error
        return None if addresses is None else addresses[0]

    def _append_inline(self, frames: Sequence[Frame]) -> list[LogAddress] | None:
        """``append_now``'s write: ``_do_append_batch``, or None to decline after all."""
        return self._do_append_batch(frames)

    def _checked(self, frame: Frame) -> Frame:
        """``frame`` as ``_do_append_batch`` takes it, once the log is open and its size
        allowed."""
        self._check_open()
        if isinstance(frame, list):
            if not self.accepts_frame_parts:
                frame = b"".join(frame)
            elif len(frame) == 1:
                frame = frame[0]
        if isinstance(frame, memoryview) and (frame.ndim != 1 or frame.itemsize != 1):
            frame = frame.cast("B")  # len() must count bytes, not items
        size = frame_size(frame)
        if size == 0:
            raise ValueError("empty frame")
        if size > self.frame_bytes_max:
            raise DataLogFullError(f"frame of {size} bytes > {self.frame_bytes_max}")
        return frame

    async def read_all(self) -> AsyncIterator[tuple[LogAddress, bytes]]:
        self._check_open()
        batch: list[tuple[LogAddress, bytes]]
        cursor: object = None
        while True:
            batch, cursor = await self._call(self._do_read_batch, cursor)
            for item in batch:
                yield item
            if cursor is None:
                return

    async def truncate(self, upto: LogAddress) -> None:
        self._check_open()
        await self._call(self._do_truncate, upto)

    async def check_fenced(self) -> None:
        """Raise ``DataLogFencedError`` if a higher epoch took the log over.

        Cheap (no write); the segment store asks before it changes tier-2, so a fenced instance
        stops touching tier-2 as soon as it could know, not only at its next tier-1 write.
        """
        self._check_open()
        await self._call(self._do_check_fenced)

    async def close(self) -> None:
        self._closing = True  # no new appends: the writer must be idle when _do_close runs
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._epoch is not None:
            await self._call(self._do_close)
        self._epoch = None

    # -- group commit --------------------------------------------------------------------------

    async def _write_pending(self) -> None:
        while self._pending:
            batch = self._pending[: self.batch_frames_max]
            del self._pending[: len(batch)]
            try:
                if self._failure is not None:
                    raise self._failure
                addresses = await self._call(self._do_append_batch, [f for f, _ in batch])
                if len(addresses) != len(batch):
                    raise DataLogError(f"backend returned {len(addresses)} addresses")
            except asyncio.CancelledError:
                # The primitive may still be running in its thread: never start another one.
                self._failure = DataLogError("tier-1 writer cancelled; reopen the log")
                self._fail_all(batch, self._failure)
                raise
            except Exception as error:  # handed to every waiting caller
                # Sticky: a frame written after a lost one would leave a gap in the log that
                # recovery cannot replay, so this instance appends nothing more until reopened.
                self._failure = _as_log_error(error)
                self._fail_all(batch, self._failure)
                continue
            for (_, future), address in zip(batch, addresses, strict=True):
                if not future.done():
                    future.set_result(address)

    def _fail_all(
        self, batch: list[tuple[Frame, asyncio.Future[LogAddress]]], error: Exception
    ) -> None:
        """Fail ``batch`` and all queued behind it: no later frame may overtake a lost one."""
        batch = batch + self._pending
        self._pending = []
        for _, future in batch:
            if not future.done():
                future.set_exception(_fresh(error))

    # -- helpers ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._epoch is None or self._closing:
            raise DataLogClosedError(f"{type(self).__name__} is not open")
        if self._failure is not None:
            raise _fresh(self._failure)

    async def _call(self, fn: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> _T:
        """Run one primitive: in a worker thread when ``blocking``, else inline."""
        if self.blocking:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    # -- primitives a backend fills in ---------------------------------------------------------

    @abc.abstractmethod
    def _do_open(self, epoch: int) -> None:
        """Take the log over for ``epoch``; fence lower epochs; raise if ``epoch`` is not higher."""

    def _do_check_fenced(self) -> None:  # noqa: B027 - optional: not every backend can tell
        """Raise DataLogFencedError if fenced; default: cannot tell without writing."""

    def _do_current_epoch(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not report its epoch")

    @abc.abstractmethod
    def _do_append_batch(self, frames: Sequence[Frame]) -> list[LogAddress]:
        """Write the frames in order, make them durable together, return their addresses.
        A frame is ``FrameParts`` only where the backend ``accepts_frame_parts``.

        Must raise ``DataLogFencedError`` (and make nothing visible) if a higher epoch took over.
        """

    @abc.abstractmethod
    def _do_read_batch(self, cursor: object) -> tuple[list[tuple[LogAddress, bytes]], object]:
        """Return the next frames after ``cursor`` (None = from the start) and the next cursor.

        The cursor returned is None when there is nothing more to read.
        """

    @abc.abstractmethod
    def _do_truncate(self, upto: LogAddress) -> None:
        """Drop every frame with an address ``<= upto``."""

    def _do_close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; default: nothing."""


def _as_log_error(error: BaseException) -> DataLogError:
    if isinstance(error, DataLogError):
        return error
    return DataLogError(f"tier-1 write failed: {error!r}")


def _fresh(error: Exception) -> Exception:
    """A new exception like ``error`` (re-raising one shared instance grows its traceback)."""
    try:
        copy = type(error)(*error.args)
    except Exception:  # an exotic constructor: fall back to the instance
        return error
    copy.__cause__ = error
    return copy


class ChunkStorage(abc.ABC):
    """Tier-2: named, append-only chunks of bytes (see the module doc)."""

    name: ClassVar[str] = ""
    #: ``write`` can append to an existing chunk (otherwise every flush makes a new chunk).
    supports_append: ClassVar[bool] = True
    #: ``concat`` joins chunks natively, without copying them through this process.
    supports_concat: ClassVar[bool] = False
    #: Chunks survive a crash of this process.
    is_durable: ClassVar[bool] = True
    #: The primitives block (disk or network I/O) and run in a worker thread.
    blocking: ClassVar[bool] = False
    #: ``_do_append_batch`` takes a frame given as ``FrameParts`` as it is (else joined).
    accepts_frame_parts: ClassVar[bool] = False
    #: How many items of one ``write_many`` (each a different chunk) the default
    #: ``write_many`` runs at a time: more than one for a store reached over the network,
    #: where each write mostly waits for its answer.
    write_many_concurrency: ClassVar[int] = 1
    #: The segment store keeps what it reads from this tier in its cache, for the next reader.
    #: False where re-reading is cheap without it (local files: the page cache or the disk).
    cache_reads: ClassVar[bool] = True

    @classmethod
    def default_options(cls, data_dir: str) -> dict[str, Any]:
        """Options the composition root gives this backend on a node whose local state is under
        ``data_dir``, unless the user's tier options set them."""
        return {}

    # -- public API ----------------------------------------------------------------------------

    async def create(self, name: str) -> None:
        _check_name(name)
        await self._call(self._do_create, name)

    async def create_with_data(self, name: str, data: bytes | memoryview) -> None:
        """Create a chunk holding ``data`` (the one write non-appending backends support)."""
        _check_name(name)
        await self._call(self._do_create_with_data, name, data)

    async def write(self, name: str, offset: int, data: bytes | memoryview) -> int:
        """Append ``data`` at ``offset`` (= the chunk's length); return the new length."""
        _check_name(name)
        if not self.supports_append:
            raise StorageError(f"{type(self).__name__} cannot append; use create_with_data")
        if offset < 0:
            raise BadChunkOffsetError(f"negative offset {offset}")
        if len(data) == 0:
            length = await self.length(name)  # still validate existence and offset
            if length != offset:
                raise BadChunkOffsetError(f"chunk {name!r} has length {length}, not {offset}")
            return offset
        await self._call(self._do_write, name, offset, data)
        return offset + len(data)

    async def write_many(self, writes: Sequence[ChunkWrite]) -> list[StorageError | None]:
        """Apply several creates-with-data and appends; each item succeeds or fails on its own
        (the errors of ``create_with_data`` and ``write``): returns ``None`` or the error, per
        item. Default: ``write_many_concurrency`` items at a time; a backend may override it to
        share one sync among them."""
        room = asyncio.Semaphore(self.write_many_concurrency)

        async def one(item: ChunkWrite) -> StorageError | None:
            async with room:
                try:
                    if item.create:
                        await self.create_with_data(item.name, item.data)
                    else:
                        await self.write(item.name, item.offset, item.data)
                except StorageError as error:
                    return error
                return None

        return list(await asyncio.gather(*(one(item) for item in writes)))

    async def read(self, name: str, offset: int, length: int) -> bytes:
        _check_name(name)
        if offset < 0 or length < 0:
            raise BadChunkOffsetError(f"bad read range offset={offset} length={length}")
        if length == 0:
            return b""
        data: bytes = await self._call(self._do_read, name, offset, length)
        if len(data) != length:
            raise BadChunkOffsetError(
                f"chunk {name!r}: read {len(data)} of {length} bytes at offset {offset}"
            )
        return data

    async def delete(self, name: str) -> None:
        _check_name(name)
        await self._call(self._do_delete, name)

    async def exists(self, name: str) -> bool:
        _check_name(name)
        result: bool = await self._call(self._do_exists, name)
        return result

    async def length(self, name: str) -> int:
        _check_name(name)
        result: int = await self._call(self._do_length, name)
        return result

    async def concat(self, target: str, sources: Iterable[str]) -> int:
        """Append the whole of each source chunk to ``target``; return the new length."""
        if not self.supports_concat:
            raise StorageError(f"{type(self).__name__} has no native concat")
        names = list(sources)
        for n in [target, *names]:
            _check_name(n)
        if target in names:
            raise ValueError(f"cannot concat chunk {target!r} into itself")
        result: int = await self._call(self._do_concat, target, names)
        return result

    async def close(self) -> None:
        await self._call(self._do_close)

    # -- helpers ------------------------------------------------------------------------------

    async def _call(self, fn: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> _T:
        """Run one primitive: in a worker thread when ``blocking``, else inline."""
        if self.blocking:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    # -- primitives ----------------------------------------------------------------------------

    @abc.abstractmethod
    def _do_create(self, name: str) -> None: ...

    def _do_create_with_data(self, name: str, data: bytes | memoryview) -> None:
        self._do_create(name)
        if len(data):
            self._do_write(name, 0, data)

    @abc.abstractmethod
    def _do_write(self, name: str, offset: int, data: bytes | memoryview) -> None: ...

    @abc.abstractmethod
    def _do_read(self, name: str, offset: int, length: int) -> bytes: ...

    @abc.abstractmethod
    def _do_delete(self, name: str) -> None: ...

    @abc.abstractmethod
    def _do_exists(self, name: str) -> bool: ...

    @abc.abstractmethod
    def _do_length(self, name: str) -> int: ...

    def _do_concat(self, target: str, sources: list[str]) -> int:
        raise StorageError(f"{type(self).__name__} has no native concat")

    def _do_close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; default: nothing."""
