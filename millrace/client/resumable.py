"""One idempotent writer's appends to one segment, held until acknowledged and resumed wherever
the segment is served after its node fails.

Responsibility: ``ResumableAppends`` is what transactions (one per shadow segment) and byte
streams write through. ``append`` numbers and sends a block (``append_block``) and keeps its
pieces until the segment store acknowledges them; ``conditional`` sends one conditional append
and waits for it. When the node is lost, silent or answers WrongHost (its container moved, as a
transaction's shadow segments move with their parent's container), ``flush`` and
``conditional`` ask where the segment is served now (``locate``), set the same writer up there
(which tells the last event number persisted), drop what is persisted and send the rest again
under the same numbers, with a growing pause, until the delivery timeout: nothing is lost and
nothing is stored twice, as the event writer does. A conditional append whose answer was lost
is persisted if its number is; else it is sent again, still conditional on the same offset.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Sequence

from millrace.client.retry import RETRY_PAUSE_MAX_S, RETRY_PAUSE_S, transient, with_retries
from millrace.client.transport import segment_store as ssc
from millrace.kernel import defaults

__all__ = ["ResumableAppends"]


Piece = bytes | bytearray | memoryview


@dataclasses.dataclass(slots=True)
class _Block:
    """Pieces numbered ``first`` on (one number each), not yet acknowledged."""

    first: int
    pieces: Sequence[Piece]
    raw: bool
    #: The acknowledgement of its last send (``None``: not sent since the last failure).
    ack: asyncio.Future[ssc.AppendAck] | None = None

    @property
    def last(self) -> int:
        return self.first + len(self.pieces) - 1


class ResumableAppends:
    """Appends of ``writer_id`` to ``segment`` (see the module's docstring)."""

    def __init__(
        self,
        segment: str,
        locate: Callable[[], Awaitable[ssc.SegmentStoreClient]],
        forget: Callable[[], None],
        *,
        writer_id: uuid.UUID | None = None,
        delivery_timeout_s: float = defaults.DELIVERY_TIMEOUT_SECONDS,
    ) -> None:
        self.segment = segment
        #: The connection to the node serving the segment now, and how to forget that node
        #: (the next ``locate`` asks the controller again).
        self._locate, self._forget = locate, forget
        self.writer_id = writer_id or uuid.uuid4()
        self.delivery_timeout_s = delivery_timeout_s
        self._client: ssc.SegmentStoreClient | None = None
        self._next = 1
        self._blocks: collections.deque[_Block] = collections.deque()
        #: Times the appends were set up again after a failure.
        self.resumes = 0

    async def start(self) -> None:
        """Set the writer up (once; later failures are resumed by ``flush``)."""
        if self._client is None:
            await with_retries(self._set_up, timeout_s=self.delivery_timeout_s)

    async def append(self, pieces: Sequence[Piece], *, raw: bool = False) -> None:
        """Send ``pieces`` (events, or raw bytes with ``raw``); durable once ``flush`` returns."""
        if not pieces:
            return
        await self.start()
        block = _Block(self._next, pieces, raw)
        self._next += len(pieces)
        self._blocks.append(block)
        await self._send(block)

    async def conditional(self, data: bytes, expected_offset: int) -> ssc.AppendAck | None:
        """Append ``data`` as raw bytes only if the segment's length is ``expected_offset``;
        returns once it is durable (``BadOffsetError`` if the length differs; ``None`` when its
        answer was lost and the resumed writer found it persisted)."""
        await self.flush()  # (what came before is durable: the expected offset means it)
        number = self._next
        self._next += 1
        tries = 0

        async def attempt() -> ssc.AppendAck | None:
            nonlocal tries
            tries += 1
            if tries > 1:  # (the last try failed: was it persisted before its answer was lost?)
                if await self._set_up() >= number:
                    return None
                self._next = number + 1  # (the new session numbers it ``number`` again)
            assert self._client is not None
            return await self._client.conditional_append(self.writer_id, data, expected_offset)

        return await with_retries(attempt, timeout_s=self.delivery_timeout_s)

    async def flush(self) -> None:
        """Until every append is acknowledged, resuming after failures (see the module)."""
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + self.delivery_timeout_s, RETRY_PAUSE_S
        while self._blocks or self._client is None:
            if self._client is None and not self._blocks:
                return
            try:
                await self._wait_acks()
                return
            except Exception as exc:
                if not transient(exc):
                    raise
                if loop.time() + pause > deadline:
                    raise ssc.DeliveryTimeoutError(
                        f"appends to {self.segment} not acknowledged within the delivery"
                        f" timeout of {self.delivery_timeout_s:g} s; last: {exc}"
                    ) from exc
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_PAUSE_MAX_S)
            with _suppress_transient():
                await self._set_up()

    async def _wait_acks(self) -> None:
        if self._client is None or any(block.ack is None for block in self._blocks):
            raise ssc.ConnectionLostError(f"appends to {self.segment} wait to be resumed")
        await self._client.flush(self.writer_id)
        while self._blocks:
            ack = self._blocks[0].ack
            assert ack is not None
            await asyncio.shield(ack)
            if self._blocks and self._blocks[0].ack is ack:
                self._blocks.popleft()

    async def _set_up(self) -> int:
        """(Again) where the segment is served now; drop what is persisted, send the rest."""
        if self._client is not None:
            self._forget()
        self._client = None
        try:
            client = await self._locate()
            last = await client.setup_append(self.segment, self.writer_id)
        except Exception:
            self._forget()  # (WrongHost, say: the next try asks the controller where it is now)
            raise
        self._client = client
        if self._blocks or self._next > 1:
            self.resumes += 1
        kept: collections.deque[_Block] = collections.deque()
        for block in self._blocks:
            if block.last <= last:
                continue
            if block.first <= last:  # (the rest of a block cut short)
                block.pieces = block.pieces[last - block.first + 1 :]
                block.first = last + 1
            block.ack = None
            kept.append(block)
        self._blocks = kept
        self._next = (kept[-1].last + 1) if kept else max(last, 0) + 1
        for block in kept:
            await self._send(block)
        return last

    async def _send(self, block: _Block) -> None:
        client = self._client
        if client is None:
            return  # (``flush`` resumes it)
        try:
            block.ack = await client.append_block(self.writer_id, block.pieces, raw=block.raw)
        except Exception as exc:
            if not transient(exc):
                raise
            self._forget()
            self._client = None  # (``flush`` resumes)
            return
        block.ack.add_done_callback(_retrieved)


class _suppress_transient:
    """Swallow a transient failure (the next round tries again)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        return exc is not None and isinstance(exc, Exception) and transient(exc)


def _retrieved(future: asyncio.Future[ssc.AppendAck]) -> None:
    """(A failed acknowledgement is looked at by ``flush``; never "never retrieved".)"""
    if not future.cancelled():
        future.exception()
