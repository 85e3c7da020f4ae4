"""Status files: how a process tells others on its host what state it is in; kernel, no Django.

A writer replaces its file atomically with JSON that carries the time it was written
(``updated``, Unix seconds), every second or so; a reader believes a file only while it is
fresh, so a process that died or hangs stops being believed within seconds. Used by the
segment store node (its containers and tiers) and the standalone supervisor (its children),
read by the health check.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["read_fresh", "write_status"]


def write_status(path: Path, report: dict[str, Any]) -> None:
    """Replace ``path`` atomically with ``report`` and the time now (``updated``). Raises
    OSError (the caller decides whether a full disk matters)."""
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps({**report, "updated": time.time()}))
    os.replace(scratch, path)


def read_fresh(path: Path, max_age_seconds: float) -> dict[str, Any] | None:
    """The JSON of ``path`` if it was written in the last ``max_age_seconds``, else None."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or time.time() - found.get("updated", 0) > max_age_seconds:
        return None
    return found
