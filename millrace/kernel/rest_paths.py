"""The REST API's paths, as the client side spells them: once, here (kernel: the command line
imports it without the SDK).

Every caller on the client side (the SDK's classes, the command line, the Spark bridge) names a
path through these functions and hands it to ``AsyncControllerClient.call`` (under ``/v1``, or
``/registry`` for the schema registry's paths). The server's routes are in
``controller_app/api/urls.py``; ``tests/test_tidy.py`` fails on a REST path spelled anywhere else
on the client side.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, urlencode

__all__ = [
    "REGISTRY",
    "cluster",
    "kafka_groups",
    "kvtable",
    "kvtable_entries",
    "kvtable_entry",
    "kvtable_token",
    "kvtables",
    "metrics_targets",
    "reader_group",
    "reader_group_checkpoint",
    "reader_group_checkpoints",
    "reader_group_lag",
    "reader_group_reader",
    "reader_group_readers",
    "reader_group_reset",
    "reader_group_subscriber_cuts",
    "reader_groups",
    "registry_compatibility",
    "registry_config",
    "registry_schema",
    "registry_subject",
    "registry_subjects",
    "registry_version",
    "registry_versions",
    "scope",
    "scope_quota",
    "scopes",
    "segment",
    "segment_successors",
    "segment_uri",
    "segments",
    "segments_between",
    "stream",
    "stream_cut_next",
    "stream_cut_validity",
    "stream_info",
    "stream_scale",
    "stream_schema",
    "stream_state",
    "stream_token",
    "stream_truncate",
    "streams",
    "transaction",
    "transactions",
    "transactions_commit",
    "watermark",
    "writer_marks",
]

#: The schema registry's API prefix (``call(..., api=REGISTRY)``).
REGISTRY = "/registry"


def _query(path: str, query: Mapping[str, object] | None) -> str:
    given = {k: v for k, v in (query or {}).items() if v is not None}
    return f"{path}?{urlencode(given)}" if given else path


# -- the cluster ----------------------------------------------------------------------------------


def cluster() -> str:
    return "/cluster"


def kafka_groups() -> str:
    return "/kafka/groups"


def metrics_targets() -> str:
    """Prometheus's HTTP service discovery (under ``/v1``)."""
    return "/metrics/targets"


# -- scopes and streams ---------------------------------------------------------------------------


def scopes() -> str:
    return "/scopes"


def scope(name: str) -> str:
    return f"/scopes/{name}"


def scope_quota(name: str) -> str:
    return f"{scope(name)}/quota"


def streams(scope_name: str) -> str:
    return f"{scope(scope_name)}/streams"


def stream(scope_name: str, name: str) -> str:
    return f"{streams(scope_name)}/{name}"


def stream_info(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/info"


def stream_state(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/state"


def stream_schema(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/schema"


def stream_scale(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/scale"


def stream_token(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/delegation-token"


def stream_cut_next(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/stream-cut/next"


def writer_marks(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/writer-marks"


def watermark(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/watermark"


def segments(scope_name: str, name: str, *, at: str | None = None) -> str:
    """The stream's current segments, or with ``at`` (``head``) those of that cut."""
    return _query(f"{stream(scope_name, name)}/segments", {"at": at})


def stream_cut_validity(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/stream-cut/validity"


def stream_truncate(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/truncate"


def segments_between(scope_name: str, name: str) -> str:
    return f"{stream(scope_name, name)}/segments-between"


def segment(scope_name: str, name: str, segment_id: int) -> str:
    return f"{stream(scope_name, name)}/segments/{segment_id}"


def segment_successors(scope_name: str, name: str, segment_id: int) -> str:
    return f"{segment(scope_name, name, segment_id)}/successors"


def segment_uri(scope_name: str, name: str, segment_id: int) -> str:
    return f"{segment(scope_name, name, segment_id)}/uri"


def transactions(scope_name: str, name: str, *, writer_id: str | None = None) -> str:
    return _query(f"{stream(scope_name, name)}/transactions", {"writerId": writer_id})


def transactions_commit(scope_name: str, name: str) -> str:
    """Several transactions committed in one request."""
    return f"{stream(scope_name, name)}/transactions/commit"


def transaction(scope_name: str, name: str, txn_id: object, action: str = "") -> str:
    """A transaction, or with ``action`` (``ping``, ``commit``, ``abort``) that call on it."""
    path = f"{stream(scope_name, name)}/transactions/{txn_id}"
    return f"{path}/{action}" if action else path


# -- reader groups ---------------------------------------------------------------------------------


def reader_groups(scope_name: str) -> str:
    return f"{scope(scope_name)}/readergroups"


def reader_group(scope_name: str, name: str) -> str:
    return f"{reader_groups(scope_name)}/{name}"


def reader_group_lag(scope_name: str, name: str) -> str:
    return f"{reader_group(scope_name, name)}/lag"


def reader_group_reset(scope_name: str, name: str) -> str:
    return f"{reader_group(scope_name, name)}/reset"


def reader_group_checkpoints(scope_name: str, name: str) -> str:
    return f"{reader_group(scope_name, name)}/checkpoints"


def reader_group_checkpoint(scope_name: str, name: str, checkpoint: str) -> str:
    return f"{reader_group_checkpoints(scope_name, name)}/{checkpoint}"


def reader_group_readers(scope_name: str, name: str) -> str:
    return f"{reader_group(scope_name, name)}/readers"


def reader_group_reader(scope_name: str, name: str, reader: str, action: str = "") -> str:
    """A reader of the group, or with ``action`` (``sync``) that call of it."""
    path = f"{reader_group_readers(scope_name, name)}/{reader}"
    return f"{path}/{action}" if action else path


def reader_group_subscriber_cuts(scope_name: str, name: str) -> str:
    return f"{reader_group(scope_name, name)}/subscriber-stream-cuts"


# -- key-value tables ------------------------------------------------------------------------------


def kvtables(scope_name: str) -> str:
    return f"{scope(scope_name)}/kvtables"


def kvtable(scope_name: str, name: str) -> str:
    return f"{kvtables(scope_name)}/{name}"


def kvtable_token(scope_name: str, name: str) -> str:
    return f"{kvtable(scope_name, name)}/delegation-token"


def kvtable_entries(scope_name: str, name: str, query: Mapping[str, object] | None = None) -> str:
    return _query(f"{kvtable(scope_name, name)}/entries", query)


def kvtable_entry(
    scope_name: str, name: str, key: str, query: Mapping[str, object] | None = None
) -> str:
    """An entry by its key, quoted (a key may hold any character)."""
    return _query(f"{kvtable(scope_name, name)}/entries/{quote(key, safe='')}", query)


# -- the schema registry (under ``REGISTRY``) -----------------------------------------------------


def registry_subjects(query: Mapping[str, object] | None = None) -> str:
    return _query("/subjects", query)


def registry_subject(subject: str, query: Mapping[str, object] | None = None) -> str:
    return _query(f"/subjects/{quote(subject, safe='')}", query)


def registry_versions(subject: str) -> str:
    return f"/subjects/{quote(subject, safe='')}/versions"


def registry_version(
    subject: str, version: object, query: Mapping[str, object] | None = None
) -> str:
    return _query(f"{registry_versions(subject)}/{quote(str(version), safe='')}", query)


def registry_schema(schema_id: object) -> str:
    return f"/schemas/ids/{schema_id}"


def registry_compatibility(subject: str, version: object | None = None) -> str:
    """Whether a schema could be registered under the subject (after ``version``, or all)."""
    where = registry_versions(subject) if version is None else registry_version(subject, version)
    return f"/compatibility{where}?verbose=true"


def registry_config(subject: str | None = None, query: Mapping[str, object] | None = None) -> str:
    return _query(f"/config/{quote(subject, safe='')}" if subject else "/config", query)
