"""Key-value tables from Python, in the shape of Pravega's ``KeyValueTableManager`` and
``KeyValueTable``:

    manager = KeyValueTableManager("http://127.0.0.1:9091", token=token)
    manager.create_kvt("demo", "users", partitions=4, primary_key_length=8)
    table = manager.open("demo", "users")
    version = table.put(b"user-001", b'{"name": "Ada"}')
    table.put(b"user-001", b'{"name": "Ada L."}', version=version)  # only if unchanged since
    table.insert(b"user-002", b"{}")                                 # only if absent
    entry = table.get(b"user-001")                                   # KvtEntry or None
    for entry in table.entries(prefix=b"user-"):
        ...

A key is a primary key of exactly the table's ``primary_key_length`` bytes and a secondary key
of exactly ``secondary_key_length`` bytes (``b""`` when the table has none). Every key of one
primary key is in one partition (one table segment), so ``update`` of several of them is all
or nothing. Each change is durable when it returns; a version is the entry's position in its
partition and grows with each change. A conditional change that finds another version raises
``BadKeyVersionError``; one that expects a key that is absent ``KeyNotFoundError``.

The node serving a partition may change (a container moves in a cluster): a call that the node
refuses as not its own (WrongHost), or that could not be sent, asks the controller where the
partition is now and goes again, for up to ``FOLLOW_SECONDS``. A change whose connection is
lost after it was sent is not sent again (it may have been made): ``ConnectionLostError``.

``AsyncKeyValueTableManager`` and ``AsyncKeyValueTable`` are the same on asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from millrace.client import errors
from millrace.client.controller import FOLLOW_SECONDS, AsyncControllerClient, ControllerError
from millrace.client.transport.direct import DirectConnection
from millrace.client.transport.io_loop import IoLoop
from millrace.client.transport.pool import SegmentStorePool
from millrace.client.transport.table_calls import (
    NO_VERSION,
    NOT_EXISTS,
    TableEntry,
    TablePage,
    TableRequest,
    entries_request,
    get_request,
    remove_request,
    update_request,
)
from millrace.kernel import rest_paths as paths
from millrace.kernel.kvt import (
    KvtConfig,
    KvtError,
    PartitionWalk,
    check_value,
    kvt_segment_name,
)

__all__ = [
    "AsyncKeyValueTable",
    "AsyncKeyValueTableManager",
    "BadKeyVersionError",
    "Insert",
    "KeyNotFoundError",
    "KeyValueTable",
    "KeyValueTableManager",
    "KvtEntry",
    "KvtError",
    "Put",
    "Remove",
]

T = TypeVar("T")
#: The pause before asking again where a partition is served.
RELOCATE_PAUSE_SECONDS = 0.2
#: Entries asked for per page while iterating.
PAGE_SIZE = 100


class BadKeyVersionError(Exception):
    """A conditional change found the key at another version (or present, for ``insert``)."""


class KeyNotFoundError(Exception):
    """A conditional change expected a key that is absent."""


@dataclasses.dataclass(frozen=True, slots=True)
class KvtEntry:
    primary_key: bytes
    secondary_key: bytes
    value: bytes
    version: int


@dataclasses.dataclass(frozen=True, slots=True)
class Put:
    """Set the value (``version``: only if the key is at that version; None: whatever)."""

    primary_key: bytes
    value: bytes
    secondary_key: bytes = b""
    version: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Insert:
    """Set the value only if the key is absent."""

    primary_key: bytes
    value: bytes
    secondary_key: bytes = b""


@dataclasses.dataclass(frozen=True, slots=True)
class Remove:
    """Remove the key (``version``: only if it is at that version; None: if present at all)."""

    primary_key: bytes
    secondary_key: bytes = b""
    version: int | None = None


Change = Put | Insert | Remove
_AWAY = (errors.ContainerOfflineError, OSError)


class AsyncKeyValueTableManager:
    """Create, list, describe and delete key-value tables; open one (asyncio)."""

    def __init__(self, controller_uri: str, token: str = "", **tls: Any) -> None:
        self.controller = AsyncControllerClient(controller_uri, token, **tls)

    async def create_kvt(
        self, scope: str, name: str, *, partitions: int = 1, primary_key_length: int,
        secondary_key_length: int = 0,
    ) -> bool:  # fmt: skip
        """Create ``scope/name``; ``False`` if it existed."""
        KvtConfig(partitions, primary_key_length, secondary_key_length).validate()
        body = {
            "kvtName": name,
            "partitionCount": partitions,
            "primaryKeyLength": primary_key_length,
            "secondaryKeyLength": secondary_key_length,
        }
        return await self.controller.create(paths.kvtables(scope), body)

    async def list_kvts(self, scope: str) -> list[str]:
        found = await self.controller.call("GET", paths.kvtables(scope))
        return [str(item["kvtName"]) for item in found["kvtables"]]

    async def kvt_info(self, scope: str, name: str) -> dict[str, Any]:
        """The table as the REST API describes it (configuration, state, partitions)."""
        found: dict[str, Any] = await self.controller.call("GET", paths.kvtable(scope, name))
        return found

    async def delete_kvt(self, scope: str, name: str) -> None:
        await self.controller.call("DELETE", paths.kvtable(scope, name))

    async def open(self, scope: str, name: str) -> AsyncKeyValueTable:
        return await AsyncKeyValueTable.open(self.controller, scope, name)

    async def close(self) -> None:
        await self.controller.close()


class AsyncKeyValueTable:
    """One key-value table's entries (see the module docstring). ``await
    AsyncKeyValueTable.open(controller, scope, name)``."""

    def __init__(self, controller: AsyncControllerClient, scope: str, name: str) -> None:
        self.controller, self.scope, self.name = controller, scope, name
        self.config = KvtConfig(1, 1)
        #: Where each partition is served (asked again when one moves).
        self.nodes: list[tuple[str, int]] = []
        #: Asks the controller for a delegation token of the table's segments.
        self.token: Callable[[], Coroutine[Any, Any, str]] | None = None
        self._pool: SegmentStorePool | None = None

    @classmethod
    async def open(
        cls, controller: AsyncControllerClient, scope: str, name: str
    ) -> AsyncKeyValueTable:
        table = cls(controller, scope, name)
        await table._describe()
        path = paths.kvtable_token(scope, name)

        async def token() -> str:
            return str((await controller.call("POST", path, changes=False))["token"])

        table.token = token
        table._pool = SegmentStorePool(
            delegation_token=await token(), token_refresh=token, ssl=controller.tls
        )
        return table

    @property
    def delegation_token(self) -> str:
        """The delegation token the table's connections present now."""
        return self._pool.delegation_token if self._pool is not None else ""

    async def describe(self) -> None:
        """Ask the controller for the table's configuration and where its partitions are."""
        await self._describe()

    async def _describe(self) -> None:
        found = await self.controller.call("GET", paths.kvtable(self.scope, self.name))
        if found["state"] != "ACTIVE":
            raise KvtError(f"key-value table {self.scope}/{self.name} is {found['state'].lower()}")
        self.config = KvtConfig(
            found["partitionCount"],
            found["primaryKeyLength"],
            found["secondaryKeyLength"],
            found.get("placement", "millrace-1"),  # (a controller from before placements)
        )
        self.nodes = [(str(s["host"]), int(s["port"])) for s in found["segments"]]

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    # -- routing ------------------------------------------------------------------------------

    def _segment(self, partition: int) -> str:
        return kvt_segment_name(self.scope, self.name, partition)

    async def _call(
        self, partition: int, make: Callable[[str], TableRequest[T]], *, changes: bool
    ) -> T:
        """``make(segment)``'s request on the node serving ``partition``, following it when it
        moves (see the module docstring)."""
        assert self._pool is not None, "use AsyncKeyValueTable.open"
        loop = asyncio.get_running_loop()
        follow = _Follow(changes, loop.time())
        while True:
            sent = False
            try:
                client = await self._pool.get(*self.nodes[partition])
                sent = True
                with _refusals():
                    return await client.tables.run(make(self._segment(partition)))
            except (errors.ConnectionLostError, *_AWAY) as exc:
                if not follow.again(exc, sent, loop.time()):
                    raise
            await asyncio.sleep(RELOCATE_PAUSE_SECONDS)
            with contextlib.suppress(ControllerError, OSError):  # (away: the next failure asks)
                await self._describe()

    def _key(self, primary: bytes, secondary: bytes) -> tuple[int, bytes]:
        return self.config.partition(primary), self.config.key(primary, secondary)

    def entry_of(self, entry: TableEntry) -> KvtEntry:
        primary, secondary = self.config.split(entry.key)
        return KvtEntry(primary, secondary, entry.value, entry.version)

    # -- reads --------------------------------------------------------------------------------

    async def get(self, primary_key: bytes, secondary_key: bytes = b"") -> KvtEntry | None:
        return (await self.get_all([(primary_key, secondary_key)]))[0]

    async def get_all(self, keys: Sequence[bytes | tuple[bytes, bytes]]) -> list[KvtEntry | None]:
        """The entries of ``keys`` (primary keys, or ``(primary, secondary)`` pairs), in order;
        None for an absent one. One request per partition, all at once."""
        plan = self.plan_get(keys)
        found: list[KvtEntry | None] = [None] * len(plan.keys)

        async def read(partition: int, places: list[int]) -> None:
            got = await self._call(partition, plan.request(places), changes=False)
            plan.place(found, places, got)

        await asyncio.gather(*(read(p, places) for p, places in plan.partitions.items()))
        return found

    def plan_get(self, keys: Sequence[bytes | tuple[bytes, bytes]]) -> _GetPlan:
        wanted = [self._key(*((k, b"") if isinstance(k, bytes) else k)) for k in keys]
        plan = _GetPlan(self, [key for _, key in wanted])
        for i, (partition, _) in enumerate(wanted):
            plan.partitions.setdefault(partition, []).append(i)
        return plan

    async def exists(self, primary_key: bytes, secondary_key: bytes = b"") -> bool:
        return await self.get(primary_key, secondary_key) is not None

    # -- changes ------------------------------------------------------------------------------

    async def put(
        self, primary_key: bytes, value: bytes, secondary_key: bytes = b"",
        version: int | None = None,
    ) -> int:  # fmt: skip
        """Set ``value``; only if the key is at ``version`` when one is given. The new
        version."""
        return (await self.update([Put(primary_key, value, secondary_key, version)]))[0]

    async def insert(self, primary_key: bytes, value: bytes, secondary_key: bytes = b"") -> int:
        """Set ``value`` only if the key is absent (``BadKeyVersionError`` if present)."""
        return (await self.update([Insert(primary_key, value, secondary_key)]))[0]

    async def remove(
        self, primary_key: bytes, secondary_key: bytes = b"", version: int | None = None
    ) -> None:
        """Remove the key; only if it is at ``version`` when one is given."""
        await self.update([Remove(primary_key, secondary_key, version)])

    async def update(self, changes: Sequence[Change]) -> list[int]:
        """Apply ``changes`` of keys of one primary key, all or none: puts and inserts (their
        new versions) or removes (an empty list), not both, as in Pravega."""
        if not changes:
            return []
        partition, make = self.plan_update(changes)
        return await self._call(partition, make, changes=True)

    def plan_update(
        self, changes: Sequence[Change]
    ) -> tuple[int, Callable[[str], TableRequest[list[int]]]]:
        """The partition of ``changes`` and the request that makes them (see ``update``)."""
        primaries = {c.primary_key for c in changes}
        if len(primaries) != 1:
            raise KvtError("the changes of one update must all be of one primary key")
        removes = [c for c in changes if isinstance(c, Remove)]
        if removes and len(removes) != len(changes):
            raise KvtError("an update either puts (and inserts) or removes, not both")
        partition = self.config.partition(primaries.pop())
        if removes:
            keys = [(self.config.key(c.primary_key, c.secondary_key), _version(c.version))
                    for c in removes]  # fmt: skip
            return partition, lambda segment: _no_versions(remove_request(segment, keys))
        entries = [
            (self.config.key(c.primary_key, c.secondary_key), check_value(c.value),
             NOT_EXISTS if isinstance(c, Insert) else _version(c.version))
            for c in changes if not isinstance(c, Remove)
        ]  # fmt: skip
        return partition, lambda segment: update_request(segment, entries)

    # -- iteration ----------------------------------------------------------------------------

    async def page(
        self, limit: int = PAGE_SIZE, token: str = "", *, keys_only: bool = False,
        primary_key: bytes | None = None, prefix: bytes = b"",
        from_key: bytes | None = None, to_key: bytes | None = None,
    ) -> tuple[list[KvtEntry], str]:  # fmt: skip
        """Up to ``limit`` entries (values empty with ``keys_only``) in partition, then key
        order, after ``token`` (empty: the start), and the token of the next page (empty after
        the last). All entries, or those of one ``primary_key`` (then ``prefix``,
        ``from_key`` and ``to_key`` bound its secondary keys), or of primary keys starting with
        ``prefix`` or from ``from_key`` to ``to_key`` (both included)."""
        walk = self.plan_page(limit, token, keys_only, primary_key, prefix, from_key, to_key)
        while (asked := walk.ask()) is not None:
            got: TablePage = await self._call(asked[0], walk.request(asked), changes=False)
            walk.got([self.entry_of(e) for e in got.entries], got.token)
        return walk.found, walk.next_token()

    def plan_page(
        self, limit: int, token: str, keys_only: bool, primary: bytes | None, prefix: bytes,
        low: bytes | None, high: bytes | None,
    ) -> _PageWalk:  # fmt: skip
        """The walk of one ``page`` (the blocking table drives it from its own thread)."""
        partitions, bounds = self._bounds(primary, prefix, low, high)
        return _PageWalk(partitions, token, self.config.partitions, limit, keys_only, bounds)

    def _bounds(
        self, primary: bytes | None, prefix: bytes, low: bytes | None, high: bytes | None
    ) -> tuple[list[int], tuple[bytes, bytes, bytes]]:
        """The partitions to visit and the key bounds within each: (prefix, from, to)."""
        secondary_length = self.config.secondary_key_length
        if primary is not None:
            key = self.config.key(primary, b"\0" * secondary_length)[: len(primary)]  # (checked)
            high_key = key + _padded(high, secondary_length, 255) if high else b""
            bounds = (key + prefix, key + _padded(low or b"", secondary_length, 0), high_key)
            return [self.config.partition(primary)], bounds
        length = self.config.primary_key_length
        high_key = _padded(high, length, 255) + b"\xff" * secondary_length if high else b""
        bounds = (prefix, _padded(low or b"", length, 0), high_key)
        return list(range(self.config.partitions)), bounds

    async def entries(self, **where: Any) -> AsyncIterator[KvtEntry]:
        """Every entry ``page`` would give (same filters), a page at a time; a key present for
        the whole iteration is given exactly once, whatever changes meanwhile."""
        token = ""
        while True:
            found, token = await self.page(PAGE_SIZE, token, **where)
            for entry in found:
                yield entry
            if not token:
                return

    async def keys(self, **where: Any) -> AsyncIterator[KvtEntry]:
        """As ``entries``, without the values."""
        async for entry in self.entries(keys_only=True, **where):
            yield entry


class _PageWalk(PartitionWalk):
    """``PartitionWalk`` with the read each step makes (``entries_request``, with the page's
    filters)."""

    def __init__(
        self, partitions: list[int], token: str, count: int, limit: int, keys_only: bool,
        bounds: tuple[bytes, bytes, bytes],
    ) -> None:  # fmt: skip
        super().__init__(partitions, token, count, limit)
        self.keys_only, self.bounds = keys_only, bounds

    def request(self, asked: tuple[int, bytes, int]) -> Callable[[str], TableRequest[TablePage]]:
        _, start, count = asked
        return functools.partial(
            entries_request, count=count, continuation=start, keys_only=self.keys_only,
            prefix=self.bounds[0], from_key=self.bounds[1], to_key=self.bounds[2],
        )  # fmt: skip


class _Follow:
    """Whether a call that failed goes again, the same rule for the async and the blocking
    table: for up to ``FOLLOW_SECONDS``, and never a change whose request may have reached the
    node (a lost connection after sending: it may have been made)."""

    def __init__(self, changes: bool, now: float) -> None:
        self.changes, self.deadline = changes, now + FOLLOW_SECONDS

    def again(self, exc: BaseException, sent: bool, now: float) -> bool:
        if now > self.deadline:
            return False
        return not (self.changes and sent and isinstance(exc, errors.ConnectionLostError))


class _GetPlan:
    """The keys a ``get_all`` asks for, by partition, and how its answers are placed."""

    def __init__(self, table: AsyncKeyValueTable, keys: list[bytes]) -> None:
        self.table, self.keys = table, keys
        self.partitions: dict[int, list[int]] = {}

    def request(self, places: list[int]) -> Callable[[str], TableRequest[list[TableEntry | None]]]:
        return lambda segment: get_request(segment, [self.keys[i] for i in places])

    def place(
        self, found: list[KvtEntry | None], places: list[int], got: list[TableEntry | None]
    ) -> None:
        for i, entry in zip(places, got, strict=True):
            found[i] = None if entry is None else self.table.entry_of(entry)


def _no_versions(request: TableRequest[None]) -> TableRequest[list[int]]:
    return TableRequest(request.make, request.expected, lambda reply: [])


def _version(version: int | None) -> int:
    if version is None:
        return NO_VERSION
    if type(version) is not int or version < 0:
        raise KvtError(f"a version is an integer >= 0 (as a change returned it), not {version!r}")
    return version


def _padded(key: bytes, length: int, fill: int) -> bytes:
    if len(key) > length:
        raise KvtError(f"a bound of {len(key)} bytes is longer than the key ({length})")
    return key + bytes([fill]) * (length - len(key))


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The wire's refusals of a condition as this module's errors."""
    try:
        yield
    except errors.TableKeyBadVersionError as exc:
        said = (
            "exists already"
            if "expected it absent" in str(exc)
            else "is not at the expected version"
        )
        raise BadKeyVersionError(f"the key {said} ({exc})") from None
    except errors.TableKeyDoesNotExistError as exc:
        raise KeyNotFoundError(f"the key does not exist ({exc})") from None


# -- blocking -------------------------------------------------------------------------------


class KeyValueTableManager:
    """Blocking facade of ``AsyncKeyValueTableManager`` (TLS options as ``StreamManager``). A
    context manager: closing it closes the tables opened through it."""

    def __init__(self, controller_uri: str, token: str = "", **tls: Any) -> None:
        self._loop = IoLoop(name="millrace-kvt")
        self._async = self._loop.run(_make(controller_uri, token, tls))
        self._loop.on_exit(self, self._async.close)

    def create_kvt(self, scope: str, name: str, **config: Any) -> bool:
        """As ``AsyncKeyValueTableManager.create_kvt``."""
        return self._loop.run(self._async.create_kvt(scope, name, **config))

    def list_kvts(self, scope: str) -> list[str]:
        return self._loop.run(self._async.list_kvts(scope))

    def kvt_info(self, scope: str, name: str) -> dict[str, Any]:
        return self._loop.run(self._async.kvt_info(scope, name))

    def delete_kvt(self, scope: str, name: str) -> None:
        self._loop.run(self._async.delete_kvt(scope, name))

    def open(self, scope: str, name: str) -> KeyValueTable:
        return KeyValueTable(self._loop, self._loop.run(self._async.open(scope, name)))

    def close(self) -> None:
        self._loop.shut(self, self._async.close)

    def __enter__(self) -> KeyValueTableManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _make(uri: str, token: str, tls: dict[str, Any]) -> AsyncKeyValueTableManager:
    return AsyncKeyValueTableManager(uri, token, **tls)


class KeyValueTable:
    """Blocking facade of ``AsyncKeyValueTable``: the same methods, each returning its
    answer; ``entries`` and ``keys`` are iterators. The calls of one key or one update go from
    the caller's thread straight to the partition's node over a blocking connection
    (``DirectConnection``): one round trip, no hop to the I/O thread. Safe to share between
    threads (each connection serves one call at a time)."""

    def __init__(self, loop: IoLoop, table: AsyncKeyValueTable) -> None:
        self._loop, self._table = loop, table
        self.scope, self.name, self.config = table.scope, table.name, table.config
        self._connections: dict[tuple[str, int], DirectConnection] = {}
        self._lock = threading.Lock()
        self._token = table.delegation_token
        loop.on_exit(self, table.close)

    # -- direct calls ----------------------------------------------------------------------

    def _connection(self, node: tuple[str, int]) -> DirectConnection:
        with self._lock:
            found = self._connections.get(node)
            if found is None or found.closed:
                found = DirectConnection(
                    *node, tls=self._table.controller.tls, token=self._token,
                    token_refresh=self._renew_token,
                )  # fmt: skip
                self._connections[node] = found
            return found

    def _renew_token(self) -> str:
        assert self._table.token is not None
        self._token = self._loop.run(self._table.token())
        return self._token

    def _call(self, partition: int, make: Callable[[str], TableRequest[T]], *, changes: bool) -> T:
        """As ``AsyncKeyValueTable._call``, from this thread."""
        follow = _Follow(changes, time.monotonic())
        segment = kvt_segment_name(self.scope, self.name, partition)
        while True:
            sent = False
            try:
                connection = self._connection(self._table.nodes[partition])
                sent = True
                with _refusals():
                    return connection.run(make(segment))
            except (errors.ConnectionLostError, *_AWAY) as exc:
                if not follow.again(exc, sent, time.monotonic()):
                    raise
            time.sleep(RELOCATE_PAUSE_SECONDS)
            with contextlib.suppress(ControllerError, OSError):  # (away: the next failure asks)
                self._loop.run(self._table.describe())

    def get(self, primary_key: bytes, secondary_key: bytes = b"") -> KvtEntry | None:
        return self.get_all([(primary_key, secondary_key)])[0]

    def get_all(self, keys: Sequence[bytes | tuple[bytes, bytes]]) -> list[KvtEntry | None]:
        """As ``AsyncKeyValueTable.get_all`` (a partition after the other)."""
        plan = self._table.plan_get(keys)
        found: list[KvtEntry | None] = [None] * len(plan.keys)
        for partition, places in plan.partitions.items():
            plan.place(found, places, self._call(partition, plan.request(places), changes=False))
        return found

    def exists(self, primary_key: bytes, secondary_key: bytes = b"") -> bool:
        return self.get(primary_key, secondary_key) is not None

    def put(
        self, primary_key: bytes, value: bytes, secondary_key: bytes = b"",
        version: int | None = None,
    ) -> int:  # fmt: skip
        return self.update([Put(primary_key, value, secondary_key, version)])[0]

    def insert(self, primary_key: bytes, value: bytes, secondary_key: bytes = b"") -> int:
        return self.update([Insert(primary_key, value, secondary_key)])[0]

    def remove(
        self, primary_key: bytes, secondary_key: bytes = b"", version: int | None = None
    ) -> None:
        self.update([Remove(primary_key, secondary_key, version)])

    def update(self, changes: Sequence[Change]) -> list[int]:
        if not changes:
            return []
        partition, make = self._table.plan_update(changes)
        return self._call(partition, make, changes=True)

    # -- iteration (a page at a time) -------------------------------------------------------

    def page(
        self, limit: int = PAGE_SIZE, token: str = "", *, keys_only: bool = False,
        primary_key: bytes | None = None, prefix: bytes = b"",
        from_key: bytes | None = None, to_key: bytes | None = None,
    ) -> tuple[list[KvtEntry], str]:  # fmt: skip
        """As ``AsyncKeyValueTable.page``, from this thread."""
        walk = self._table.plan_page(limit, token, keys_only, primary_key, prefix, from_key,
                                     to_key)  # fmt: skip
        while (asked := walk.ask()) is not None:
            got = self._call(asked[0], walk.request(asked), changes=False)
            walk.got([self._table.entry_of(e) for e in got.entries], got.token)
        return walk.found, walk.next_token()

    def entries(self, **where: Any) -> Iterator[KvtEntry]:
        token = ""
        while True:
            found, token = self.page(PAGE_SIZE, token, **where)
            yield from found
            if not token:
                return

    def keys(self, **where: Any) -> Iterator[KvtEntry]:
        return self.entries(keys_only=True, **where)

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            connection.close()
        self._loop.forget(self)
        self._loop.run(self._table.close())

    def __enter__(self) -> KeyValueTable:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
