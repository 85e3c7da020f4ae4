"""Invariant checks for the engine: a broken invariant raises, even under ``python -O``."""

from __future__ import annotations

from segment_app.engine.errors import InvariantError


def check(condition: bool, message: str, *args: object) -> None:
    """Raise ``InvariantError(message % args)`` unless ``condition`` holds.

    The message is formatted only on failure, so hot paths pay nothing for it.
    """
    if not condition:
        raise InvariantError(message % args if args else message)
