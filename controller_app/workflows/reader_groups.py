"""Reader groups: create, reset, delete; readers join, sync, leave; checkpoints; subscriber cuts.

The group's configuration and generation live on its ``ReaderGroup`` row; the readers' live
state is a ``GroupState`` document on the same row (``sync_state``), changed by ``_change``:
read the row, apply one request to the document, write it back with
``UPDATE ... WHERE state_version = <read>``; a lost race re-reads and applies the request again
(every request is a pure function of the state it meets, so that is safe).

A reader process calls ``add_reader`` once, then ``sync`` every ``groupRefreshTimeMs`` (and at
once when a segment ends): it reports its positions, the segments it read to their end, the
segments it released and the checkpoint it acknowledged; the answer gives it new segments
(with where they are served; and again any it holds but did not report, whose first answer was
lost), how many to release, a checkpoint to mark, and whether the
group's streams have been read to their end. Readers not heard from for ``readerTimeoutMs``
are declared dead on the next request to the group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import IntegrityError, transaction

from controller_app import outages
from controller_app import selectors as sel
from controller_app.choices import ReaderGroupState, StreamState
from controller_app.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
    StreamNotFoundError,
)
from controller_app.models import ReaderGroup, Stream, Subscriber
from controller_app.ports import SegmentStorePort
from controller_app.reader_group_state import (
    GroupState,
    ReaderNotInGroup,
    segment_key,
    split_key,
)
from controller_app.stream_reads import tail_cut
from controller_app.workflows import scopes
from controller_app.workflows.common import get_stream, now_ms
from controller_app.workflows.config import check_name
from controller_app.workflows.room import check_room
from millrace.kernel import defaults

T = TypeVar("T")

RETENTION_TYPES = (
    "NONE",
    "MANUAL_RELEASE_AT_USER_STREAMCUT",
    "AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT",
)
GROUP_REFRESH_MS_DEFAULT = 1_000
#: Streams one reader group may read.
STREAMS_MAX = 64
#: Attempts of one change before a ConflictError (each lost race re-reads the row).
CAS_ATTEMPTS = 50
READER_ID_LENGTH_MAX = 255


@dataclass(frozen=True)
class ReaderGroupConfig:
    """What a reader group reads and how (Pravega's ``ReaderGroupConfig``).

    ``streams`` maps ``"scope/stream"`` to where reading starts: ``"head"``, ``"tail"`` or a
    stream cut ``{segment id: offset}``.
    """

    streams: Mapping[str, Any] = field(default_factory=dict)
    retention_type: str = "NONE"
    reader_timeout_ms: int = defaults.READER_TIMEOUT_MS
    group_refresh_time_ms: int = GROUP_REFRESH_MS_DEFAULT

    def __post_init__(self) -> None:
        if not self.streams:
            raise InvalidArgumentError("a reader group reads at least one stream")
        if len(self.streams) > STREAMS_MAX:
            raise InvalidArgumentError(f"a reader group reads at most {STREAMS_MAX} streams")
        for scoped, start in self.streams.items():
            _split_scoped(scoped)
            if isinstance(start, str):
                if start not in ("head", "tail"):
                    raise InvalidArgumentError(
                        f"the start of {scoped} must be head, tail or a stream cut"
                    )
            elif (
                not isinstance(start, Mapping)
                or not start
                or not all(is_int(k) and is_int(v) for k, v in start.items())
            ):
                raise InvalidArgumentError(
                    f"the start of {scoped} must be head, tail or {{segment id: offset}}"
                )
        if self.retention_type not in RETENTION_TYPES:
            raise InvalidArgumentError(f"retentionType must be one of {', '.join(RETENTION_TYPES)}")
        for name in ("reader_timeout_ms", "group_refresh_time_ms"):
            value = getattr(self, name)
            if type(value) is not int or not 100 <= value <= 86_400_000:
                raise InvalidArgumentError(f"{name} must be an integer from 100 to 86400000")

    def to_json(self) -> dict[str, Any]:
        return {
            "streams": {
                k: v if isinstance(v, str) else {str(a): int(b) for a, b in v.items()}
                for k, v in sorted(self.streams.items())
            },
            "retentionType": self.retention_type,
            "readerTimeoutMs": self.reader_timeout_ms,
            "groupRefreshTimeMs": self.group_refresh_time_ms,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReaderGroupConfig:
        return cls(
            streams=data.get("streams", {}),
            retention_type=data.get("retentionType", "NONE"),
            reader_timeout_ms=data.get("readerTimeoutMs", defaults.READER_TIMEOUT_MS),
            group_refresh_time_ms=data.get("groupRefreshTimeMs", GROUP_REFRESH_MS_DEFAULT),
        )


def is_int(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 <= value < 2**63
    return isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19


def _split_scoped(scoped: object) -> tuple[str, str]:
    if not isinstance(scoped, str) or scoped.count("/") != 1:
        raise InvalidArgumentError(f"a stream is named 'scope/stream', not {scoped!r}")
    scope, stream = scoped.split("/")
    return check_name("scope", scope), check_name("stream", stream)


def check_reader_id(reader: object) -> str:
    if not isinstance(reader, str) or not reader or len(reader) > READER_ID_LENGTH_MAX:
        raise InvalidArgumentError(
            f"a reader id is a non-empty string of at most {READER_ID_LENGTH_MAX} characters"
        )
    if not reader.isprintable() or "/" in reader:
        raise InvalidArgumentError("a reader id holds printable characters other than '/'")
    return reader


# -- lifecycle ----------------------------------------------------------------------------------


def get_reader_group(scope: str, name: str) -> ReaderGroup:
    group = ReaderGroup.objects.select_related("scope").filter(scope__name=scope, name=name).first()
    if group is None:
        scopes.get_scope(scope)
        raise ReaderGroupNotFoundError(f"reader group {scope}/{name} does not exist")
    return group


def _start_positions(store: SegmentStorePort, config: ReaderGroupConfig) -> dict[str, int]:
    positions: dict[str, int] = {}
    for scoped, start in config.streams.items():
        scope, name = _split_scoped(scoped)
        stream = get_stream(scope, name)
        if start == "head":
            cut = sel.head_segments(stream)
        elif start == "tail":
            cut = tail_cut(store, stream)
        else:
            cut = sel.validate_stream_cut(stream, {int(k): int(v) for k, v in start.items()})
        for segment, offset in cut.items():
            positions[segment_key(scope, name, segment.id)] = offset
    return positions


def create_reader_group(
    store: SegmentStorePort, scope: str, name: str, config: ReaderGroupConfig
) -> ReaderGroup:
    """Create the group, its readers' state at the configured starts and its subscriptions.
    The same create again returns the group; another configuration -> AlreadyExistsError."""
    check_name("reader group", name)
    row = scopes.get_scope(scope)
    existing = ReaderGroup.objects.filter(scope=row, name=name).first()
    if existing is not None:
        if ReaderGroupConfig.from_json(existing.configuration) == config:
            return existing
        raise AlreadyExistsError(f"reader group {scope}/{name} exists with another configuration")
    check_room(scope, reader_groups=1)
    positions = _start_positions(store, config)
    try:
        with transaction.atomic():
            group = ReaderGroup.objects.create(
                scope=row,
                name=name,
                configuration=config.to_json(),
                state=ReaderGroupState.ACTIVE,
                sync_state=GroupState.start(positions).dump(),
            )
            _subscribe(group, config, positions)
    except IntegrityError:  # a concurrent create of the same group won
        return create_reader_group(store, scope, name, config)
    return group


def reset_reader_group(
    store: SegmentStorePort, scope: str, name: str, config: ReaderGroupConfig | None = None
) -> ReaderGroup:
    """Start the group again at ``config``'s starts (default: its own configuration): a new
    generation; every reader gives up its segments and acquires anew; checkpoints cleared."""
    group = get_reader_group(scope, name)
    config = config or ReaderGroupConfig.from_json(group.configuration)
    positions = _start_positions(store, config)
    for _ in range(CAS_ATTEMPTS):
        state = GroupState.load(group.sync_state)
        fresh = GroupState.start(positions)
        stamp = now_ms()
        for reader in state.readers:
            fresh.add_reader(reader, stamp)
        with transaction.atomic():
            matched = ReaderGroup.objects.filter(
                pk=group.pk, state_version=group.state_version
            ).update(
                configuration=config.to_json(),
                generation=group.generation + 1,
                sync_state=fresh.dump(),
                state_version=group.state_version + 1,
            )
            if matched:
                group.refresh_from_db()
                Subscriber.objects.filter(reader_group=group).delete()
                _subscribe(group, config, positions)
                return group
        group = get_reader_group(scope, name)
    raise ConflictError(f"reader group {scope}/{name} kept changing; try again")


def delete_reader_group(scope: str, name: str) -> None:
    get_reader_group(scope, name).delete()


def _subscribe(group: ReaderGroup, config: ReaderGroupConfig, positions: Mapping[str, int]) -> None:
    if config.retention_type != "NONE":
        _record_subscriber_cuts(group, _cuts(positions))


def _cuts(positions: Mapping[str, int]) -> dict[tuple[str, str], dict[int, int]]:
    cuts: dict[tuple[str, str], dict[int, int]] = {}
    for key, offset in positions.items():
        scope, name, segment_id = split_key(key)
        cuts.setdefault((scope, name), {})[segment_id] = offset
    return cuts


def _json_cut(cut: Mapping[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(cut.items())}


# -- changes of the live state -----------------------------------------------------------------


def _change(scope: str, name: str, apply: Callable[[ReaderGroup, GroupState], T]) -> T:
    """Apply ``apply`` to the group's state and store the result under a compare-and-swap,
    re-reading and applying again after a lost race. Dead readers are expired first; syncs
    missed while the database was away do not count (``outages.database_failed_at_ms``)."""
    for _ in range(CAS_ATTEMPTS):
        group = get_reader_group(scope, name)
        state = GroupState.load(group.sync_state)
        config = ReaderGroupConfig.from_json(group.configuration)
        before = _newest_checkpoint(state)
        state.expire(now_ms(), config.reader_timeout_ms, outages.database_failed_at_ms())
        try:
            result = apply(group, state)
        except ReaderNotInGroup as exc:
            raise ReaderNotInGroupError(
                f"reader {exc.args[0]} is not in reader group {scope}/{name}"
                " (it left, was declared dead, or never joined): join again"
            ) from None
        with transaction.atomic():
            matched = ReaderGroup.objects.filter(
                pk=group.pk, state_version=group.state_version
            ).update(sync_state=state.dump(), state_version=group.state_version + 1)
            if not matched:
                continue
            newest = _newest_checkpoint(state)
            if config.retention_type == "AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT" and newest != before:
                _record_subscriber_cuts(group, state.checkpoint_cuts(newest or "") or {})
        return result
    raise ConflictError(f"reader group {scope}/{name} kept changing; try again")


def _newest_checkpoint(state: GroupState) -> str | None:
    done = [c["name"] for c in state.checkpoints if not c["pending"]]
    return done[-1] if done else None


def _record_subscriber_cuts(
    group: ReaderGroup, cuts: Mapping[tuple[str, str], Mapping[int, int]]
) -> None:
    for (scope, name), cut in cuts.items():
        try:
            stream = get_stream(scope, name)
        except StreamNotFoundError:
            continue
        Subscriber.objects.update_or_create(
            stream=stream,
            reader_group=group,
            defaults={"generation": group.generation, "stream_cut": _json_cut(cut)},
        )


def add_reader(scope: str, name: str, reader: str) -> dict[str, Any]:
    """``reader`` joins the group (a member rejoining gives its segments back first)."""
    check_reader_id(reader)
    stamp = now_ms()

    def apply(group: ReaderGroup, state: GroupState) -> dict[str, Any]:
        state.add_reader(reader, stamp)
        config = ReaderGroupConfig.from_json(group.configuration)
        return {
            "readerId": reader,
            "generation": group.generation,
            "groupRefreshTimeMs": config.group_refresh_time_ms,
            "readerTimeoutMs": config.reader_timeout_ms,
        }

    return _change(scope, name, apply)


def remove_reader(
    scope: str, name: str, reader: str, positions: Mapping[str, int] | None = None
) -> None:
    """``reader`` leaves: its segments wait for others at ``positions`` (or its last report).
    Leaving twice is harmless."""
    check_reader_id(reader)
    given = _check_positions(positions or {})

    def apply(group: ReaderGroup, state: GroupState) -> None:
        if reader in state.readers:
            state.remove_reader(reader, given)

    _change(scope, name, apply)


def _check_positions(positions: object) -> dict[str, int]:
    if not isinstance(positions, Mapping):
        raise InvalidArgumentError("positions must be an object of segment key -> offset")
    out = {}
    for key, offset in positions.items():
        try:
            ok = is_int(split_key(key)[2])
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise InvalidArgumentError(f"{key!r} is not a segment key scope/stream/id")
        if not is_int(offset):
            raise InvalidArgumentError(f"the offset of {key} must be an integer of at least 0")
        out[key] = int(offset)
    return out


@dataclass(frozen=True)
class SyncRequest:
    generation: int
    positions: Mapping[str, int] = field(default_factory=dict)
    #: segments read to their end: key -> end offset
    ended: Mapping[str, int] = field(default_factory=dict)
    released: Mapping[str, int] = field(default_factory=dict)
    #: the checkpoint whose marker the reader handed out, with its positions then
    checkpoint: str | None = None
    checkpoint_positions: Mapping[str, int] = field(default_factory=dict)


def sync(scope: str, name: str, reader: str, request: SyncRequest) -> dict[str, Any]:
    """One round of a reader's coordination (see the module docstring)."""
    check_reader_id(reader)
    positions = _check_positions(request.positions)
    ended = _check_positions(request.ended)
    released = _check_positions(request.released)
    acked = _check_positions(request.checkpoint_positions)
    successors = {key: _successors(key) for key in ended}
    stamp = now_ms()

    def apply(group: ReaderGroup, state: GroupState) -> dict[str, Any]:
        if request.generation != group.generation:
            state.member(reader)  # still a member? else ReaderNotInGroup
            return {"generation": group.generation, "reinitialize": True}
        state.report(reader, stamp, positions)
        if request.checkpoint:
            state.ack_checkpoint(reader, request.checkpoint, {**positions, **acked})
        state.release(reader, released)
        pending_end = []
        for key, end in ended.items():
            found = successors[key]
            if found is None:
                pending_end.append(key)
            else:
                state.complete(reader, key, end, found)
        acquired = state.unreported(reader, positions) | state.acquire(reader)
        return {
            "generation": group.generation,
            "reinitialize": False,
            "acquired": acquired,
            "release": state.surplus(reader),
            "checkpoint": state.pending_checkpoint(reader),
            "endPending": pending_end,
            "finished": state.finished(),
            "assigned": sorted(state.readers[reader]["segments"]),
        }

    answer = _change(scope, name, apply)
    if not answer["reinitialize"]:
        answer["acquired"] = [_where(key, offset) for key, offset in answer["acquired"].items()]
    return answer


def _successors(key: str) -> dict[str, list[str]] | None:
    """Successors of an ended segment with their predecessors, as keys; None while the
    controller has not recorded them yet (a scale is completing)."""
    scope, name, segment_id = split_key(key)
    try:
        stream = get_stream(scope, name)
    except StreamNotFoundError:
        return {}  # deleted: nothing follows
    found = sel.successors(stream, segment_id)
    if not found and stream.state not in (
        StreamState.SEALING,
        StreamState.SEALED,
        StreamState.DELETING,
    ):
        return None
    return {
        segment_key(scope, name, s.id): [segment_key(scope, name, p) for p in preds]
        for s, preds in found.items()
    }


def _where(key: str, offset: int) -> dict[str, Any]:
    """A segment a reader acquired: its qualified name, offset and the node serving it."""
    scope, name, segment_id = split_key(key)
    out: dict[str, Any] = {"key": key, "scope": scope, "stream": name, "segmentId": segment_id,
                           "offset": offset}  # fmt: skip
    stream: Stream | None
    try:
        stream = get_stream(scope, name)
    except StreamNotFoundError:
        stream = None
    if stream is not None:
        uri = sel.segment_uri(stream, segment_id)
        out.update(segment=sel.segment_name(stream, segment_id), host=uri.host, port=uri.port)
    return out


# -- checkpoints and subscriber cuts -----------------------------------------------------------


def start_checkpoint(scope: str, name: str, checkpoint: str) -> None:
    """Ask every reader online for its position (idempotent per checkpoint name)."""
    check_reader_id(checkpoint)
    stamp = now_ms()
    _change(scope, name, lambda group, state: state.start_checkpoint(checkpoint, stamp))


def checkpoint_status(scope: str, name: str, checkpoint: str) -> dict[str, Any]:
    """``{"complete": bool, "pendingReaders": [...], "streamCuts": {"scope/stream": cut}}``."""
    group = get_reader_group(scope, name)
    state = GroupState.load(group.sync_state)
    found = state.checkpoint(checkpoint)
    if found is None:
        raise NotFoundError(f"reader group {scope}/{name} has no checkpoint {checkpoint!r}")
    cuts = state.checkpoint_cuts(checkpoint)
    return {
        "checkpointName": checkpoint,
        "complete": cuts is not None,
        "pendingReaders": sorted(found["pending"]),
        "streamCuts": {f"{s}/{n}": _json_cut(c) for (s, n), c in (cuts or {}).items()},
    }


def update_subscriber_cuts(scope: str, name: str, cuts: Mapping[str, Mapping[int, int]]) -> None:
    """A group with ``MANUAL_RELEASE_AT_USER_STREAMCUT`` retention reports the cuts up to which
    its streams may be truncated (``{"scope/stream": {segment id: offset}}``)."""
    group = get_reader_group(scope, name)
    config = ReaderGroupConfig.from_json(group.configuration)
    if config.retention_type != "MANUAL_RELEASE_AT_USER_STREAMCUT":
        raise InvalidArgumentError(
            f"reader group {scope}/{name} has retention type {config.retention_type};"
            " only MANUAL_RELEASE_AT_USER_STREAMCUT takes stream cuts from its users"
        )
    checked: dict[tuple[str, str], dict[int, int]] = {}
    for scoped, cut in cuts.items():
        if scoped not in config.streams:
            raise InvalidArgumentError(f"reader group {scope}/{name} does not read {scoped}")
        s, n = _split_scoped(scoped)
        stream = get_stream(s, n)
        valid = sel.validate_stream_cut(stream, {int(k): int(v) for k, v in cut.items()})
        checked[(s, n)] = {g.id: o for g, o in valid.items()}
    _record_subscriber_cuts(group, checked)


def describe(group: ReaderGroup) -> dict[str, Any]:
    """The group's configuration and live state, for the REST detail and the console."""
    state = GroupState.load(group.sync_state)
    config = ReaderGroupConfig.from_json(group.configuration)
    return {
        "generation": group.generation,
        "configuration": config.to_json(),
        "readers": [
            {"readerId": r, "lastSeenMs": v["seen"], "segments": v["segments"]}
            for r, v in sorted(state.readers.items())
        ],
        "unassignedSegments": state.unassigned,
        "futureSegments": state.future,
        "checkpoints": [
            {
                "checkpointName": c["name"],
                "complete": not c["pending"],
                "pendingReaders": sorted(c["pending"]),
            }
            for c in state.checkpoints
        ],
        "finished": state.finished(),
    }
