"""Kafka's requests about records: Produce, Fetch, ListOffsets, DeleteRecords, InitProducerId;
and the record batches they carry (aiokafka's codec)."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from collections.abc import Sequence
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from segment_app.engine.errors import ContainerOfflineError, EngineError
from segment_app.kafka.context import (
    BATCH_BYTES_MAX,
    CLUSTER_AUTHORIZATION_FAILED,
    COORDINATOR_NOT_AVAILABLE,
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    INVALID_REQUIRED_ACKS,
    KAFKA_STORAGE_ERROR,
    MESSAGE_TOO_LARGE,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    POLICY_VIOLATION,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    Context,
    Session,
    milliseconds,
)
from segment_app.kafka.partitions import (
    CorruptPartitionError,
    PartitionLog,
)
from segment_app.kafka.record_meta import RecordMeta, split
from segment_app.server.schema_guard import UNKNOWN_SCHEMA, judge, stream_of

__all__ = ["RecordRequests"]

#: The longest a fetch waits for records (Kafka's consumers ask 0.1 to 0.5 s).
FETCH_WAIT_MAX_S = 10.0
log = logging.getLogger(__name__)
_INT64 = struct.Struct(">q")
_BATCH_HEAD = struct.Struct(">qi")


class RecordRequests:
    """The replies about records: produced, fetched, listed, deleted."""

    def __init__(self, context: Context) -> None:
        self.context = context

    # -- produce -------------------------------------------------------------------------------

    async def produce(self, request: Any, version: int, session: Session) -> Any:
        if request.transactional_id is not None:
            return self._produce_refused(request, UNSUPPORTED_FOR_MESSAGE_FORMAT,
                                         "transactions are not served")  # fmt: skip
        if request.acks not in (-1, 0, 1):
            return self._produce_refused(request, INVALID_REQUIRED_ACKS, "acks is -1, 0 or 1")
        jobs = []
        for topic in request.topic_data:
            for partition in topic.partition_data:
                jobs.append(self._produce_partition(session, topic.name, partition))
        done = await asyncio.gather(*jobs)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, entry in done:
            by_topic.setdefault(name, []).append(entry)
        if request.acks == 0:
            return None
        return {
            "throttle_time": int(session.throttle_s * 1000),
            "responses": [{"name": name, "partition_responses": entries}
                          for name, entries in by_topic.items()],
        }  # fmt: skip

    def _produce_refused(self, request: Any, code: int, message: str) -> Any:
        return {
            "throttle_time": 0,
            "responses": [
                {"name": topic.name, "partition_responses": [
                    {"index": p.index, "error_code": code, "base_offset": -1,
                     "log_start_offset": -1, "error_message": message}
                    for p in topic.partition_data]}
                for topic in request.topic_data
            ],
        }  # fmt: skip

    async def _produce_partition(
        self, session: Session, name: str, partition: Any
    ) -> tuple[str, dict[str, Any]]:
        entry: dict[str, Any] = {"index": partition.index, "error_code": NONE, "base_offset": -1,
                                 "log_append_time": None, "log_start_offset": -1}  # fmt: skip
        error, log_ = await self.context.partition(
            session, name, partition.index, "READ_UPDATE", True
        )
        if log_ is None:
            entry["error_code"] = error
            return name, entry
        try:
            batches = _batches(partition.records or b"")
            framed = [split(batch.records) for batch in batches]
            for batch, (data, _) in zip(batches, framed, strict=True):
                await self._guard(log_.segment, data, len(batch.records), session)
            first: int | None = None
            for batch, (data, body) in zip(batches, framed, strict=True):
                writer_id, event_number = None, None
                if batch.producer_id >= 0 and batch.base_sequence >= 0:
                    writer_id = uuid.UUID(
                        int=(batch.producer_id << 16) | batch.producer_epoch & 0xFFFF
                    )
                    event_number = batch.base_sequence + batch.last_offset_delta
                base = await log_.append(len(batch.records), data, body, writer_id, event_number)
                if first is None:
                    first = base
            entry["base_offset"] = -1 if first is None else first
        except _BadBatch as exc:
            entry.update(error_code=exc.code, error_message=str(exc))
        except ContainerOfflineError:
            entry["error_code"] = NOT_LEADER_OR_FOLLOWER
        except EngineError as exc:
            entry.update(error_code=KAFKA_STORAGE_ERROR, error_message=str(exc))
        except Exception as exc:  # (a guard's source away: retriable, and the reply whole)
            log.warning("Kafka produce to %s-%d failed: %s", name, partition.index, exc)
            entry.update(error_code=KAFKA_STORAGE_ERROR, error_message=str(exc))
        return name, entry

    async def _guard(self, segment: str, data: bytes, count: int, session: Session) -> None:
        """Hold a produce to its stream's schemas and its scope's quotas, as the wire's appends
        are: ``_BadBatch`` (INVALID_RECORD, POLICY_VIOLATION) if refused; a scope over its rate
        mutes the connection for a while (``Session.throttle_s``)."""
        quotas = self.context.quotas
        if quotas is not None and quotas.allowances:
            reason = quotas.refusal(segment)
            if reason is not None:
                raise _BadBatch(POLICY_VIOLATION, reason)
            scope = quotas.scope_charged(segment, len(data), count)
            if scope is not None:
                session.throttle_s = max(session.throttle_s, quotas.wait(scope))
        guard, stream = self.context.schema_guard, stream_of(segment)
        if guard is None or stream is None:
            return
        await guard.ready(stream)
        policy = guard.policy(stream) or await guard.reload(stream)
        refusal = judge(policy, data)
        if refusal is UNKNOWN_SCHEMA:  # (a schema registered a moment ago)
            policy = await guard.reload(stream)
            refusal = judge(policy, data, final=True)
        if refusal is not None:
            raise _BadBatch(INVALID_RECORD, str(refusal.error(segment, policy, refusal.index)))

    # -- fetch ---------------------------------------------------------------------------------

    async def fetch(self, request: Any, version: int, session: Session) -> Any:
        wait = min(milliseconds(request.max_wait) / 1000, FETCH_WAIT_MAX_S)
        deadline = time.monotonic() + wait
        budget = request.max_bytes if version >= 3 else 1 << 30
        while True:
            total, responses, waits = 0, [], []
            charged: list[tuple[str, int]] = []
            for topic in request.topics:
                partitions = []
                for asked in topic.partitions:
                    entry, log_ = await self._fetch_partition(
                        session, topic.topic, asked, budget - total
                    )
                    size = len(entry.get("records") or b"")
                    if log_ is not None:
                        waits.append(log_)
                        if size:
                            charged.append((log_.segment, size))
                    total += size
                    partitions.append(entry)
                responses.append({"topic": topic.topic, "partitions": partitions})
            left = deadline - time.monotonic()
            if total >= max(request.min_bytes, 1) or left <= 0 or not waits:
                if self.context.quotas is not None and self.context.quotas.allowances:
                    for segment, size in charged:  # (a scope over its read rate: muted)
                        delay = self.context.quotas.charge_read(segment, size)
                        session.throttle_s = max(session.throttle_s, delay)
                return {"throttle_time": int(session.throttle_s * 1000), "error_code": NONE,
                        "session_id": 0, "responses": responses}  # fmt: skip
            await _first_append(waits, min(left, 0.1))

    async def _fetch_partition(
        self, session: Session, name: str, asked: Any, budget: int
    ) -> tuple[dict[str, Any], PartitionLog | None]:
        entry: dict[str, Any] = {"partition_index": asked.partition, "error_code": NONE,
                                 "high_watermark": -1, "last_stable_offset": -1,
                                 "log_start_offset": -1, "aborted_transactions": None,
                                 "preferred_read_replica": -1, "records": b""}  # fmt: skip
        error, log_ = await self.context.partition(session, name, asked.partition, "READ")
        if log_ is None:
            entry["error_code"] = error
            return entry, None
        try:
            end = await log_.end_offset()
            start = await log_.start_offset()
            entry.update(high_watermark=end, last_stable_offset=end, log_start_offset=start)
            offset = asked.fetch_offset
            if not start <= offset <= end:
                entry["error_code"] = OFFSET_OUT_OF_RANGE
                return entry, None
            if offset == end or budget <= 0:
                return entry, log_
            values = await log_.read(offset, min(asked.partition_max_bytes, budget))
            meta = await log_.metadata(offset, len(values))
            entry["records"] = _batch_of(offset, values, meta)
        except ContainerOfflineError:
            entry["error_code"] = NOT_LEADER_OR_FOLLOWER
            return entry, None
        except CorruptPartitionError as exc:
            log.warning("Kafka fetch: %s", exc)
            entry["error_code"] = KAFKA_STORAGE_ERROR
            return entry, None
        return entry, log_

    async def list_offsets(self, request: Any, version: int, session: Session) -> Any:
        topics = []
        for topic in request.topics:
            partitions = []
            for asked in topic.partitions:
                entry: dict[str, Any] = {"partition_index": asked.partition_index,
                                         "error_code": NONE, "timestamp": -1, "offset": -1,
                                         "leader_epoch": 0}  # fmt: skip
                error, log_ = await self.context.partition(
                    session, topic.name, asked.partition_index, "READ"
                )
                if log_ is None:
                    entry["error_code"] = error
                elif asked.timestamp == -2:
                    entry["offset"] = await log_.start_offset()
                else:  # latest (-1); no record keeps a time yet, so any time is the end too
                    entry["offset"] = await log_.end_offset()
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    async def delete_records(self, request: Any, version: int, session: Session) -> Any:
        topics = []
        for topic in request.topics:
            partitions = []
            for asked in topic.partitions:
                entry: dict[str, Any] = {"partition_index": asked.partition_index,
                                         "low_watermark": -1, "error_code": NONE}  # fmt: skip
                error, log_ = await self.context.partition(
                    session, topic.name, asked.partition_index, "READ_UPDATE"
                )
                if log_ is None:
                    entry["error_code"] = error
                    partitions.append(entry)
                    continue
                end = await log_.end_offset()
                offset = end if asked.offset == -1 else asked.offset
                start = await log_.start_offset()
                if not 0 <= offset <= end:
                    entry["error_code"] = OFFSET_OUT_OF_RANGE
                elif offset > start:
                    at = await log_.position_of(offset)
                    await log_.store_checkpoint_at(offset, at)
                    await self.context.partitions.store.truncate(log_.segment, at)
                    entry["low_watermark"] = offset
                else:
                    entry["low_watermark"] = start
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    async def init_producer_id(self, request: Any, version: int, session: Session) -> Any:
        if not self.context.signed_in(session):
            return {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}  # fmt: skip
        if request.transactional_id is not None:
            return {"throttle_time": 0, "error_code": COORDINATOR_NOT_AVAILABLE,
                    "producer_id": -1, "producer_epoch": -1}  # fmt: skip
        producer_id = await asyncio.to_thread(self.context.catalog.next_producer_id)
        return {"throttle_time": 0, "error_code": NONE, "producer_id": producer_id,
                "producer_epoch": 0}  # fmt: skip


# -- record batches -------------------------------------------------------------------------------


class _BadBatch(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _batches(data: bytes) -> list[_Decoded]:
    """The record batches of a produce (v2 only), each checked (``_BadBatch`` if not)."""
    if len(data) > BATCH_BYTES_MAX:
        raise _BadBatch(
            MESSAGE_TOO_LARGE, f"{len(data)} bytes: over {BATCH_BYTES_MAX} in one produce"
        )
    batches: list[_Decoded] = []
    at = 0
    while at < len(data):
        if len(data) - at < 61:
            raise _BadBatch(CORRUPT_MESSAGE, "a record batch shorter than its header")
        _, length = _BATCH_HEAD.unpack_from(data, at)
        end = at + 12 + length
        if length < 49 or end > len(data):
            raise _BadBatch(CORRUPT_MESSAGE, f"a record batch of {length} bytes does not fit")
        magic = data[at + 16]
        if magic != 2:
            raise _BadBatch(UNSUPPORTED_FOR_MESSAGE_FORMAT, f"record batch magic {magic}: v2 only")
        batch = DefaultRecordBatch(data[at:end])
        if not batch.validate_crc():
            raise _BadBatch(CORRUPT_MESSAGE, "a record batch's CRC does not match")
        if batch.is_control_batch or batch.is_transactional:
            raise _BadBatch(UNSUPPORTED_FOR_MESSAGE_FORMAT, "transactional batches are not served")
        try:
            records = list(batch)
        except Exception as exc:  # (what the codec raises for a body that does not decode)
            raise _BadBatch(CORRUPT_MESSAGE, f"a record batch does not decode: {exc}") from None
        batches.append(_Decoded(batch, records))
        at = end
    return batches


class _Decoded:
    """A checked batch and its records."""

    def __init__(self, batch: DefaultRecordBatch, records: Sequence[Any]) -> None:
        self.records = records
        self.producer_id = batch.producer_id
        self.producer_epoch = batch.producer_epoch
        self.base_sequence = batch.base_sequence
        self.last_offset_delta = batch.last_offset_delta


def _batch_of(base: int, values: Sequence[bytes], meta: dict[int, RecordMeta]) -> bytes:
    """One record batch of ``values`` numbered from ``base``, with the times, keys and headers
    ``meta`` has for them (none: no time, no key)."""
    if not values:
        return b""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for delta, value in enumerate(values):
        found = meta.get(base + delta)
        if found is None:
            builder.append(delta, timestamp=-1, key=None, value=value, headers=[])
        else:
            builder.append(delta, timestamp=found[0], key=found[1], value=value, headers=found[2])
    data = builder.build()
    _INT64.pack_into(data, 0, base)
    return bytes(data)


async def _first_append(logs: Sequence[PartitionLog], timeout: float) -> None:
    """Until one of ``logs`` is appended to through Kafka, or ``timeout`` (others' appends are
    seen at the next look)."""
    waits = [asyncio.ensure_future(log_.appended.wait()) for log_ in logs]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
