"""Fixtures for whole-process tests: real segment store nodes, always cleaned up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.acceptance.nodes import NodeFactory


@pytest.fixture
async def nodes(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[NodeFactory]:
    """Starts ``millrace segmentstore`` processes; kills every one left at the end of the test."""
    factory = NodeFactory(tmp_path)
    request.addfinalizer(factory.kill_all)  # even if the event loop is gone by then
    try:
        yield factory
    finally:
        await factory.close()
