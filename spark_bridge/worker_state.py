"""What a Spark Python worker keeps from one task to the next (executors).

Responsibility: the transactional writer of each stream the worker's tasks write (its client,
connections, delegation token and segment nodes, made once instead of once per task), and the
leases of the transactions those tasks begin. A task's transaction lives as long as the task
and then on: the driver commits it when the whole job commits, which for a large job comes long
after the transaction's lease (``transaction_timeout_ms``) would have run out, and the
controller aborts a transaction whose lease ran out. So the worker pings every transaction its
tasks began, ``PINGS_PER_LEASE`` times a lease, from its beginning until the task aborts it or
the driver has committed or aborted it (the controller then refuses the ping), or the
controller's longest life of a transaction is over. A worker that dies stops pinging, and its
transactions lapse, as a dead task's should.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import uuid
from typing import Any

from millrace.client.controller import ControllerError
from millrace.client.manager import StreamManager
from spark_bridge.options import Options

__all__ = [
    "LEASES",
    "PINGS_PER_LEASE",
    "LeaseKeeper",
    "forget_task_writers",
    "manager_of",
    "task_writers",
]

log = logging.getLogger(__name__)

#: How often a kept transaction is pinged within its lease.
PINGS_PER_LEASE = 3


def manager_of(options: Options) -> StreamManager:
    return StreamManager(
        options.controller, token=options.token, tls_ca=options.trust_store or None,
        validate_hostname=options.validate_hostname,
    )  # fmt: skip


#: This worker's transactional writers, by controller, token, scope and stream: the tasks a
#: worker runs one after the other share one client, its connections, its delegation token and
#: the nodes of the stream's segments, instead of asking the controller for them again (a
#: task's setup took ~0.1 s and 6 REST calls).
_TASK_WRITERS: dict[tuple[str, ...], tuple[StreamManager, Any]] = {}
_WRITERS_LOCK = threading.Lock()  # (a task and the lease keeper's thread both ask)


def _writers_key(options: Options) -> tuple[str, ...]:
    return (options.controller, options.token, options.trust_store, options.scope, options.stream)


def task_writers(options: Options) -> Any:
    """This worker's transactional writer for the options' stream (made once)."""
    key = _writers_key(options)
    with _WRITERS_LOCK:
        found = _TASK_WRITERS.get(key)
        if found is None:
            manager = manager_of(options)
            try:
                writers = manager.create_transaction_writer(options.scope, options.stream)
            except BaseException:
                manager.close()
                raise
            found = _TASK_WRITERS[key] = (manager, writers)
    return found[1]


def forget_task_writers(options: Options) -> None:
    """Close and drop this worker's writer for the options' stream (after a failure)."""
    key = _writers_key(options)
    with _WRITERS_LOCK:
        found = _TASK_WRITERS.pop(key, None)
    if found is not None:
        with contextlib.suppress(Exception):
            found[0].close()


class LeaseKeeper:
    """Pings transactions until they are committed or aborted, from one daemon thread that
    runs while there is any to keep."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: transaction -> (when its next ping is due, on ``time.monotonic``; its options)
        self._due: dict[uuid.UUID, tuple[float, Options]] = {}
        #: transaction -> when its lease, as last extended, runs out (``time.monotonic``)
        self._lease_end: dict[uuid.UUID, float] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def keep(self, options: Options, txn_id: uuid.UUID) -> None:
        """Keep ``txn_id`` (of the options' stream) alive from now on."""
        now = time.monotonic()
        with self._lock:
            self._due[txn_id] = (now + _period(options), options)
            self._lease_end[txn_id] = now + options.transaction_timeout_ms / 1000
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="millrace-transaction-leases", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def forget(self, txn_id: uuid.UUID) -> None:
        """Stop keeping ``txn_id`` (its task aborts it)."""
        with self._lock:
            self._drop(txn_id)

    def _drop(self, txn_id: uuid.UUID) -> None:
        self._due.pop(txn_id, None)
        self._lease_end.pop(txn_id, None)

    def stop(self) -> None:
        """Keep nothing more (at the process's exit, when its clients close)."""
        with self._lock:
            self._due.clear()
            self._lease_end.clear()
        self._wake.set()

    def kept(self) -> list[uuid.UUID]:
        """The transactions still kept alive."""
        with self._lock:
            return list(self._due)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._due:
                    self._thread = None
                    return
                next_due = min(due for due, _ in self._due.values())
            self._wake.wait(max(0.0, next_due - time.monotonic()))
            self._wake.clear()
            now = time.monotonic()
            with self._lock:
                ready = [(txn, options) for txn, (due, options) in self._due.items() if due <= now]
            for txn_id, options in ready:
                if txn_id in self._due:  # (not forgotten or stopped meanwhile)
                    self._ping(txn_id, options)

    def _ping(self, txn_id: uuid.UUID, options: Options) -> None:
        lease = options.transaction_timeout_ms / 1000
        started = time.monotonic()
        try:
            task_writers(options).ping_txn(txn_id, options.transaction_timeout_ms)
        except ControllerError as exc:
            if exc.code in ("precondition-failed", "not-found"):  # committed, aborted or gone
                with self._lock:
                    self._drop(txn_id)
                return
            failure: Exception | None = exc
        except Exception as exc:  # (the controller out of reach: again at the next turn)
            failure = exc
        else:
            failure = None
        with self._lock:
            if txn_id not in self._due:
                return
            if failure is None:
                self._lease_end[txn_id] = started + lease
            elif time.monotonic() < self._lease_end[txn_id]:  # (again at the next turn)
                log.debug("millrace: ping of transaction %s failed: %s", txn_id, failure)
            else:  # lapsed: nothing left to keep
                self._drop(txn_id)
                log.warning("millrace: transaction %s lapsed (%s)", txn_id, failure)
                return
            self._due[txn_id] = (time.monotonic() + _period(options), options)


def _period(options: Options) -> float:
    return options.transaction_timeout_ms / 1000 / PINGS_PER_LEASE


#: This worker's lease keeper (it stops at the process's exit).
LEASES = LeaseKeeper()
atexit.register(LEASES.stop)
