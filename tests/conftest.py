"""Fixtures shared by the whole test suite (pytest-asyncio runs in auto mode)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to it soon)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """An empty data directory (what MILLRACE_DATA_DIR points at), removed by pytest."""
    path = tmp_path / "data"
    path.mkdir()
    return path
