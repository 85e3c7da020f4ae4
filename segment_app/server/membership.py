"""A node's membership of a cluster: its session, and the containers it serves.

Responsibility: ``NodeSession.run`` joins the cluster (``Membership.join``: the node's id, the
address clients reach it at, its metrics port), then renews its session every
``session_timeout / 5`` seconds; each renewal answers the containers the leader assigns the node
now, with their assignment epochs, and the store follows that map (``SegmentStore.follow``):
it starts what it gained (recovering each container from the shared tiers, which fences the
previous owner) and stops what it lost. A clean stop leaves the cluster, so the leader moves
its containers at once instead of after the session timeout.

Two rules keep the data safe and the node available:

* A metadata database that does not answer is no reason to stop serving: the node keeps its
  containers, and says once that it cannot renew. Whoever takes a container over fences this
  node in both tiers (the assignment epoch bounds the tier-1 epochs it may open), so what
  decides who may write is the tiers, not the session (Pravega learned this with ZooKeeper).
* A node that was paused (SIGSTOP, a VM frozen, a stalled host) for half its session timeout
  or more cannot know whether its containers moved meanwhile: it serves nothing (WrongHost)
  until a renewal has told it its containers again and it has stopped those it lost.

``millrace.kernel.membership.Membership`` is what the node needs of the cluster's metadata;
``controller_app.cluster`` implements it over the metadata database and the node's command line
passes it in, so that this package needs no Django.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from millrace.kernel.membership import Membership, NodeCard
from segment_app.engine.store import SegmentStore

__all__ = ["NodeSession"]

log = logging.getLogger(__name__)


class NodeSession:
    def __init__(
        self,
        membership: Membership,
        card: NodeCard,
        store: SegmentStore,
        *,
        session_timeout_s: float,
        pause_check: bool = True,
    ) -> None:
        self.membership = membership
        self.card = card
        self.store = store
        self.session_timeout_s = session_timeout_s
        self.interval_s = session_timeout_s / 5
        #: TEST-ONLY switch: without it a paused node serves on when it wakes.
        self.pause_check = pause_check
        self._failing = False
        #: Monotonic time a pause was found (None: serving): a renewal asked after it ends it.
        self._paused_at: float | None = None
        self._wanted: dict[int, int] = {}
        self._changed = asyncio.Event()

    async def run(self) -> None:
        """Join (trying again while the database is away), then renew until cancelled; on
        cancellation, leave."""
        await self._join()
        tasks = [asyncio.create_task(self._follow_forever())]
        if self.pause_check:
            tasks.append(asyncio.create_task(self._watch_pauses()))
        try:
            await self._renew_forever()
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.to_thread(self.membership.leave, self.card.node_id), 5
                )

    async def _join(self) -> None:
        delay = self.interval_s
        while True:
            try:
                await asyncio.to_thread(self.membership.join, self.card)
            except Exception as exc:  # the database away: try again
                log.warning("cannot join the cluster yet: %s", _why(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.session_timeout_s)
                continue
            log.info("joined the cluster as %s (%s:%d)",
                     self.card.node_id, self.card.host, self.card.port)  # fmt: skip
            return

    async def _watch_pauses(self) -> None:
        """Suspend the store when this process was not running for half a session timeout:
        found here, or by the first request after the pause (``SegmentStore.watch``)."""
        step = min(0.1, self.interval_s)
        limit = self.session_timeout_s / 2
        last = time.monotonic()
        self.store.watch(limit)
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            gap, last = now - last, now
            if gap >= limit and self.store.suspended is None:
                self.store.suspend(
                    f"this node was paused for {gap:.1f} s: it serves again once it has renewed"
                    " its session and checked which containers are still its own"
                )
            if self.store.suspended is not None and self._paused_at is None:
                self._paused_at = now
                log.warning("%s", self.store.suspended)
            self.store.watch(limit)

    async def _renew_forever(self) -> None:
        while True:
            await self._renew_once()
            await asyncio.sleep(self.interval_s)

    async def _renew_once(self) -> None:
        asked_at = time.monotonic()
        try:
            assigned = await asyncio.to_thread(self.membership.renew, self.card.node_id)
        except LookupError:  # the cluster forgot this node (its row deleted): join again
            await self._join()
            return
        except Exception as exc:
            if not self._failing:
                log.warning(
                    "cannot renew the session (%s); serving the containers on: a new owner"
                    " would fence this node in both tiers", _why(exc),
                )  # fmt: skip
            self._failing = True
            return
        if self._failing:
            log.warning("session renewed again")
        self._failing = False
        self._wanted = assigned
        self._changed.set()
        if self._paused_at is not None and asked_at > self._paused_at:
            await self.store.release(assigned)  # what moved away is stopped before serving
            self.store.suspend(None)
            self._paused_at = None
            log.warning("serving again after the pause")

    async def _follow_forever(self) -> None:
        """Apply the newest map the renewals brought, one ``follow`` at a time."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self._wanted != self.store.assigned or set(self._wanted) - set(
                self.store.containers
            ):
                await self.store.follow(self._wanted)
                if set(self._wanted) - set(self.store.containers):
                    await asyncio.sleep(self.interval_s)  # a start that failed: again soon
                    self._changed.set()


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
