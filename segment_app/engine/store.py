"""The segment store: routes each segment to its container and keeps containers running.

A segment's container is a stable hash (CRC32C) of its name modulo the container count, where a
transaction or transient segment hashes as its parent so that merges stay inside one container.
A container that fails (tier-1 trouble) is restarted after ``restart_delay_ms`` and recovers from
tier-1; one fenced by a newer instance elsewhere stays down.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from millrace.kernel.naming import container_for
from segment_app.engine.api import (
    AppendItem,
    AppendResult,
    AttributeUpdate,
    ReadResult,
    SegmentInfo,
)
from segment_app.engine.config import SegmentStoreConfig
from segment_app.engine.containers.container import ContainerState, SegmentContainer
from segment_app.engine.errors import (
    AppendsRefusedError,
    ContainerOfflineError,
    SegmentNotFoundError,
)
from tiers.base import DataLogFencedError

__all__ = ["SegmentStore"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

ContainerFactory = Callable[[int], SegmentContainer]
#: Segment names whose container ``append_group_nowait`` remembers at most.
ROUTES_MAX = 1 << 16
#: Longest pause between attempts to restart a failed container (seconds).
RESTART_DELAY_MAX_S = 5.0


class SegmentStore:
    """A node's containers: every one (a node of its own), or those a cluster assigns it
    (``clustered``: none until ``follow`` names them)."""

    def __init__(
        self, config: SegmentStoreConfig, factory: ContainerFactory, *, clustered: bool = False
    ) -> None:
        self.config = config
        self.factory = factory
        self.clustered = clustered
        self.containers: dict[int, SegmentContainer] = {}
        self._restarts: dict[int, asyncio.Task[None]] = {}
        self._stopping = False
        #: What the cluster assigned this node last: container -> assignment epoch.
        self.assigned: dict[int, int] = {}
        self._following = asyncio.Lock()
        #: Why no request is served now (``suspend``), or None.
        self.suspended: str | None = None
        #: A cluster node's pause check (``watch``): the monotonic time its watch last ran,
        #: and how old that may be before a request finds the node was paused.
        self.watched_at = 0.0
        self.watch_limit_s: float | None = None
        #: TEST-ONLY switch (``no-wrong-host``): False answers a container this node does not
        #: serve as a missing segment, not WrongHost, so clients do not look it up again.
        self.wrong_host = True
        #: ``container_for`` of the segments appended to lately (a plain dict is the cheapest
        #: lookup for every append of a group).
        self._routes: dict[str, int] = {}
        #: Why every append is refused now (``refuse_appends``), or None.
        self.refusal: str | None = None

    def refuse_appends(self, reason: str | None) -> None:
        """Refuse every append from now on with ``AppendsRefusedError(reason)`` (retriable),
        or take them again (``None``). Reads, seals and the containers' own bookkeeping go on.
        The node calls it while its disk is nearly full, so that tier-1, the metadata and the
        status files keep room to recover."""
        self.refusal = reason

    def watch(self, limit_s: float) -> None:
        """The node's pause check runs (it calls this every tick): a request that comes more
        than ``limit_s`` after the last tick finds the process was paused and suspends the
        store itself, before it serves anything (the check's own task runs only after the
        requests that waited in the sockets)."""
        self.watched_at, self.watch_limit_s = time.monotonic(), limit_s

    def suspend(self, reason: str | None) -> None:
        """Serve no request for any container (``ContainerOfflineError(reason)``, a WrongHost on
        the wire) until called with ``None``: the node does this when it cannot know whether
        it still owns its containers (it was paused past its session)."""
        self.suspended = reason

    async def start(self) -> None:
        if self.clustered:
            return  # ``follow`` starts what the cluster assigns
        for container_id in range(self.config.container_count):
            container = self.factory(container_id)
            await container.start()
            self.containers[container_id] = container

    async def follow(self, assigned: dict[int, int]) -> None:
        """Serve exactly the containers of ``assigned`` (container -> assignment epoch): stop
        those taken away or assigned again since (their epoch changed), start the new ones,
        concurrently. A container whose log a newer owner took over stays down; one that fails
        to start is restarted like any failed container."""
        await self.release(assigned)
        async with self._following:
            new = [(c, e) for c, e in sorted(assigned.items()) if c not in self.containers]
            await asyncio.gather(*(self._take(c, e) for c, e in new))

    async def release(self, assigned: dict[int, int]) -> None:
        """Stop the containers ``assigned`` (container -> assignment epoch) does not give this
        node (any more, or again since): the first half of ``follow``, quick."""
        self.assigned = dict(assigned)
        for container_id, container in list(self.containers.items()):
            if assigned.get(container_id) != container.assignment_epoch:
                await self._release(container_id, container)

    async def _release(self, container_id: int, container: SegmentContainer) -> None:
        restart = self._restarts.pop(container_id, None)
        if restart is not None:
            restart.cancel()
        self.containers.pop(container_id, None)
        await container.stop()
        log.info("container %d released (assignment %s ended)",
                    container_id, container.assignment_epoch)  # fmt: skip

    async def _take(self, container_id: int, assignment_epoch: int) -> None:
        log.info("container %d assigned (assignment %d): recovering it", container_id,
                 assignment_epoch)  # fmt: skip
        container = self.factory(container_id)
        container.assignment_epoch = assignment_epoch
        try:
            await container.start()
        except DataLogFencedError as exc:
            log.warning("container %d not started: %s", container_id, exc)
            return
        except Exception:
            log.exception("container %d failed to start; it is restarted", container_id)
        if self.assigned.get(container_id) == assignment_epoch and not self._stopping:
            self.containers[container_id] = container
            if container.state is not ContainerState.RUNNING:
                self._schedule_restart(container)
        else:  # taken away while it started
            await container.stop()

    async def stop(self) -> None:
        self._stopping = True
        for task in self._restarts.values():
            task.cancel()
        for container in self.containers.values():
            await container.stop()

    def restart_failed(self) -> None:
        """Schedule the restart of every failed container (a request for one does too; this
        is for the containers nobody asks for: the node calls it on its status rounds)."""
        for container in self.containers.values():
            failure = container.durable_log.failure if container.durable_log else None
            if container.state is ContainerState.FAILED or failure is not None:
                self._schedule_restart(container)

    def health(self) -> dict[str, Any]:
        """Each container's state and epoch, and what it knows of the tiers' trouble: a
        tier-1 failure (the container stops acknowledging until it recovers) or a failing
        tier-2 flush (data waits in tier-1). Plain data, for a health report."""
        containers: dict[str, dict[str, Any]] = {}
        for container_id in range(self.config.container_count):
            container = self.containers.get(container_id)
            if container is None:
                state = (
                    "not assigned"
                    if self.clustered and container_id not in self.assigned
                    else ("not running")
                )
                containers[str(container_id)] = {"state": state, "epoch": None}
                continue
            failure = container.durable_log.failure if container.durable_log else None
            writer = container.storage_writer
            containers[str(container_id)] = {
                "state": container.state.value,
                "epoch": container.epoch,
                "assignment": container.assignment_epoch,
                "tier1_error": None if failure is None else f"{type(failure).__name__}: {failure}",
                "tier2_error": writer.trouble() if writer is not None else None,
            }
        return {"containers": containers}

    def metrics(self) -> dict[str, dict[str, float]]:
        """Per running container: bytes in its cache (memory, and disk), bytes appended and not
        yet in tier-2 (``tier2_lag_bytes``), and log operations kept in tier-1 for want of tier-2
        (``tier1_backlog_operations``: from the oldest one a dirty segment still needs to the
        newest). Plain numbers, for the metrics port."""
        found: dict[str, dict[str, float]] = {}
        for container_id, container in self.containers.items():
            writer, metadata = container.storage_writer, container.metadata
            lag, oldest = 0, None
            if writer is not None:
                for segment_id, sequence in writer.dirty.items():
                    segment = metadata.segments.get(segment_id)
                    if segment is not None:
                        lag += segment.length - segment.storage_length
                    oldest = sequence if oldest is None else min(oldest, sequence)
            found[str(container_id)] = {
                "cache_bytes": float(container.read_index.cache_bytes),
                "disk_cache_bytes": float(disk.bytes if (disk := container.read_index.disk) else 0),
                "tier2_lag_bytes": float(lag),
                "tier1_backlog_operations": float(
                    0 if oldest is None else max(0, metadata.sequence - oldest + 1)
                ),
            }
        return found

    async def flush_to_storage(self) -> None:
        for container in self.containers.values():
            await container.flush_to_storage()

    def container(self, name: str) -> SegmentContainer:
        container_id = container_for(name, self.config.container_count)
        container = self.containers.get(container_id)
        if self.watch_limit_s is not None and self.suspended is None:
            gap = time.monotonic() - self.watched_at
            if gap > self.watch_limit_s:
                self.suspend(
                    f"this node was paused for {gap:.1f} s: it serves again once it has renewed"
                    " its session and checked which containers are still its own"
                )
        if self.suspended is not None:
            raise ContainerOfflineError(self.suspended, segment=name)
        if container is None:
            served = (
                "is not running"
                if container_id in self.assigned or not self.clustered
                else ("is not served by this node")
            )
            if not self.wrong_host and self.clustered and container_id not in self.assigned:
                raise SegmentNotFoundError("no such segment here (no-wrong-host)", segment=name)
            raise ContainerOfflineError(f"container {container_id} {served}", segment=name)
        if container.state is ContainerState.FAILED or (
            container.durable_log is not None and container.durable_log.failure is not None
        ):
            self._schedule_restart(container)
        return container

    def _route(self, name: str) -> int:
        if len(self._routes) >= ROUTES_MAX:
            self._routes.clear()
        key = self._routes[name] = container_for(name, self.config.container_count)
        return key

    def _schedule_restart(self, container: SegmentContainer) -> None:
        failure = container.durable_log.failure if container.durable_log else None
        if self._stopping or isinstance(failure, DataLogFencedError):
            return
        if container.container_id not in self._restarts:
            self._restarts[container.container_id] = asyncio.create_task(
                self._restart(container.container_id)
            )

    async def _restart(self, container_id: int) -> None:
        """Replace a failed container, trying again (the pause doubling up to
        ``RESTART_DELAY_MAX_S``) while tier-1 is still away; a fenced one stays down."""
        delay = self.config.restart_delay_ms / 1000
        try:
            await self.containers[container_id].stop()
            while not self._stopping:
                await asyncio.sleep(delay)
                replacement = self.factory(container_id)
                replacement.assignment_epoch = self.containers[container_id].assignment_epoch
                try:
                    await replacement.start()
                except DataLogFencedError:
                    log.warning("container %d is fenced by a newer instance", container_id)
                    return
                except Exception:
                    log.exception("restart of container %d failed; again in %.1f s",
                                  container_id, min(delay * 2, RESTART_DELAY_MAX_S))  # fmt: skip
                    delay = min(delay * 2, RESTART_DELAY_MAX_S)
                    continue
                self.containers[container_id] = replacement
                log.warning("container %d restarted at epoch %d", container_id, replacement.epoch)
                return
        finally:
            self._restarts.pop(container_id, None)

    # -- SegmentStoreAPI ----------------------------------------------------------------------

    async def create_segment(self, name: str) -> None:
        await self.container(name).create_segment(name)

    def append_nowait(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        writer_id: uuid.UUID | None = None,
        event_number: int | None = None,
        expected_offset: int | None = None,
    ) -> asyncio.Future[AppendResult]:
        try:
            if self.refusal is not None:
                raise AppendsRefusedError(self.refusal)
            container = self.container(name)
            return container.append_nowait(
                name,
                data,
                writer_id=writer_id,
                event_number=event_number,
                expected_offset=expected_offset,
            )
        except ContainerOfflineError as error:
            future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
            future.set_exception(error)
            return future

    def append_group_nowait(
        self, items: Sequence[AppendItem]
    ) -> list[tuple[list[AppendItem], asyncio.Future[object]]]:
        routes = self._routes
        parts: dict[int, list[AppendItem]] = {}
        for item in items:
            key = routes.get(item.segment)
            if key is None:
                key = self._route(item.segment)
            part = parts.get(key)
            if part is None:
                parts[key] = [item]
            else:
                part.append(item)
        out: list[tuple[list[AppendItem], asyncio.Future[object]]] = []
        for part in parts.values():
            try:
                if self.refusal is not None:
                    raise AppendsRefusedError(self.refusal)
                future = self.container(part[0].segment).append_group_nowait(part)
            except ContainerOfflineError as error:
                future = asyncio.get_running_loop().create_future()
                future.set_exception(error)
            out.append((part, future))
        return out

    async def append(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        writer_id: uuid.UUID | None = None,
        event_number: int | None = None,
        expected_offset: int | None = None,
    ) -> AppendResult:
        return await self.append_nowait(
            name,
            data,
            writer_id=writer_id,
            event_number=event_number,
            expected_offset=expected_offset,
        )

    async def read(
        self, name: str, offset: int, max_length: int, *, wait_seconds: float = 0.0
    ) -> ReadResult:
        container = self.container(name)
        try:
            return await container.read(name, offset, max_length, wait_seconds=wait_seconds)
        except SegmentNotFoundError:
            await container.confirm_owner()
            raise

    async def get_info(self, name: str) -> SegmentInfo:
        return await self._owned(name, lambda c: c.get_info(name))

    async def seal(self, name: str) -> int:
        return await self._owned(name, lambda c: c.seal(name))

    async def truncate(self, name: str, offset: int) -> None:
        await self._owned(name, lambda c: c.truncate(name, offset))

    async def delete(self, name: str) -> None:
        await self._owned(name, lambda c: c.delete(name))

    async def merge(self, target: str, source: str) -> int:
        return await self._owned(target, lambda c: c.merge(target, source))

    async def get_attributes(self, name: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
        return await self._owned(name, lambda c: c.get_attributes(name, ids))

    async def update_attributes(self, name: str, updates: list[AttributeUpdate]) -> None:
        await self._owned(name, lambda c: c.update_attributes(name, updates))

    async def last_event_number(self, name: str, writer_id: uuid.UUID) -> int:
        return await self._owned(name, lambda c: c.last_event_number(name, writer_id))

    async def _owned(self, name: str, call: Callable[[SegmentContainer], Awaitable[_T]]) -> _T:
        """``call`` on ``name``'s container; "no such segment" only from its owner. A node whose
        container a newer owner took over (this node has not heard yet: its metadata database
        is cut, say) does not know the segments created since; it answers WrongHost instead,
        and the client asks the controller where the segment is now."""
        container = self.container(name)
        try:
            return await call(container)
        except SegmentNotFoundError:
            await container.confirm_owner()
            raise
