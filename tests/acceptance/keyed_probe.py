"""A writer over many routing keys whose every acknowledgement is timed, and its read-back.

Responsibility: ``KeyedProbe`` writes ``key:n`` events over ``keys`` routing keys at a steady
rate from a thread of its own, with the Python client's blocking writer as the README shows it
(``write_event`` with a ``callback``), and records when each event was written and when it was
acknowledged. From that: how long after a fault every key was acknowledged again
(``recovered_after``), and each key's rate of acknowledgements in a window (``rate``).
``read_back`` reads the stream whole (the batch client) and ``check`` says whether every
acknowledged event is there exactly once, in order per key.

What the partition tests and ``bench/failover.py`` use; nothing here knows of faults.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import Any

from millrace.client.manager import StreamManager

__all__ = ["KeyedProbe", "check", "read_back"]


class KeyedProbe:
    """Writes ``key:n`` at ``rate`` events/s over ``keys`` routing keys (see the module)."""

    def __init__(
        self, manager: StreamManager, scope: str, stream: str, *, keys: int = 24,
        rate: float = 2000.0, **writer_options: Any,
    ) -> None:  # fmt: skip
        self.keys = [f"key{i}" for i in range(keys)]
        self.events_per_s = rate
        self.writer = manager.create_writer(scope, stream, **writer_options)
        self._lock = threading.Lock()
        #: key -> the time each event was written, by number.
        self.written: dict[str, list[float]] = {key: [] for key in self.keys}
        #: key -> (number, time) of each acknowledgement, in the order they came.
        self.acks: dict[str, list[tuple[int, float]]] = {key: [] for key in self.keys}
        #: Failures the callbacks were given.
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="keyed-probe")

    def start(self) -> KeyedProbe:
        self._thread.start()
        return self

    def _run(self) -> None:
        tick, turn = 0.01, 0
        per_tick = max(1, round(self.events_per_s * tick))
        start = time.monotonic()
        while not self._stop.is_set():
            for _ in range(per_tick):
                key = self.keys[turn % len(self.keys)]
                turn += 1
                numbers = self.written[key]
                number = len(numbers)
                numbers.append(time.monotonic())
                self.writer.write_event(
                    f"{key}:{number}", routing_key=key,
                    callback=lambda error, k=key, n=number: self._acked(k, n, error),
                )  # fmt: skip
            start += tick
            time.sleep(max(0.0, start - time.monotonic()))

    def _acked(self, key: str, number: int, error: BaseException | None) -> None:
        now = time.monotonic()
        with self._lock:
            if error is None:
                self.acks[key].append((number, now))
            else:
                self.errors.append(error)

    def stop(self, flush_timeout: float = 120.0) -> None:
        """Stop writing; flush (every event acknowledged or failed) and close."""
        self._stop.set()
        self._thread.join(30)
        done = threading.Thread(target=self.writer.close, daemon=True)
        done.start()
        done.join(flush_timeout)
        if done.is_alive():
            raise AssertionError(f"the writer did not flush within {flush_timeout:g} s: stuck")

    # -- what it saw ----------------------------------------------------------------------------

    def recovered_after(self, since: float) -> dict[str, float | None]:
        """Per key, seconds from ``since`` to the first acknowledgement of an event written
        after it (``None``: none yet)."""
        found: dict[str, float | None] = {}
        with self._lock:
            for key in self.keys:
                written = self.written[key]
                times = [t for n, t in self.acks[key] if written[n] > since]
                found[key] = min(times) - since if times else None
        return found

    def longest_stall(self, key: str, start: float, end: float) -> float:
        """The longest time between ``start`` and ``end`` that ``key`` had no acknowledgement
        (from ``start`` to the first one counts; up to ``end`` after the last)."""
        with self._lock:
            times = sorted(t for _, t in self.acks[key] if start <= t <= end)
        edges = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(edges))

    def rate(self, key: str, start: float, end: float) -> float:
        """Acknowledgements of ``key`` per second between ``start`` and ``end``."""
        with self._lock:
            count = sum(1 for _, t in self.acks[key] if start <= t < end)
        return count / max(end - start, 1e-9)

    def acknowledged(self) -> dict[str, set[int]]:
        with self._lock:
            return {key: {n for n, _ in acks} for key, acks in self.acks.items()}


def read_back(manager: StreamManager, scope: str, stream: str) -> dict[str, list[int]]:
    """Every event of the stream, ``key -> numbers`` in the order read (per segment, segments
    in id order: per key, the order written)."""
    batch = manager.create_batch_client()
    found: dict[str, list[int]] = collections.defaultdict(list)
    ranges = sorted(batch.segment_ranges(scope, stream), key=lambda r: r.segment_id)
    for segment in ranges:
        for event in batch.read_range(segment):
            key, number = bytes(event.data).decode().rsplit(":", 1)
            found[key].append(int(number))
    return found


def check(acknowledged: dict[str, set[int]], read: dict[str, list[int]]) -> list[str]:
    """What is wrong (nothing: ``[]``): an acknowledged event missing, an event twice, a key
    out of order."""
    wrong = []
    for key, numbers in acknowledged.items():
        got = read.get(key, [])
        if len(got) != len(set(got)):
            wrong.append(f"{key}: {len(got) - len(set(got))} events stored twice")
        if got != sorted(got):
            wrong.append(f"{key}: out of order")
        missing = numbers - set(got)
        if missing:
            wrong.append(f"{key}: {len(missing)} acknowledged events lost, e.g. {min(missing)}")
    return wrong
