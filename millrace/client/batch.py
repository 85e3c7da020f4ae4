"""Batch reads, as Pravega's ``BatchClient``: a stream between two cuts as independent segment
ranges that any number of workers (Spark executors) read in parallel, in any order.

``AsyncBatchClient.segment_ranges(scope, stream, start, end)`` plans: every segment between the
cuts, with the offsets to read it from and to (from the start cut, else from its start or the
head; to the end cut, else to its length when planned). ``read_range(r)`` reads one range's
events. A ``SegmentRange`` is plain data (it pickles), carrying where its segment is served and
a read-only delegation token, so a reader needs no controller call. Per routing key, events are
in the order written when sorted by (segment id, offset): a successor's id is always higher.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from millrace.client.controller import FOLLOW_SECONDS, AsyncControllerClient
from millrace.client.events import EventRead, EventSplitter
from millrace.client.streamcut import StreamCut
from millrace.client.transport import segment_store as ssc
from millrace.client.transport.pool import SegmentStorePool
from millrace.kernel import rest_paths as paths

#: Bytes asked of the segment store per read.
READ_BYTES = 1024 * 1024


@dataclass(frozen=True)
class SegmentRange:
    """One segment's events from ``start_offset`` to ``end_offset`` (bytes)."""

    scope: str
    stream: str
    segment_id: int
    name: str
    start_offset: int
    end_offset: int
    key_start: float
    key_end: float
    host: str
    port: int
    #: a read-only delegation token for the segment ('' with authentication off)
    token: str

    @property
    def size(self) -> int:
        return self.end_offset - self.start_offset


class RangeTruncatedError(Exception):
    """The range's start was truncated away; ``start_offset`` says where the segment starts
    now."""

    def __init__(self, segment: str, start_offset: int) -> None:
        super().__init__(f"{segment} was truncated up to offset {start_offset}")
        self.segment = segment
        self.start_offset = start_offset


class AsyncBatchClient:
    def __init__(self, controller: AsyncControllerClient) -> None:
        self.controller = controller
        self.pool = SegmentStorePool(ssl=controller.tls)

    async def close(self) -> None:
        await self.pool.close()

    async def segment_ranges(
        self, scope: str, stream: str, start: StreamCut | None = None, end: StreamCut | None = None
    ) -> list[SegmentRange]:
        """The ranges between ``start`` (default: the head) and ``end`` (default: the tail as
        of now), by segment id."""
        for cut in (start, end):
            if cut is not None and (cut.scope, cut.stream) != (scope, stream):
                raise ValueError(f"the stream cut is of {cut.scope}/{cut.stream}")
        body = {}
        if start is not None:
            body["fromStreamCut"] = {str(k): v for k, v in start.positions.items()}
        if end is not None:
            body["toStreamCut"] = {str(k): v for k, v in end.positions.items()}
        found = await self.controller.call("POST", paths.segments_between(scope, stream), body)
        head = await self.controller.call("GET", paths.segments(scope, stream, at="head"))
        head_offsets = {s["segmentId"]: s["offset"] for s in head["segments"]}
        token = await self.controller.delegation_token(scope, stream)
        ranges = []
        for item in sorted(found["segments"], key=lambda s: s["segmentId"]):
            sid = item["segmentId"]
            info = await self.controller.call("GET", paths.segment(scope, stream, sid))
            first = max(info["startOffset"], head_offsets.get(sid, 0))
            if start is not None and sid in start.positions:
                first = max(first, start.positions[sid])
            last = info["length"]
            if end is not None and sid in end.positions:
                last = min(last, end.positions[sid])
            host, port = await self.controller.segment_uri(scope, stream, sid)
            ranges.append(
                SegmentRange(
                    scope=scope, stream=stream, segment_id=sid, name=item["name"],
                    start_offset=first, end_offset=max(first, last), key_start=item["keyStart"],
                    key_end=item["keyEnd"], host=host, port=port, token=token,
                )
            )  # fmt: skip
        return ranges

    async def read_range(self, segment: SegmentRange) -> AsyncGenerator[list[EventRead], None]:
        """The range's events, a read's worth at a time."""
        splitter = EventSplitter(segment.start_offset, segment.name)
        async for offset, data in self.read_chunks(segment):
            events = splitter.feed(offset, data)
            if events:
                yield events

    async def read_chunks(self, segment: SegmentRange) -> AsyncGenerator[tuple[int, bytes], None]:
        """The range's bytes as read, ``(offset, data)`` (events may be cut at a chunk's
        ends); the next read is under way while the caller works on a chunk."""
        offset = segment.start_offset
        ahead: asyncio.Task[bytes] | None = None
        try:
            while offset < segment.end_offset:
                if ahead is None:
                    ahead = asyncio.ensure_future(self._read(segment, offset))
                data = await ahead
                ahead = None
                if not data:
                    break
                if offset + len(data) < segment.end_offset:
                    ahead = asyncio.ensure_future(self._read(segment, offset + len(data)))
                yield offset, data
                offset += len(data)
        finally:
            if ahead is not None:
                ahead.cancel()
                with contextlib.suppress(BaseException):
                    await ahead

    async def _read(self, segment: SegmentRange, offset: int) -> bytes:
        """One read of the range at ``offset``. While its node is away or answers WrongHost
        (its container moved or restarts), the node is looked up again and the read retried
        for up to ``FOLLOW_SECONDS``; then the error stands."""
        node = (segment.host, segment.port)
        delay, deadline = 0.1, asyncio.get_running_loop().time() + FOLLOW_SECONDS
        while True:
            try:
                client = await self.pool.get(*node)
                result = await client.read_segment(
                    segment.name, offset, min(READ_BYTES, segment.end_offset - offset),
                    token=segment.token,
                )  # fmt: skip
                break
            except ssc.SegmentTruncatedError as exc:
                info = await client.get_info(segment.name, token=segment.token)
                raise RangeTruncatedError(segment.name, info.start_offset) from exc
            except (ssc.ConnectionLostError, ssc.ContainerOfflineError, OSError):
                if asyncio.get_running_loop().time() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                with contextlib.suppress(Exception):  # (the controller away too: ask again later)
                    node = await self.controller.segment_node(segment.name)
        return bytes(result.data[: segment.end_offset - offset])
