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

__all__ = [
    "HEARTBEAT_FORGET_SECONDS",
    "HEARTBEAT_INTERVAL_SECONDS",
    "HEARTBEAT_STALE_SECONDS",
    "heartbeat_path",
    "heartbeat_paths",
    "node_status_path",
    "node_status_paths",
    "read_fresh",
    "supervisor_state_path",
    "write_status",
]

#: Seconds between two heartbeats of a Celery worker or beat process.
HEARTBEAT_INTERVAL_SECONDS = 2.0
#: A role whose newest heartbeat is older than this is down.
HEARTBEAT_STALE_SECONDS = 10.0
#: Heartbeats (rows, files) of processes silent for this long are deleted, when a process of
#: the role starts (restarted processes get new ones).
HEARTBEAT_FORGET_SECONDS = 3600.0


# -- where each process writes (all under ``<data dir>/run/``) ---------------------------------


def _run_dir(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / "run"


def node_status_path(data_dir: str | os.PathLike[str], port: int) -> Path:
    """The status of the segment store node serving ``port``: its containers and tiers."""
    return _run_dir(data_dir) / f"segmentstore-{port}.json"


def node_status_paths(data_dir: str | os.PathLike[str]) -> list[Path]:
    """The status files of every segment store node of this host, by name."""
    return sorted(_run_dir(data_dir).glob("segmentstore-*.json"))


def supervisor_state_path(data_dir: str | os.PathLike[str]) -> Path:
    """The states of a running ``millrace standalone``'s children."""
    return _run_dir(data_dir) / "standalone.json"


def heartbeat_path(data_dir: str | os.PathLike[str], role: str, pid: int) -> Path:
    """The heartbeat of process ``pid`` of ``role`` (a Celery worker or beat)."""
    return _run_dir(data_dir) / f"heartbeat-{role}-{pid}.json"


def heartbeat_paths(data_dir: str | os.PathLike[str], role: str) -> list[Path]:
    """The heartbeat files of every process of ``role`` on this host."""
    return sorted(_run_dir(data_dir).glob(f"heartbeat-{role}-*.json"))


# -- writing and reading -------------------------------------------------------------------------


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
