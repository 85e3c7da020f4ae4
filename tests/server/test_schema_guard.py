"""How the segment store judges a block by its stream's schema policy (``judge``): every event
of the block looked at, whether the block is many events of one size and schema (judged at
once) or not (walked); malformed blocks refused, never read past."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from millrace.kernel import wire
from millrace.kernel.schema_policy import NO_POLICY, SchemaPolicy
from segment_app.engine.errors import ContainerOfflineError
from segment_app.server.schema_guard import UNKNOWN_SCHEMA, SchemaGuard, judge, stream_of

HEADER = SchemaPolicy("header", "s-value", {1: None, 2: None})


def _event(body: bytes, schema_id: int = 1) -> bytes:
    data = b"\x00" + schema_id.to_bytes(4, "big") + body
    return wire.EVENT_HEADER.pack(wire.EVENT_TYPE, len(data)) + data


def _raw(data: bytes) -> bytes:
    return wire.EVENT_HEADER.pack(wire.EVENT_TYPE, len(data)) + data


@pytest.mark.parametrize("count", [1, 15, 16, 500])
def test_a_block_of_registered_ids_passes_at_every_size(count: int) -> None:
    same = b"".join(_event(b"x" * 20) for _ in range(count))
    assert judge(HEADER, same) is None and judge(HEADER, memoryview(same)) is None
    mixed = b"".join(_event(b"x" * 20, 1 + i % 2) for i in range(count))
    assert judge(HEADER, mixed) is None
    sizes = b"".join(_event(b"x" * (i % 5)) for i in range(count))
    assert judge(HEADER, sizes) is None


@pytest.mark.parametrize("at", [0, 7, 99])
def test_the_one_bad_event_is_found_wherever_it_is(at: int) -> None:
    """Among 100 events of one size (the block judged at once unless one differs), one
    without the header, or with an unknown id, is named by its place."""
    events = [_event(b"y" * 30) for _ in range(100)]
    events[at] = _raw(b"Z" + b"y" * 34)  # same size, no magic byte
    refusal = judge(HEADER, b"".join(events))
    assert refusal is not None and refusal.index == at and "schema header" in refusal.reason
    events[at] = _event(b"y" * 30, schema_id=7)
    assert judge(HEADER, b"".join(events)) is UNKNOWN_SCHEMA
    refusal = judge(HEADER, b"".join(events), final=True)
    assert refusal is not None and refusal.index == at
    assert refusal.reason == "schema id 7 is not registered under the subject"


def test_malformed_blocks_are_refused_without_reading_past_them() -> None:
    good = _event(b"ok")
    assert "not whole events" in judge(HEADER, good + good[:-1]).reason  # type: ignore[union-attr]
    assert "ends inside" in judge(HEADER, good + good[:5]).reason  # type: ignore[union-attr]
    negative = wire.EVENT_HEADER.pack(wire.EVENT_TYPE, -8) + b"\x00" * 8
    assert "not whole events" in judge(HEADER, good + negative).reason  # type: ignore[union-attr]
    other_type = wire.EVENT_HEADER.pack(5, 6) + b"\x00\x00\x00\x00\x01x"
    assert "not whole events" in judge(HEADER, other_type).reason  # type: ignore[union-attr]
    short = _raw(b"\x00\x00")  # shorter than a header
    refusal = judge(HEADER, good + short)
    assert refusal is not None and refusal.index == 1 and "schema header" in refusal.reason


def test_validate_asks_each_events_schema_and_none_looks_at_nothing() -> None:
    seen: list[bytes] = []

    def check(body: bytes) -> str | None:
        seen.append(body)
        return None if body == b"good" else "bad body"

    policy = SchemaPolicy("validate", "s-value", {1: check})
    assert judge(policy, _event(b"good") * 20) is None and len(seen) == 20
    refusal = judge(policy, _event(b"good") + _event(b"nope"))
    assert refusal is not None and refusal.index == 1
    assert refusal.reason == "it does not decode with schema 1: bad body"
    assert judge(NO_POLICY, b"anything at all") is None


def test_internal_streams_are_not_guarded() -> None:
    assert stream_of("shop/orders/0.#epoch.0") == ("shop", "orders")
    assert stream_of("shop/orders/3.#epoch.2#transaction.00ff") == ("shop", "orders")
    assert stream_of("_system/_RGgroup/0.#epoch.0") is None
    assert stream_of("shop/_MARKorders/0.#epoch.0") is None


class _Hanging:
    """Policies whose first read answers and whose later reads hang until ``gate`` opens (a
    metadata database that stopped answering)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.reads = 0

    def policy(self, scope: str, stream: str) -> SchemaPolicy:
        self.reads += 1
        if self.reads > 1:
            self.gate.wait(30)
        return HEADER


async def test_a_hanging_database_holds_a_streams_blocks_a_moment_not_for_good() -> None:
    policies = _Hanging()
    guard = SchemaGuard(policies, max_age=0.2)
    stream = ("shop", "orders")
    await guard.ready(stream)
    await asyncio.sleep(0.3)
    assert guard.policy(stream) is None  # too old: the block waits for a read ...
    started = time.monotonic()
    assert await guard.reload(stream) is HEADER  # ... which hangs: the cached one after 1 s
    assert 0.9 < time.monotonic() - started < 3
    assert guard.policy(stream) is HEADER  # and then for a while without waiting
    policies.gate.set()
    hanging = _Hanging()
    hanging.reads = 1  # (its first read hangs too)
    try:
        with pytest.raises(ContainerOfflineError):  # a stream never read is not let in unguarded
            await SchemaGuard(hanging, max_age=0.2).ready(("shop", "other"))
    finally:
        hanging.gate.set()
