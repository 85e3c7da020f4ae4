"""Fixtures for whole-process tests: real segment store nodes, always cleaned up."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.nodes import NodeFactory
from tests.acceptance.postgres import module_postgres, postgres  # noqa: F401 - fixtures
from tests.acceptance.standalone_node import READY_LINE, Standalone, free_ports


@pytest.fixture
async def nodes(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[NodeFactory]:
    """Starts ``millrace segmentstore`` processes; kills every one left at the end of the test."""
    factory = NodeFactory(tmp_path)
    request.addfinalizer(factory.kill_all)  # even if the event loop is gone by then
    try:
        yield factory
    finally:
        await factory.close()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A ``millrace standalone`` node on free ports, shared by the tests of one module."""
    running = Standalone(tmp_path_factory.mktemp("standalone") / "data", *free_ports(2))
    try:
        running.wait_for(READY_LINE)
        yield running
    finally:  # (killed: see running_standalone)
        running.kill()


@pytest.fixture
def session(standalone: Standalone) -> Iterator[tuple[StreamManager, str]]:
    """A stream manager of the module's node and a new scope holding stream ``st`` of two
    segments."""
    scope = f"s{uuid.uuid4().hex[:10]}"
    manager = StreamManager(standalone.base, token=standalone.token)
    try:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", initial_segments=2)
        yield manager, scope
    finally:
        manager.close()
