"""Byte streams: a stream of one segment used as an append-only file of raw bytes.

    stream = await manager.create_byte_stream("demo", "log")
    await stream.write(b"hello ")              # appended at the tail
    await stream.write_conditional(b"world", expected_offset=6)   # only if the tail is 6
    await stream.flush()                       # durable
    await stream.seek(0)
    data = await stream.read(11)               # b"hello world"
    await stream.truncate(6)                   # drop the bytes before offset 6
    head, tail = await stream.current_head_offset(), await stream.current_tail_offset()

As in Pravega's byte stream (and its Python client's ``ByteStream``), the bytes are written
as they are, without event headers, to the stream's only segment; a byte stream is never
scaled. Writes are appends of an idempotent writer (acknowledged once durable; ``flush``
waits for all). ``read`` returns what is there from the current position (waiting up to
``timeout`` at the tail) and ``b""`` once the stream is sealed and read to its end. Reading
below the head raises ``ByteStreamTruncatedError`` naming the head. When the segment's node is
lost, goes silent or answers WrongHost (its container moved to another node of a cluster), the
writes follow it (``millrace.client.resumable``): what was not persisted is sent again to the
new node under the same event numbers, so nothing is lost or written twice, up to the delivery
timeout; a conditional write whose answer was lost is found persisted or sent again. A read
follows the segment to its new node by itself, for up to ``FOLLOW_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from millrace.client.controller import FOLLOW_SECONDS, AsyncControllerClient
from millrace.client.resumable import ResumableAppends
from millrace.client.transport import segment_store as ssc
from millrace.client.transport.pool import SegmentStorePool
from millrace.kernel import rest_paths as paths

#: Bytes asked per read of the segment store, at most.
READ_CHUNK_BYTES = 1024 * 1024
#: The pause between two tries of a read while the node is away.
RELOCATE_PAUSE_SECONDS = 0.2
#: The node is away, or does not serve the segment now (WrongHost).
_AWAY = (ssc.ConnectionLostError, ssc.ContainerOfflineError, OSError)


class ConditionalAppendFailedError(Exception):
    """``write_conditional``: the stream's tail was not at the expected offset."""


class ByteStreamTruncatedError(Exception):
    """The position lies before the head (truncated away); ``head`` is the first byte left."""

    def __init__(self, message: str, head: int) -> None:
        super().__init__(message)
        self.head = head


class AsyncByteStream:
    """Read, write, seek and truncate one single-segment stream (see the module docstring)."""

    def __init__(self, controller: AsyncControllerClient, scope: str, stream: str) -> None:
        self.controller, self.scope, self.stream = controller, scope, stream
        self._segment = ""
        self._node: tuple[str, int] = ("", 0)
        self._pool: SegmentStorePool | None = None
        self._writer_id = uuid.uuid4()
        #: The writes (made on the first one).
        self._writer: ResumableAppends | None = None
        self._position = 0

    @classmethod
    async def open(
        cls, controller: AsyncControllerClient, scope: str, stream: str
    ) -> AsyncByteStream:
        """The byte stream ``scope/stream``; it must have exactly one segment."""
        self = cls(controller, scope, stream)
        segments = await controller.call("GET", paths.segments(scope, stream))
        current = segments["segments"]
        if len(current) != 1:
            if not current:  # sealed: read its last segment
                head = await controller.call("GET", paths.segments(scope, stream, at="head"))
                current = head["segments"]
            if len(current) != 1:
                raise ValueError(
                    f"{scope}/{stream} has {len(current)} segments; a byte stream has one"
                )
        segment_id = current[0]["segmentId"]
        self._segment = current[0]["name"]
        self._node = await controller.segment_uri(scope, stream, segment_id)
        self._pool = await SegmentStorePool.for_stream(controller, scope, stream)
        return self

    async def _client(self) -> ssc.SegmentStoreClient:
        assert self._pool is not None, "use AsyncByteStream.open"
        if not self._node[0]:
            self._node = await self.controller.segment_node(self._segment)
        return await self._pool.get(*self._node)

    async def _relocate(self) -> None:
        """The node was lost or answered WrongHost (its container moved, or restarts): ask
        where the segment is served now."""
        self._forget_node()
        with contextlib.suppress(Exception):  # (the controller away too: the next failure asks)
            self._node = await self.controller.segment_node(self._segment)

    # -- offsets and position ------------------------------------------------------------------

    async def _info(self) -> ssc.SegmentInfo:
        return await (await self._client()).get_info(self._segment)

    async def current_head_offset(self) -> int:
        """The first byte still there (0 unless truncated)."""
        return (await self._info()).start_offset

    async def current_tail_offset(self) -> int:
        """The offset the next append lands at."""
        return (await self._info()).write_offset

    def tell(self) -> int:
        return self._position

    async def seek(self, offset: int, whence: int = 0) -> int:
        """Move the read position: ``whence`` 0 from the start of the stream, 1 from the
        current position, 2 from the tail. Returns the new position."""
        if whence == 1:
            offset += self._position
        elif whence == 2:
            offset += await self.current_tail_offset()
        elif whence != 0:
            raise ValueError("whence is 0 (start), 1 (current) or 2 (tail)")
        if offset < 0:
            raise ValueError("a position is at least 0")
        self._position = offset
        return offset

    # -- reading -------------------------------------------------------------------------------

    async def read(self, size: int = READ_CHUNK_BYTES, timeout: float | None = None) -> bytes:
        """Up to ``size`` bytes from the position (which moves past them). At the tail it waits
        for data (``TimeoutError`` after ``timeout`` s); ``b""`` at the end of a sealed
        stream."""
        if size <= 0:
            return b""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        away_until = loop.time() + FOLLOW_SECONDS
        while True:
            try:
                client = await self._client()
                got = await client.read_segment(
                    self._segment, self._position, min(size, READ_CHUNK_BYTES)
                )
            except _AWAY:
                if loop.time() > away_until:
                    raise
                await asyncio.sleep(RELOCATE_PAUSE_SECONDS)
                await self._relocate()
                continue
            except ssc.SegmentTruncatedError as exc:
                raise ByteStreamTruncatedError(
                    f"offset {self._position} of {self.scope}/{self.stream} was truncated;"
                    f" the head is {exc.start_offset}",
                    exc.start_offset,
                ) from None
            except ssc.SegmentSealedError:
                return b""
            if got.data:
                data = bytes(got.data[:size])  # a reply may carry more than asked
                self._position += len(data)
                return data
            if got.end_of_segment:
                return b""
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"no data at offset {self._position} within {timeout} s")

    # -- writing -------------------------------------------------------------------------------

    def _appends(self) -> ResumableAppends:
        if self._writer is None:
            self._writer = ResumableAppends(
                self._segment, self._client, self._forget_node, writer_id=self._writer_id
            )
        return self._writer

    def _forget_node(self) -> None:
        """The node failed or answered WrongHost: the next connection asks the controller
        where the segment is served now."""
        self._node = ("", 0)

    async def write(self, data: bytes) -> int:
        """Append ``data`` at the tail (durable once ``flush`` returns); its length."""
        await self._appends().append([bytes(data)], raw=True)
        return len(data)

    async def write_conditional(self, data: bytes, expected_offset: int) -> int:
        """Append ``data`` only if the tail is at ``expected_offset`` (several writers can
        coordinate through this); durable when it returns. The new tail offset."""
        try:
            await self._appends().conditional(bytes(data), expected_offset)
        except ssc.BadOffsetError:
            tail = await self.current_tail_offset()
            raise ConditionalAppendFailedError(
                f"the tail of {self.scope}/{self.stream} is at {tail}, not {expected_offset}"
            ) from None
        return expected_offset + len(data)

    async def flush(self) -> None:
        """Wait until every write so far is durable (following the segment to another node
        when its node fails meanwhile)."""
        if self._writer is not None:
            await self._writer.flush()

    async def truncate(self, offset: int) -> None:
        """Drop the bytes before ``offset`` (Pravega's ``truncateDataBefore``)."""
        await (await self._client()).truncate(self._segment, offset)

    async def seal(self) -> None:
        """No more writes; readers get ``b""`` at the end."""
        await self.flush()
        await self.controller.seal_stream(self.scope, self.stream)

    async def close(self) -> None:
        await self.flush()
        if self._pool is not None:
            await self._pool.close()
