"""Key-value tables: create, list, configuration, delete; and their entries for the REST API.

Create runs in the caller, as stream creation does: the row is written CREATING, the table
segments of its partitions are created on the nodes that serve their containers, and it
becomes ACTIVE. A crash in between leaves it CREATING; the same create again finishes it.
Delete records DELETING, deletes the table segments whatever they hold, then the row; a delete
of a table left DELETING finishes it. Entry calls go to the partition's table segment through
the segment store port (``ports.TableStorePort``), with the key checked against the table's
key lengths.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.db import IntegrityError, transaction

from controller_app import selectors as sel
from controller_app.choices import KvtState
from controller_app.errors import (
    AlreadyExistsError,
    BadKeyVersionError,
    ConflictError,
    InvalidArgumentError,
    KeyNotFoundError,
    KvtNotFoundError,
    PreconditionFailedError,
)
from controller_app.models import KeyValueTable, transition
from controller_app.ports import (
    NO_VERSION,
    NOT_EXISTS,
    SegmentStorePort,
    StoredEntry,
    TableStorePort,
)
from controller_app.workflows.common import step
from controller_app.workflows.config import check_name
from controller_app.workflows.room import check_room
from controller_app.workflows.scopes import get_scope
from millrace.kernel.kvt import KvtConfig, KvtError, PartitionWalk, check_value

__all__ = [
    "NOT_EXISTS",
    "NO_VERSION",
    "create_kvtable",
    "delete_kvtable",
    "get_kvtable",
    "list_kvtables",
]


# -- the table --------------------------------------------------------------------------------


def create_kvtable(
    store: SegmentStorePort, scope: str, name: str, config: KvtConfig
) -> KeyValueTable:
    """Create ``scope/name`` with ``config`` and its table segments; return it ACTIVE. A retry
    of the same create finishes a half-done one; a table that exists otherwise is
    ``AlreadyExistsError``."""
    check_name("key-value table", name)
    if name.startswith(sel.INTERNAL_PREFIX):
        raise InvalidArgumentError(
            f"key-value table name {name!r} must not start with {sel.INTERNAL_PREFIX!r}"
        )
    with _invalid():
        config.validate()
    scope_row = get_scope(scope)
    try:
        with transaction.atomic():
            existing = KeyValueTable.objects.filter(scope=scope_row, name=name).first()
            if existing is None:
                check_room(scope, tables=1)
                row = KeyValueTable.objects.create(
                    scope=scope_row, name=name, state=KvtState.CREATING,
                    partitions=config.partitions, primary_key_length=config.primary_key_length,
                    secondary_key_length=config.secondary_key_length, placement=config.placement,
                )  # fmt: skip
            elif existing.state == KvtState.CREATING and existing.config == config:
                row = existing
            else:
                raise AlreadyExistsError(f"key-value table {scope}/{name} exists already")
    except IntegrityError:  # a concurrent create won the race
        raise AlreadyExistsError(f"key-value table {scope}/{name} exists already") from None
    for segment in row.segment_names():
        store.create_table(segment)
    step("kvt.create.segments")
    with contextlib.suppress(ConflictError):  # another run finished it
        transition(row, KvtState.CREATING, KvtState.ACTIVE)
    return get_kvtable(scope, name)


def get_kvtable(scope: str, name: str) -> KeyValueTable:
    """The table ``scope/name`` (scope joined), or ``KvtNotFoundError``."""
    row = KeyValueTable.objects.select_related("scope").filter(scope__name=scope, name=name).first()
    if row is None:
        get_scope(scope)  # (a missing scope says so)
        raise KvtNotFoundError(f"key-value table {scope}/{name} does not exist")
    return row


def active_kvtable(scope: str, name: str) -> KeyValueTable:
    row = get_kvtable(scope, name)
    if row.state != KvtState.ACTIVE:
        raise PreconditionFailedError(f"key-value table {scope}/{name} is {row.state.lower()}")
    return row


def list_kvtables(scope: str) -> list[KeyValueTable]:
    """The scope's tables, by name (those being created or deleted too)."""
    return list(
        KeyValueTable.objects.select_related("scope")
        .filter(scope=get_scope(scope))
        .order_by("name")
    )


def delete_kvtable(store: SegmentStorePort, scope: str, name: str) -> None:
    """Delete the table and every entry in it."""
    row = get_kvtable(scope, name)
    if row.state == KvtState.CREATING:
        raise PreconditionFailedError(f"key-value table {scope}/{name} is being created")
    if row.state == KvtState.ACTIVE:
        try:
            transition(row, KvtState.ACTIVE, KvtState.DELETING)
        except ConflictError:
            row = get_kvtable(scope, name)  # another delete moved it first: finish with it
    for segment in row.segment_names():
        store.delete_table(segment)
    step("kvt.delete.segments")
    KeyValueTable.objects.filter(pk=row.pk, state=KvtState.DELETING).delete()


# -- entries (the REST API's) -----------------------------------------------------------------


def _segment(row: KeyValueTable, key: bytes) -> str:
    primary, _ = row.config.split(key)
    return row.segment_names()[row.config.partition(primary)]


def _checked(row: KeyValueTable, key: bytes) -> bytes:
    with _invalid():
        return row.config.whole_key(key)


@contextlib.contextmanager
def _invalid() -> Iterator[None]:
    """A key, value, token or configuration the table refuses, as the controller's error."""
    try:
        yield
    except KvtError as exc:
        raise InvalidArgumentError(str(exc)) from None


def get_entry(store: TableStorePort, scope: str, name: str, key: bytes) -> StoredEntry:
    """The entry of ``key`` (primary and secondary key together), or ``KeyNotFoundError``."""
    row = active_kvtable(scope, name)
    key = _checked(row, key)
    found = store.table_get(_segment(row, key), key)
    if found is None:
        raise KeyNotFoundError(f"{scope}/{name} has no key {key!r}")
    return found


def put_entry(
    store: TableStorePort,
    scope: str,
    name: str,
    key: bytes,
    value: bytes,
    version: int = NO_VERSION,
) -> int:
    """Put ``value`` at ``key`` if its version is ``version`` (``NO_VERSION``: whatever it is;
    ``NOT_EXISTS``: only if absent); the entry's new version."""
    row = active_kvtable(scope, name)
    key = _checked(row, key)
    with _invalid():
        check_value(value)
    with _conditions(scope, name, key, absent=version == NOT_EXISTS):
        return store.table_put(_segment(row, key), key, value, version)


def remove_entry(
    store: TableStorePort, scope: str, name: str, key: bytes, version: int = NO_VERSION
) -> None:
    """Remove ``key`` if its version is ``version`` (``NO_VERSION``: whatever it is; an absent
    key is then no error)."""
    row = active_kvtable(scope, name)
    key = _checked(row, key)
    with _conditions(scope, name, key):
        store.table_remove(_segment(row, key), key, version)


def list_entries(
    store: TableStorePort,
    scope: str,
    name: str,
    *,
    limit: int,
    token: str = "",
    prefix: bytes = b"",
) -> tuple[list[StoredEntry], str]:
    """Up to ``limit`` entries in partition then key order, whose keys start with ``prefix``,
    after the continuation ``token`` (empty: from the start); the token to go on with (empty
    when all were listed)."""
    row = active_kvtable(scope, name)
    segments = row.segment_names()
    with _invalid():
        walk = PartitionWalk(range(row.partitions), token, row.partitions, limit)
    while (asked := walk.ask()) is not None:
        partition, inner, count = asked
        page = store.table_page(segments[partition], count, inner, prefix)
        walk.got(page.entries, page.token)
    return walk.found, walk.next_token()


@contextlib.contextmanager
def _conditions(scope: str, name: str, key: bytes, *, absent: bool = False) -> Any:
    """A refused condition as the controller's errors (``absent``: the condition was that the
    key is absent)."""
    try:
        yield
    except BadKeyVersionError:
        said = "exists already" if absent else "is not at the expected version"
        raise BadKeyVersionError(f"{scope}/{name}: key {key!r} {said}") from None
    except KeyNotFoundError:
        raise KeyNotFoundError(f"{scope}/{name} has no key {key!r}") from None
