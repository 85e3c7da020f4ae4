"""Status files: how a process tells others on its host what state it is in; kernel, no Django.

A writer replaces its file atomically with JSON that carries the time it was written
(``updated``, Unix seconds), every second or so; a reader believes a file only while it is
fresh, so a process that died or hangs stops being believed within seconds. Used by the
segment store node (its containers and tiers), the standalone supervisor (its children) and
the Celery worker and beat (their heartbeats), read by the health check and the supervisor.

On a full disk a new file cannot be made: the report then overwrites the old file in place
(its blocks are the file's already), so a process on a full disk still says it is alive; a
reader that catches it half-written takes it for a stale one, once.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["read_fresh", "write_status"]


def write_status(path: Path, report: dict[str, Any]) -> None:
    """Replace ``path`` atomically with ``report`` and the time now (``updated``). Raises
    OSError (the caller decides whether a full disk matters)."""
    text = json.dumps({**report, "updated": time.time()}).encode()
    scratch = path.with_suffix(".tmp")
    try:
        scratch.write_bytes(text)
        os.replace(scratch, path)
    except OSError as exc:
        if exc.errno != errno.ENOSPC or not path.exists():
            raise
        scratch.unlink(missing_ok=True)
        _overwrite(path, text)


def _overwrite(path: Path, text: bytes) -> None:
    """Write ``text`` over ``path`` in place (no new blocks while it fits in the file's)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, text, 0)
        os.ftruncate(fd, len(text))
    finally:
        os.close(fd)


def read_fresh(path: Path, max_age_seconds: float) -> dict[str, Any] | None:
    """The JSON of ``path`` if it was written in the last ``max_age_seconds``, else None."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or time.time() - found.get("updated", 0) > max_age_seconds:
        return None
    return found
