"""Transactional writers: events written to a transaction appear in the stream all at once on
commit, or never (abort).

``AsyncTransactionalWriter.begin_txn()`` opens a transaction (the controller creates one shadow
segment per segment of the current epoch); ``Transaction.write_event(event, routing_key)``
routes by key to the shadow of the segment owning the key, appending as one idempotent writer
per shadow (``millrace.client.resumable``: a shadow whose node dies or goes silent is followed
to its container's new owner, as the event writer follows its segments); ``commit()`` waits
until every event is durable in the shadows, then asks the controller to commit and waits for
COMMITTED; ``abort()`` drops them. The controller merges the
shadows into their parents atomically, rolling the transaction forward if the stream scaled
meanwhile. ``ping()`` extends the lease (a transaction not pinged within it is aborted).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from millrace.client.controller import AsyncControllerClient
from millrace.client.errors import SegmentNotFoundError
from millrace.client.resumable import ResumableAppends
from millrace.client.routing import KeySpace, SegmentWithRange, key_point
from millrace.client.transport import segment_store as ssc
from millrace.client.transport.pool import SegmentStorePool
from millrace.kernel import defaults, traces
from millrace.kernel import rest_paths as paths

COMMIT_WAIT_SECONDS = 60.0
#: Transactions ``commit_txns`` commits per request (the controller's limit).
COMMIT_AT_ONCE = 1000


class TxnFailedError(RuntimeError):
    """A transaction can no longer be written to: its shadow segments are gone (Pravega's
    ``TxnFailedException``). ``state`` is what the controller says of it (ABORTING or
    ABORTED: its lease ran out or someone aborted it); begin another transaction."""

    def __init__(self, message: str, *, txn_id: uuid.UUID, state: str) -> None:
        super().__init__(message)
        self.txn_id, self.state = txn_id, state


class Transaction:
    def __init__(self, owner: AsyncTransactionalWriter, answer: dict[str, Any]) -> None:
        self.owner = owner
        self.txn_id = uuid.UUID(answer["txnId"])
        self._keyspace = KeySpace(
            [
                SegmentWithRange(s["parentId"], s["name"], s["keyStart"], s["keyEnd"])
                for s in answer["shadowSegments"]
            ]
        )
        self._writers: dict[str, ResumableAppends] = {}  # by shadow segment name
        self.state = str(answer["state"])

    async def write_event(self, event: bytes | str, routing_key: str | None = None) -> None:
        """Append ``event`` to the transaction (invisible until the commit)."""
        await self.write_events([(event, routing_key)])

    async def write_events(self, events: Sequence[tuple[bytes | str, str | None]]) -> None:
        """Append many ``(event, routing key)`` pairs: one block per shadow segment, each
        key's events in the order given."""
        datas: list[bytes] = []
        keys: list[str | None] = []
        for event, routing_key in events:
            datas.append(event.encode("utf-8") if isinstance(event, str) else bytes(event))
            keys.append(routing_key)
        await self.write_batch(datas, keys)

    async def write_batch(self, events: Sequence[bytes], keys: Sequence[str | None]) -> None:
        """Append ``events[i]`` under routing key ``keys[i]`` for every ``i``: one block per
        shadow segment, each key's events in the order given, each distinct key routed once."""
        self._check_open()
        if len(events) != len(keys):
            raise ValueError(f"{len(events)} events but {len(keys)} routing keys")
        segment_for = self._keyspace.segment_for
        groups: dict[str, tuple[Any, list[bytes]]] = {}
        routed: dict[str, list[bytes]] = {}  # key -> its shadow's list
        for data, routing_key in zip(events, keys, strict=True):  # (hot: a lookup per event)
            datas = routed.get(routing_key)  # type: ignore[arg-type]
            if datas is None:
                shadow = segment_for(key_point(routing_key))
                found = groups.get(shadow.name)
                if found is None:
                    found = groups[shadow.name] = (shadow, [])
                datas = found[1]
                if routing_key is not None:  # (no key: a random segment each time)
                    routed[routing_key] = datas
            datas.append(data)
        async with self._shadows_gone():
            await self._set_up([shadow for shadow, _ in groups.values()])
            for shadow, datas in groups.values():
                await self._append(shadow, datas)

    @property
    def shadow_ranges(self) -> list[tuple[float, float]]:
        """The key range of each shadow segment, in key order: the indexes of
        ``write_framed``."""
        return [(s.key_start, s.key_end) for s in self._keyspace.segments]

    async def write_framed(
        self, parts: Mapping[int, Sequence[bytes | bytearray | memoryview]]
    ) -> None:
        """Append events framed already (each buffer holds whole events, each with its
        8-byte header as ``millrace.client.events.EVENT_HEADER`` packs it) to the shadow
        segments by index in ``shadow_ranges``: for callers that frame whole columns at once.
        A read-only memoryview is sent from where it is, not copied: what is under it must
        stay unchanged until the transaction is flushed."""
        self._check_open()
        segments = self._keyspace.segments
        async with self._shadows_gone():
            await self._set_up([segments[index] for index, pieces in parts.items() if pieces])
            for index, pieces in parts.items():
                if pieces:
                    await self._append(segments[index], pieces, raw=True)

    def _check_open(self) -> None:
        if self.state != "OPEN":
            raise RuntimeError(f"transaction {self.txn_id} is {self.state}")

    async def _set_up(self, shadows: Sequence[SegmentWithRange]) -> None:
        """Open the append sessions of the shadows not written yet, side by side (each is a
        round trip to the controller for the node, then one to the node): a task writing to
        every segment of a stream waited for them one by one."""
        new = [s for s in shadows if s.name not in self._writers]
        if len(new) > 1:
            # The connections first (each start then finds its own at once, so the setups go
            # out together); one that fails now is tried again, with back-off, by its start.
            await self.owner.pool()
            await asyncio.gather(
                *(self.owner.client_for(s.segment_id) for s in new), return_exceptions=True
            )
            await asyncio.gather(*(self._writer_for(s).start() for s in new))

    def _writer_for(self, shadow: SegmentWithRange) -> ResumableAppends:
        """The shadow's idempotent writer: it follows the shadow when its container moves (a
        shadow lives in its parent's container)."""
        writer = self._writers.get(shadow.name)
        if writer is None:
            parent = shadow.segment_id
            writer = self._writers[shadow.name] = ResumableAppends(
                shadow.name, lambda: self.owner.client_for(parent),
                lambda: self.owner.forget(parent),
            )  # fmt: skip
        return writer

    async def _append(
        self,
        shadow: SegmentWithRange,
        datas: Sequence[bytes | bytearray | memoryview],
        raw: bool = False,
    ) -> None:
        await self._writer_for(shadow).append(datas, raw=raw)

    async def flush(self) -> None:
        """Wait until every event written to the transaction is durable in its shadows, where
        their container is served now (a node that died or went silent meanwhile: its
        containers' new owners have the shadows)."""
        async with self._shadows_gone():
            await asyncio.gather(*(writer.flush() for writer in self._writers.values()))

    @contextlib.asynccontextmanager
    async def _shadows_gone(self) -> AsyncIterator[None]:
        """A shadow segment the node no longer has (NoSuchSegment) means the transaction was
        aborted (its lease ran out, say): ``TxnFailedError`` with the state the controller
        gives; were it still open, the missing shadow is the error itself."""
        try:
            yield
        except SegmentNotFoundError as exc:
            state = await self.check_status()
            if state == "OPEN":
                raise
            raise TxnFailedError(
                f"transaction {self.txn_id} is {state}: its shadow segment {exc.segment} is"
                " gone (a transaction not pinged within its lease is aborted); begin another",
                txn_id=self.txn_id,
                state=state,
            ) from exc

    async def commit(self, timestamp: int | None = None, *, wait: bool = True) -> None:
        """Commit; with ``wait`` (the default) return once COMMITTED, else once COMMITTING
        (commits asked for together are carried out together; ``commit()`` again waits)."""
        scope, stream = self.owner.scope, self.owner.stream
        attributes = traces.messaging(
            "send", scope, stream, **{"messaging.operation.name": "commit"}
        )
        with traces.span(f"commit {scope}/{stream}", "producer", **attributes):
            await self.flush()
            self.state = await self.owner.commit_txn(self.txn_id, timestamp, wait=wait)

    async def abort(self) -> None:
        self.state = await self.owner.abort_txn(self.txn_id)

    async def ping(self, lease_ms: int = defaults.TRANSACTION_LEASE_MS) -> None:
        await self.owner.ping_txn(self.txn_id, lease_ms)

    async def check_status(self) -> str:
        self.state = await self.owner.txn_state(self.txn_id)
        return self.state


class AsyncTransactionalWriter:
    def __init__(self, controller: AsyncControllerClient, scope: str, stream: str) -> None:
        self.controller = controller
        self.scope, self.stream = scope, stream
        self._pool: SegmentStorePool | None = None
        self._nodes: dict[int, tuple[str, int]] = {}

    async def client_for(self, parent_id: int) -> Any:
        """The connection for a shadow segment: the node serving its parent (a transaction
        segment lives in its parent's container)."""
        pool = await self.pool()
        node = self._nodes.get(parent_id)
        if node is None:
            node = await self.controller.segment_uri(self.scope, self.stream, parent_id)
            self._nodes[parent_id] = node
        try:
            return await pool.get(*node)
        except (ssc.ConnectionLostError, OSError):
            self.forget(parent_id)
            raise

    async def pool(self) -> SegmentStorePool:
        """The connections to the nodes (made once, with the stream's delegation token)."""
        if self._pool is None:
            self._pool = await SegmentStorePool.for_stream(self.controller, self.scope, self.stream)
        return self._pool

    def forget(self, parent_id: int) -> None:
        """Forget where the segment is served (its node failed, or answered WrongHost): the
        next ``client_for`` asks the controller again."""
        self._nodes.pop(parent_id, None)

    async def begin_txn(
        self, lease_ms: int = defaults.TRANSACTION_LEASE_MS, writer_id: str = ""
    ) -> Transaction:
        """A new transaction; ``writer_id`` names who writes it (``open_txn_ids`` finds the
        ones a writer left open)."""
        path = paths.transactions(self.scope, self.stream)
        body = {"leaseMs": lease_ms, "writerId": writer_id}
        # (safe to send again: an answer lost on the way leaves at most a transaction nobody
        # writes to, which its lease aborts)
        return Transaction(self, await self.controller.call("POST", path, body, changes=False))

    async def open_txn_ids(self, writer_id: str) -> list[uuid.UUID]:
        """The transactions begun with ``writer_id`` that are still open."""
        path = paths.transactions(self.scope, self.stream, writer_id=writer_id)
        answer = await self.controller.call("GET", path)
        return [uuid.UUID(t["txnId"]) for t in answer["transactions"]]

    async def commit_txn(
        self, txn_id: uuid.UUID, timestamp: int | None = None, *, wait: bool = True
    ) -> str:
        """Commit the transaction ``txn_id`` by its id alone, without writing to it (its
        writers flushed it: a driver committing what its tasks wrote); returns its state,
        COMMITTED (or, without ``wait``, COMMITTING). Committed already is fine; one that can
        no longer be committed (aborted) raises ``ControllerError`` (``precondition-failed``)."""
        body: dict[str, Any] = {"wait": COMMIT_WAIT_SECONDS} if wait else {}
        if timestamp is not None:
            body["timestamp"] = timestamp
        answer = await self.controller.call(
            "POST",
            paths.transaction(self.scope, self.stream, txn_id, "commit"),
            body,
            changes=False,  # (idempotent)
        )
        state = str(answer["state"])
        if state != "COMMITTED" and (wait or state != "COMMITTING"):
            raise RuntimeError(f"transaction {txn_id} is {state} after the commit")
        return state

    async def commit_txns(
        self, txn_ids: Sequence[uuid.UUID], timestamp: int | None = None, *, wait: bool = True
    ) -> dict[uuid.UUID, str]:
        """Commit several transactions by id at once, in the order given (one request per
        ``COMMIT_AT_ONCE`` of them): all of them or, if one can no longer be committed (aborted,
        its lease run out), none of that request's, with ``ControllerError``
        (``precondition-failed``) naming it. Returns each one's state: COMMITTED (or, without
        ``wait``, COMMITTING). Committed already is fine."""
        states: dict[uuid.UUID, str] = {}
        for at in range(0, len(txn_ids), COMMIT_AT_ONCE):
            body: dict[str, Any] = {"txnIds": [str(t) for t in txn_ids[at : at + COMMIT_AT_ONCE]]}
            if wait:
                body["wait"] = COMMIT_WAIT_SECONDS
            if timestamp is not None:
                body["timestamp"] = timestamp
            path = paths.transactions_commit(self.scope, self.stream)
            answer = await self.controller.call("POST", path, body, changes=False)  # (idempotent)
            for item in answer["transactions"]:
                state = states[uuid.UUID(item["txnId"])] = str(item["state"])
                if state != "COMMITTED" and (wait or state != "COMMITTING"):
                    raise RuntimeError(f"transaction {item['txnId']} is {state} after the commit")
        return states

    async def abort_txn(self, txn_id: uuid.UUID) -> str:
        """Abort the transaction ``txn_id`` by its id alone; returns its state (ABORTED).
        Aborted already is fine; one committing or committed raises ``ControllerError``
        (``precondition-failed``)."""
        answer = await self.controller.call(
            "POST",
            paths.transaction(self.scope, self.stream, txn_id, "abort"),
            {"wait": 30},
            changes=False,  # (idempotent)
        )
        return str(answer["state"])

    async def txn_state(self, txn_id: uuid.UUID) -> str:
        """The state of the transaction ``txn_id`` (OPEN, COMMITTING, COMMITTED, ABORTING,
        ABORTED), by its id alone."""
        return str((await self.controller.call("GET", self._txn_path(txn_id)))["state"])

    async def ping_txn(
        self, txn_id: uuid.UUID, lease_ms: int = defaults.TRANSACTION_LEASE_MS
    ) -> None:
        """Extend the lease of the open transaction ``txn_id`` by its id alone; one no longer
        open raises ``ControllerError`` (``precondition-failed``)."""
        await self.controller.call(
            "POST",
            paths.transaction(self.scope, self.stream, txn_id, "ping"),
            {"leaseMs": lease_ms},
            changes=False,
        )

    def _txn_path(self, txn_id: uuid.UUID) -> str:
        return paths.transaction(self.scope, self.stream, txn_id)

    async def get_txn(self, txn_id: uuid.UUID) -> Transaction:
        """The OPEN transaction ``txn_id`` (begun by this or another client), to write to it,
        commit or abort it; ``ValueError`` if it is not open."""
        answer = await self.controller.call("GET", self._txn_path(txn_id))
        if "shadowSegments" not in answer:
            raise ValueError(f"transaction {txn_id} is {answer['state']}, not OPEN")
        return Transaction(self, answer)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
