"""The ``millrace`` PySpark data source (``pyspark.sql.datasource``): batch read and write.

Small stateless classes: the options are parsed once (``Options``); readers and writers hold
only what pickles (the options, plain segment ranges, transaction ids) and talk to Millrace
through the Python client (``StreamManager``), on the driver and on the executors alike.

* **Read**: the driver plans one partition per segment range between the start and end cuts
  (``BatchClient.segment_ranges``); executors read their ranges in parallel and hand Spark
  Arrow record batches. Rows: ``event`` (binary), ``scope``, ``stream``, ``segment_id``,
  ``offset``, ``routing_key`` (null: Millrace's events do not carry their key). A range whose
  start was truncated away meanwhile is read from the new start, with a warning.
* **Write**: an ``event`` column (string or binary) and an optional ``routing_key`` column.
  With ``exactly_once`` (the default) each task writes into its own transaction and returns its
  id; the driver commits them all when the job commits, and aborts them when it fails; a task
  that fails aborts its own. So a failed or retried task or job never leaves partial or
  duplicate data. Without it, each task writes with an idempotent writer and flushes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes
from pyspark.sql.types import StructType

from millrace.client.batch import RangeTruncatedError, SegmentRange
from millrace.client.controller import ControllerError
from millrace.client.events import EventFormatError
from millrace.client.streamcut import StreamCut
from millrace.client.transactions import COMMIT_AT_ONCE
from spark_bridge import arrow, typed
from spark_bridge.options import OptionError, Options
from spark_bridge.worker_state import LEASES, forget_task_writers, manager_of, task_writers

log = logging.getLogger(__name__)

#: A writing task frames Spark's Arrow batches (10,000 rows each by default) and hands them to
#: the client this many bytes at a time, each segment's rows of all of them side by side:
#: fewer, fuller blocks on the wire and appends in the segment store (docs/BENCHMARKS.md).
WRITE_BYTES = 8 << 20
#: ... in pieces of at most this many bytes, each one append block (the segment store takes
#: appends of up to 8 MiB).
PIECE_BYTES = 4 << 20
#: Transactions a job's driver aborts at once (side by side).
FINISH_AT_ONCE = 8
#: The rows a read gives.
SCHEMA = (
    "event binary, scope string, stream string, segment_id bigint, offset bigint,"
    " routing_key string"
)
#: The rows a read with option ``metadata`` gives instead of events.
METADATA_SCHEMAS = {
    "streams": "scope string, stream string",
    "streaminfo": "scope string, stream string, head_stream_cut string, tail_stream_cut string",
}


class MillraceDataSource(DataSource):
    """``spark.read.format("millrace")`` / ``df.write.format("millrace")``."""

    @classmethod
    def name(cls) -> str:
        return "millrace"

    def schema(self) -> str | StructType:
        options = Options.parse(self.options)
        if options.metadata:
            return METADATA_SCHEMAS[options.metadata]
        if options.schema == "registry":
            with manager_of(options) as manager:
                return typed.read_schema(typed.resolve(manager, options))
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = Options.parse(self.options)
        if options.metadata:
            return MetadataReader(options)
        return BatchReader(options, read_binding(options, schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = Options.parse(self.options)
        return BatchWriter(options, write_binding(options, schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = Options.parse(self.options)
        return StreamReader(options, read_binding(options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        records = commit_records(self.options)
        options = Options.parse({k: v for k, v in self.options.items()
                                 if str(k).lower() != "checkpointlocation"})  # fmt: skip
        return StreamWriter(options, records, write_binding(options, schema))


def read_binding(options: Options, schema: StructType) -> typed.Binding | None:
    """A typed read's schema, resolved again as the job is planned: it must still be the one
    ``schema()`` gave Spark (a version registered in between: plan again, or pin
    ``schema_version``)."""
    if options.schema != "registry":
        return None
    with manager_of(options) as manager:
        binding = typed.resolve(manager, options)
    if typed.read_schema(binding) != schema:
        raise OptionError(
            f"millrace: the rows of a typed read are the schema of {binding.subject!r}"
            f" (version {binding.version}, id {binding.schema_id}):"
            f" {typed.read_schema(binding).simpleString()};"
            " Spark was given other ones (a schema of your own, or the subject changed while the"
            " job was planned: run it again, or pin option schema_version)"
        )
    return binding


def write_binding(options: Options, schema: StructType) -> typed.Binding | None:
    """Check the DataFrame's columns, create the stream when allowed and, for a typed write,
    resolve the schema its rows are encoded with (driver)."""
    check_write_schema(schema, typed=options.schema == "registry")
    prepare_stream(options)
    if options.schema != "registry":
        return None
    with manager_of(options) as manager:
        return typed.resolve(manager, options, writing=schema)


# -- read -----------------------------------------------------------------------------------------


@dataclasses.dataclass
class RangePartition(InputPartition):  # type: ignore[misc]
    segment: SegmentRange


def plan_ranges(options: Options, start: StreamCut | None, end: StreamCut | None) -> list[Any]:
    with manager_of(options) as manager, manager.create_batch_client() as batch:
        ranges = batch.segment_ranges(options.scope, options.stream, start, end)
    return [RangePartition(r) for r in ranges if r.size > 0]


def start_and_end(options: Options) -> tuple[StreamCut | None, StreamCut | None]:
    """The batch read's cuts: ``earliest`` is the head, ``latest`` and ``unbounded`` the tail
    as the job is planned."""
    start = options.cut("start_stream_cut")
    if start is None and options.start_stream_cut == "latest":
        with manager_of(options) as manager:
            start = manager.get_stream_cut(options.scope, options.stream, "tail")
    if options.end_stream_cut == "earliest":
        raise OptionError("millrace: option 'end_stream_cut' cannot be earliest")
    return start, options.cut("end_stream_cut")


class BatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: Options, binding: typed.Binding | None = None) -> None:
        self.options = options
        self.binding = binding

    def partitions(self) -> list[Any]:
        start, end = start_and_end(self.options)
        return plan_ranges(self.options, start, end)

    def read(self, partition: Any) -> Iterator[Any]:
        return read_partition(self.options, partition, self.binding)


class MetadataReader(DataSourceReader):  # type: ignore[misc]
    """``metadata=Streams``: the scope's streams; ``metadata=StreamInfo``: the stream's head
    and tail cuts (as the Python client's text form, for ``start_stream_cut`` and the like)."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        scope, stream = self.options.scope, self.options.stream
        with manager_of(self.options) as manager:
            if self.options.metadata == "streams":
                for name in manager.list_streams(scope):
                    yield scope, name
                return
            head = manager.get_stream_cut(scope, stream, "head").to_text()
            tail = manager.get_stream_cut(scope, stream, "tail").to_text()
            yield scope, stream, head, tail


def read_partition(
    options: Options, partition: Any, binding: typed.Binding | None = None
) -> Iterator[Any]:
    """A planned partition's events; with no range to read, Spark still reads one partition
    of its own (no ``segment``): nothing in it."""
    segment = getattr(partition, "segment", None)
    if segment is None:
        return iter(())
    batches = read_range(options, segment)
    if binding is None:
        return batches
    decoder = typed.decoder_of(binding, options.controller, options.token, options.trust_store)
    permissive = options.mode == "permissive"
    return (typed.typed_batch(decoder, b, segment.name, permissive) for b in batches)


def read_range(options: Options, segment: SegmentRange) -> Iterator[Any]:
    """Arrow record batches of the range's events, one per read (executors)."""
    arrow.reuse_freed_memory()
    with manager_of(options) as manager, manager.create_batch_client() as batch:
        while segment.start_offset < segment.end_offset:
            pending, at = b"", segment.start_offset
            try:
                for _, data in batch.read_chunks(segment):
                    buffer = pending + data if pending else data
                    starts, used = arrow.event_starts(buffer, at)
                    if len(starts):
                        yield arrow.record_batch(segment, buffer, starts, used, at)
                    pending, at = buffer[used:], at + used
                if pending:
                    raise EventFormatError(
                        f"{segment.name}: the range ends inside an event at offset {at}"
                    )
                return
            except RangeTruncatedError as exc:
                log.warning(
                    "millrace: %s was truncated up to %d while read; skipping to there",
                    segment.name, exc.start_offset,
                )  # fmt: skip
                segment = dataclasses.replace(segment, start_offset=max(at, exc.start_offset))


# -- write ----------------------------------------------------------------------------------------


def check_write_schema(schema: StructType, typed: bool = False) -> None:
    names = {f.name for f in schema.fields}
    if typed:
        if not names - {"routing_key"}:
            raise OptionError("millrace: a typed write needs columns besides 'routing_key'")
    elif "event" not in names:
        raise OptionError(
            "millrace: a DataFrame written to Millrace needs an 'event' column (string or"
            f" binary); it has {sorted(names)}"
        )
    for field in schema.fields:
        if field.name == "routing_key" or (field.name == "event" and not typed):
            kind = field.dataType.simpleString()
            if kind not in ("string", "binary") or (
                field.name == "routing_key" and kind != "string"
            ):
                raise OptionError(
                    f"millrace: column {field.name!r} must be string"
                    f"{' or binary' if field.name == 'event' else ''}, not {kind}"
                )


def prepare_stream(options: Options) -> None:
    """Create the scope and the stream when allowed (driver, while the job is planned)."""
    with manager_of(options) as manager:
        if options.allow_create_scope:
            manager.create_scope(options.scope)
        if options.allow_create_stream:
            manager.create_stream(
                options.scope, options.stream, options.default_num_segments,
                scaling_policy=scaling_policy(options), retention_policy=retention_policy(options),
            )  # fmt: skip


def scaling_policy(options: Options) -> dict[str, Any]:
    if options.default_segment_target_rate_events_per_sec:
        return {"type": "BY_RATE_IN_EVENTS_PER_SEC", "minSegments": options.default_num_segments,
                "targetRate": options.default_segment_target_rate_events_per_sec,
                "scaleFactor": options.default_scale_factor}  # fmt: skip
    if options.default_segment_target_rate_bytes_per_sec:
        return {"type": "BY_RATE_IN_KBYTES_PER_SEC", "minSegments": options.default_num_segments,
                "targetRate": max(options.default_segment_target_rate_bytes_per_sec // 1024, 1),
                "scaleFactor": options.default_scale_factor}  # fmt: skip
    return {"type": "FIXED_NUM_SEGMENTS", "minSegments": options.default_num_segments}


def retention_policy(options: Options) -> dict[str, Any] | None:
    if options.default_retention_duration_milliseconds:
        minutes = max(options.default_retention_duration_milliseconds // 60_000, 1)
        return {"type": "LIMITED_DAYS", "value": 0, "timeBasedRetention": {"minutes": minutes}}
    if options.default_retention_size_bytes:
        mib = max(options.default_retention_size_bytes // (1024 * 1024), 1)
        return {"type": "LIMITED_SIZE_MB", "value": mib}
    return None


@dataclasses.dataclass
class WriteMessage(WriterCommitMessage):  # type: ignore[misc]
    events: int
    #: the task's transaction (exactly once), or ''
    txn_id: str = ""


class BatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, options: Options, binding: typed.Binding | None = None) -> None:
        self.options = options
        self.binding = binding
        #: every transaction of this job is begun with this writer id, so that an abort also
        #: finds those of tasks that were killed before they could report theirs
        self.writer_id = f"spark-{uuid.uuid4().hex[:24]}"

    def write(self, iterator: Iterator[Any]) -> WriteMessage:
        return write_batches(self.options, iterator, self.writer_id, self.binding)

    def commit(self, messages: list[Any]) -> None:
        finish(self.options, messages, commit=True, writer_id=self.writer_id)

    def abort(self, messages: list[Any]) -> None:
        finish(self.options, messages, commit=False, writer_id=self.writer_id)


def write_batches(
    options: Options, batches: Iterator[Any], writer_id: str, binding: typed.Binding | None = None
) -> WriteMessage:
    """One task's Arrow record batches (executors): into its own transaction, or with a plain
    writer; a typed write's rows encoded first."""
    count = 0
    arrow.reuse_freed_memory()
    if binding is not None:
        batches = map(typed.Encoder(binding).events, batches)
    if not options.exactly_once:
        with (
            manager_of(options) as manager,
            manager.create_writer(options.scope, options.stream) as writer,
        ):
            for batch in batches:
                datas, keys = arrow.columns_of(batch)
                for data, key in zip(datas, keys, strict=True):
                    writer.write_event(data, routing_key=key)
                count += len(datas)
            writer.flush()
        return WriteMessage(count)
    writers = task_writers(options)
    try:
        txn = writers.begin_txn(lease_ms=options.transaction_timeout_ms, writer_id=writer_id)
        LEASES.keep(options, txn.txn_id)  # (alive until the driver commits it: worker_state)
        try:
            framer = arrow.Framer(txn.shadow_ranges, piece_bytes=PIECE_BYTES)
            held: list[Any] = []
            size = 0
            for batch in batches:
                held.append(batch)
                size += batch.nbytes
                count += batch.num_rows
                if size >= WRITE_BYTES:
                    txn.write_framed(framer.parts(*held))
                    held, size = [], 0
            txn.write_framed(framer.parts(*held))
            txn.flush()
        except BaseException:
            LEASES.forget(txn.txn_id)
            txn.abort()  # this attempt's events never appear; Spark may retry the task
            raise
    except BaseException:
        forget_task_writers(options)  # a retry starts afresh (the node may have moved)
        raise
    return WriteMessage(count, str(txn.txn_id))


def finish(options: Options, messages: list[Any], *, commit: bool, writer_id: str = "") -> None:
    """Commit (or abort) every task's transaction (driver), by id; ``writer_id`` is the job's
    (every task's transaction was begun with it). Both are idempotent: one that is committed
    (aborted) already is left so. A commit is one request for all of them (``commit_txns``):
    all are committed or, if one lapsed, none, and the job fails. (Past ``COMMIT_AT_ONCE``
    transactions, several requests: ``check_committable`` first checks them all.) An abort
    also aborts whatever the job's ``writer_id`` left open, the requests side by side
    (``FINISH_AT_ONCE``)."""
    ids = [m.txn_id for m in messages if isinstance(m, WriteMessage) and m.txn_id]
    if not ids and not writer_id:
        return
    with (
        manager_of(options) as manager,
        manager.create_transaction_writer(options.scope, options.stream) as writers,
    ):
        if commit:
            if len(ids) > COMMIT_AT_ONCE:
                check_committable(writers, ids, writer_id)
            try:
                writers.commit_txns([uuid.UUID(text) for text in ids])
            except ControllerError as exc:
                if exc.code != "precondition-failed":
                    raise
                raise RuntimeError(
                    f"millrace: the job's transactions cannot be committed: {exc.message}; the"
                    " commit stops before committing any of them"
                ) from None
            return
        if writer_id:
            ids += [str(t) for t in writers.open_txn_ids(writer_id) if str(t) not in ids]

        def abort(text: str) -> None:
            try:
                writers.abort_txn(uuid.UUID(text))
            except ControllerError as exc:
                if exc.code != "precondition-failed":  # (committing or committed: left so)
                    raise

        with concurrent.futures.ThreadPoolExecutor(FINISH_AT_ONCE) as pool:
            for _ in pool.map(abort, ids):
                pass


def check_committable(writers: Any, ids: list[str], writer_id: str) -> None:
    """Before any commit: every transaction of the job can still be committed (open, or
    committing or committed by an earlier try of this commit). One that cannot (its worker
    died and its lease ran out) fails the job here, before any other is committed, so that
    the job leaves nothing rather than part of its rows. One request for all the job's open
    transactions (by ``writer_id``), one more for each of the others."""
    open_now = {str(t) for t in writers.open_txn_ids(writer_id)} if writer_id else set()
    for text in ids:
        if text in open_now:
            continue
        state = writers.txn_state(uuid.UUID(text))
        if state not in ("OPEN", "COMMITTING", "COMMITTED"):
            raise RuntimeError(
                f"millrace: transaction {text} cannot be committed: it is {state}; the commit"
                " stops before committing any of this job's transactions"
            )


# -- streaming read -------------------------------------------------------------------------------


def offset_of(cut: StreamCut) -> dict[str, Any]:
    """A stream cut as Spark keeps an offset (a dict of primitives)."""
    return {"positions": {str(k): int(v) for k, v in sorted(cut.positions.items())}}


def cut_of(options: Options, offset: dict[str, Any]) -> StreamCut:
    positions = {int(k): int(v) for k, v in offset["positions"].items()}
    return StreamCut(options.scope, options.stream, positions)


class StreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """Micro-batches between stream cuts: a batch's offset is the tail cut when it was planned
    (with ``approx_bytes_per_trigger``, the cut about that many bytes after the previous one,
    on event boundaries: the controller's next-stream-cut call), its partitions the segment
    ranges between the previous cut and that one (successors of segments that scaled meanwhile
    included, so keys are followed in order across a scale)."""

    def __init__(self, options: Options, binding: typed.Binding | None = None) -> None:
        self.options = options
        self.binding = binding

    def initialOffset(self) -> dict[str, Any]:
        where = self.options.start_stream_cut
        given = self.options.cut("start_stream_cut")
        if given is not None:
            return offset_of(given)
        with manager_of(self.options) as manager:
            at = "tail" if where == "latest" else "head"
            return offset_of(manager.get_stream_cut(self.options.scope, self.options.stream, at))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.approx_bytes_per_trigger:
            return ReadMaxBytes(self.options.approx_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, Any]:
        """The tail; with a byte limit (and a start), the cut about that many bytes on."""
        with manager_of(self.options) as manager:
            if isinstance(limit, ReadMaxBytes) and start is not None:
                cut, _ = manager.next_stream_cut(cut_of(self.options, start), limit.max_bytes)
                return offset_of(cut)
            tail = manager.get_stream_cut(self.options.scope, self.options.stream, "tail")
        return offset_of(tail)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[Any]:
        if start == end:
            return []
        return plan_ranges(self.options, cut_of(self.options, start), cut_of(self.options, end))

    def read(self, partition: Any) -> Iterator[Any]:
        return read_partition(self.options, partition, self.binding)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: Millrace keeps no state for the query."""


# -- streaming write ------------------------------------------------------------------------------


class StreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """Each micro-batch's tasks write into transactions named after the query and the batch;
    the driver records the batch's transaction ids beside the query's checkpoint before it
    commits them. A replayed batch (the query restarted after the record, before Spark noted
    the batch as done) commits the recorded transactions again (a no-op when they were) and
    aborts the replay's own: no batch is ever written twice."""

    def __init__(
        self, options: Options, records: Path, binding: typed.Binding | None = None
    ) -> None:
        self.options = options
        self.records = records
        self.binding = binding
        self.query = hashlib.sha256(str(records).encode()).hexdigest()[:16]

    def write(self, iterator: Iterator[Any]) -> WriteMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        return write_batches(self.options, iterator, f"spark-{self.query}-{batch}", self.binding)

    def commit(self, messages: list[Any], batchId: int) -> None:
        record = self.records / f"{batchId}.json"
        ours = [m.txn_id for m in messages if isinstance(m, WriteMessage) and m.txn_id]
        writer_id = f"spark-{self.query}-{batchId}"
        if record.exists():  # a replay: the first run's transactions are the batch
            first = json.loads(record.read_text())["transactions"]
            finish(
                self.options, [WriteMessage(0, t) for t in first], commit=True, writer_id=writer_id
            )
            replayed = [t for t in ours if t not in first]
            finish(self.options, [WriteMessage(0, t) for t in replayed], commit=False)
            return
        self.records.mkdir(parents=True, exist_ok=True)
        partial = record.with_suffix(".tmp")
        partial.write_text(json.dumps({"batchId": batchId, "transactions": ours}))
        os.replace(partial, record)
        finish(self.options, messages, commit=True, writer_id=writer_id)

    def abort(self, messages: list[Any], batchId: int) -> None:
        finish(self.options, messages, commit=False, writer_id=f"spark-{self.query}-{batchId}")


def commit_records(options: dict[str, Any]) -> Path:
    """Where a streaming write keeps its batches' records: ``<checkpointLocation>/millrace``
    (a local checkpoint location is required)."""
    location = {str(k).lower(): v for k, v in options.items()}.get("checkpointlocation")
    if not location:
        raise OptionError(
            "millrace: a streaming write needs option 'checkpointLocation' (its batches'"
            " commit records are kept there)"
        )
    text = str(location)
    if "://" in text and not text.startswith("file://"):
        raise OptionError(
            f"millrace: a streaming write keeps its commit records beside a local"
            f" checkpointLocation; {text!r} is not local"
        )
    return Path(text.removeprefix("file://").removeprefix("file:")) / "millrace"
