"""A seeded simulation: a container against faulty in-memory tiers, checked after every step.

Hypothesis drives random sequences of appends (idempotent and not), seals, truncations,
transaction merges, deletes, flushes, tier-1 and tier-2 faults and crash-restarts (a new
instance fences the old one). A model keeps exactly what was acknowledged; after every step each
segment must read back exactly that, its metadata invariants must hold, and nothing
acknowledged may be lost across restarts.
"""

from __future__ import annotations

import asyncio
import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from segment_app.engine.containers.container import SegmentContainer
from segment_app.engine.errors import ContainerOfflineError, SegmentSealedError
from tests.engine.conftest import Tiers

NAMES = [f"sim/stream/{i}.#epoch.0" for i in range(3)]


class ContainerSimulation(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tiers = Tiers()
        self.container: SegmentContainer = self.run(self.tiers.start())
        self.data: dict[str, bytearray] = {}
        self.start: dict[str, int] = {}
        self.sealed: set[str] = set()
        self.writers: dict[str, tuple[uuid.UUID, int]] = {}
        self.acked_numbers: dict[str, int] = {}
        self.txn_count = 0
        self.offline = False

    def run(self, coroutine):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        self.run(self.container.stop())
        self.loop.close()

    # -- rules ------------------------------------------------------------------------------------

    @precondition(lambda self: not self.offline)
    @rule(name=st.sampled_from(NAMES))
    def create(self, name: str) -> None:
        if name in self.data:
            return
        self.run(self.container.create_segment(name))
        self.data[name], self.start[name] = bytearray(), 0
        self.writers[name] = (uuid.uuid4(), 0)

    @precondition(lambda self: not self.offline and self.data)
    @rule(
        picks=st.lists(
            st.tuples(st.integers(0, 2), st.binary(min_size=1, max_size=3000), st.booleans()),
            min_size=1,
            max_size=25,
        ),
        fault=st.booleans(),
    )
    def append_batch(self, picks: list[tuple[int, bytes, bool]], fault: bool) -> None:
        if fault:
            self.tiers.log_faults.fail_next("append_batch")
        submitted, results = self.run(self._append_batch(picks))
        for (name, payload, number), result in zip(submitted, results, strict=True):
            if isinstance(result, SegmentSealedError):
                assert name in self.sealed
            elif isinstance(result, ContainerOfflineError):
                self.offline = True
            elif isinstance(result, BaseException):
                raise result
            else:
                assert not result.duplicate
                self.data[name] += payload
                assert result.length == len(self.data[name])
                if number:
                    self.acked_numbers[name] = number
        # The fault may also hit the storage writer's own tier-1 records, before or after.
        self.tiers.log_faults.clear()
        self.run(asyncio.sleep(0.01))
        self.offline = self.offline or self._failed()
        if fault and not self.offline:
            assert all(name in self.sealed for name, _, _ in submitted)

    def _failed(self) -> bool:
        log = self.container.durable_log
        return log is not None and log.failure is not None

    async def _append_batch(self, picks: list[tuple[int, bytes, bool]]):  # type: ignore[no-untyped-def]
        names = sorted(self.data)
        submitted, futures = [], []
        for index, payload, idempotent in picks:
            name = names[index % len(names)]
            writer, last = self.writers[name]
            kwargs = {}
            number = 0
            if idempotent:
                number = last + 1
                self.writers[name] = (writer, number)
                kwargs = {"writer_id": writer, "event_number": number}
            futures.append(self.container.append_nowait(name, payload, **kwargs))
            submitted.append((name, payload, number))
        return submitted, await asyncio.gather(*futures, return_exceptions=True)

    @precondition(lambda self: not self.offline and self.data)
    @rule(index=st.integers(0, 2))
    def duplicate(self, index: int) -> None:
        name = sorted(self.data)[index % len(self.data)]
        writer, _ = self.writers[name]
        number = self.acked_numbers.get(name, 0)
        if number == 0 or name in self.sealed:
            return
        result = self.run(
            self.container.append(name, b"DUP", writer_id=writer, event_number=number)
        )
        assert result.duplicate

    @precondition(lambda self: not self.offline and self.data)
    @rule(index=st.integers(0, 2))
    def seal(self, index: int) -> None:
        name = sorted(self.data)[index % len(self.data)]
        assert self.run(self.container.seal(name)) == len(self.data[name])
        self.sealed.add(name)

    @precondition(lambda self: not self.offline and self.data)
    @rule(index=st.integers(0, 2), fraction=st.floats(0, 1))
    def truncate(self, index: int, fraction: float) -> None:
        name = sorted(self.data)[index % len(self.data)]
        offset = int(len(self.data[name]) * fraction)
        self.run(self.container.truncate(name, offset))
        self.start[name] = max(self.start[name], offset)

    @precondition(lambda self: not self.offline and self.data)
    @rule(
        index=st.integers(0, 2), chunks=st.lists(st.binary(min_size=1, max_size=2000), max_size=4)
    )
    def merge_transaction(self, index: int, chunks: list[bytes]) -> None:
        name = sorted(self.data)[index % len(self.data)]
        if name in self.sealed:
            return
        self.txn_count += 1
        txn = f"{name}#transaction.{self.txn_count:032x}"
        self.run(self.container.create_segment(txn))
        for chunk in chunks:
            self.run(self.container.append(txn, chunk))
        length = self.run(self.container.merge(name, txn))
        self.data[name] += b"".join(chunks)
        assert length == len(self.data[name])

    @precondition(lambda self: not self.offline and self.data)
    @rule(index=st.integers(0, 2))
    def delete(self, index: int) -> None:
        name = sorted(self.data)[index % len(self.data)]
        self.run(self.container.delete(name))
        for table in (self.data, self.start, self.writers):
            del table[name]
        self.acked_numbers.pop(name, None)
        self.sealed.discard(name)

    @precondition(lambda self: not self.offline)
    @rule(tier2_faults=st.integers(0, 3))
    def flush(self, tier2_faults: int) -> None:
        if tier2_faults:
            self.tiers.chunk_faults.fail_next("create_with_data", tier2_faults)
            self.tiers.chunk_faults.fail_next("write", tier2_faults)
        self.run(self._flush())
        self.tiers.chunk_faults.clear()

    async def _flush(self) -> None:
        for _ in range(20):
            try:
                await self.container.flush_to_storage()
                return
            except ContainerOfflineError:
                raise
            except Exception:
                await asyncio.sleep(0.001)
        raise AssertionError("tier-2 never recovered from its injected faults")

    @rule()
    def crash_and_restart(self) -> None:
        """A new instance takes over (fencing the old one), as after a crash."""
        old = self.container
        self.tiers.log_faults.clear()
        self.tiers.chunk_faults.clear()
        self.container = self.run(self.tiers.start())
        self.run(old.stop())
        self.offline = False

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def everything_acknowledged_reads_back(self) -> None:
        if self.offline or self._failed():
            return
        self.run(self._check())

    async def _check(self) -> None:
        c = self.container
        for name, data in self.data.items():
            info = await c.get_info(name)
            assert info.length == len(data), name
            assert info.start_offset == self.start[name], name
            assert info.sealed == (name in self.sealed), name
            offset = info.start_offset
            while offset < info.length:
                result = await c.read(name, offset, 1 << 20)
                assert result.data == bytes(data[offset : offset + len(result.data)]), name
                offset += len(result.data)
        for segment in c.metadata.segments.values():
            segment.check_invariants()


ContainerSimulation.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestContainerSimulation = ContainerSimulation.TestCase
