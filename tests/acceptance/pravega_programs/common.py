"""What every program shares: the stream manager from argv and the JSON answer."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pravega_client


def manager() -> pravega_client.StreamManager:
    """``StreamManager(uri, auth_enabled, tls_enabled)`` as Pravega's README shows it."""
    uri = sys.argv[1]
    return pravega_client.StreamManager(uri, True, uri.startswith("tls://"))


def answer(found: dict[str, Any]) -> None:
    """Print what the program saw and end it at once, without Python's finalization: the
    ``pravega`` 0.3.8 wheel's runtime threads can still hand the GIL back while the interpreter
    finalizes, which aborts the process after its work is done ("PyGILState_Release: thread
    state … must be current when releasing", or a SIGSEGV; 2 exits in 30 here)."""
    print(json.dumps(found), flush=True)
    sys.stderr.flush()
    os._exit(0)


def read_events(reader: Any, count: int, timeout: float = 60.0) -> list[str]:
    """Events of ``reader`` until ``count`` arrived (slices released as they are read)."""

    async def run() -> list[str]:
        got: list[str] = []
        while len(got) < count:
            piece = await reader.get_segment_slice_async()
            got += [event.data().decode() for event in piece]
            reader.release_segment(piece)
        return got

    return asyncio.run(asyncio.wait_for(run(), timeout))


def wait_for(signal_file: str, what: str, timeout: float = 120.0) -> None:
    """Say on stdout that the program waits for ``what``, then until the test writes the file."""
    print(json.dumps({"waiting": what}), flush=True)
    deadline = time.monotonic() + timeout
    while not Path(signal_file).read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
