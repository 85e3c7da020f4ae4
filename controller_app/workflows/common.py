"""What every workflow module shares: finding records, waiting, crash points."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from controller_app import selectors as sel
from controller_app.errors import StreamNotFoundError, WorkflowTimeoutError
from controller_app.models import Stream

#: How often a caller that waits for a workflow looks at the database.
WAIT_POLL_SECONDS = 0.02
#: TEST-ONLY: a worker whose environment names a step here kills itself (SIGKILL) right
#: after that step, so crash tests can stop a workflow at each named point. Never set it in
#: production.
CRASH_AT_VARIABLE = "MILLRACE_TEST_CRASH_AT"


def get_stream(scope: str, name: str) -> Stream:
    """The stream ``scope/name`` (scope joined), or ``StreamNotFoundError``."""
    try:
        return sel.get_stream(scope, name)
    except Stream.DoesNotExist:
        raise StreamNotFoundError(f"stream {scope}/{name} does not exist") from None


def wait_until(done: Callable[[], Any], wait: float | None, what: str) -> Any:
    """Poll ``done()`` until it returns something truthy; ``WorkflowTimeoutError`` after
    ``wait`` seconds (``None``: do not wait, return ``done()``'s first answer)."""
    result = done()
    if wait is None or result:
        return result
    deadline = time.monotonic() + wait
    while not result:
        if time.monotonic() > deadline:
            raise WorkflowTimeoutError(
                f"{what} did not finish within {wait:g} s; it goes on in the background"
            )
        time.sleep(WAIT_POLL_SECONDS)
        result = done()
    return result


def step(name: str) -> None:
    """Mark the end of a named workflow step (TEST-ONLY crash point, see CRASH_AT_VARIABLE)."""
    if os.environ.get(CRASH_AT_VARIABLE) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def now_ms() -> int:
    return int(time.time() * 1000)
