"""The server's event loop (``millrace.kernel.event_loop``): uvloop where installed unless
asyncio's own is asked for, and a clear error for a bad choice (a node process serving on
each: ``tests/server/test_segment_store_node.py``)."""

from __future__ import annotations

import asyncio

import pytest

from millrace.kernel import event_loop


def test_auto_takes_uvloop_where_installed_and_asyncio_takes_the_standard_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    uvloop = pytest.importorskip("uvloop")
    monkeypatch.delenv("MILLRACE_EVENT_LOOP", raising=False)
    assert event_loop.event_loop_factory() is uvloop.new_event_loop
    monkeypatch.setenv("MILLRACE_EVENT_LOOP", "asyncio")
    assert event_loop.event_loop_factory() is asyncio.new_event_loop
    monkeypatch.setenv("MILLRACE_EVENT_LOOP", "UVLOOP")
    loop = event_loop.event_loop_factory()()
    try:
        assert event_loop.name_of(loop) == "uvloop"
    finally:
        loop.close()


def test_a_bad_choice_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILLRACE_EVENT_LOOP", "trio")
    with pytest.raises(ValueError, match="MILLRACE_EVENT_LOOP must be one of auto, uvloop"):
        event_loop.event_loop_factory()
