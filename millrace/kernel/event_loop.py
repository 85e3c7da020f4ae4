"""Which event loop the segment store and the blocking client's I/O thread run on: uvloop where
it is installed (the ``server`` extra installs it on the platforms it supports), else asyncio's
own. (The asyncio client runs on its caller's loop, whichever that is.)

``MILLRACE_EVENT_LOOP``: ``auto`` (the default: uvloop when it imports), ``uvloop`` (refuse to
start without it) or ``asyncio`` (the pure-Python loop, whatever is installed). Both run the
same code: the suite's in-process tests run on asyncio's loop (pytest-asyncio's), the node
processes and blocking clients on uvloop, and a node process and a blocking client are tested
on each.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

CHOICES = ("auto", "uvloop", "asyncio")


def chosen() -> str:
    """The loop ``MILLRACE_EVENT_LOOP`` asks for, checked."""
    wanted = os.environ.get("MILLRACE_EVENT_LOOP", "auto").strip().lower() or "auto"
    if wanted not in CHOICES:
        raise ValueError(f"MILLRACE_EVENT_LOOP must be one of {', '.join(CHOICES)}, not {wanted!r}")
    return wanted


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory of the loop to run on (for ``asyncio.Runner(loop_factory=...)``)."""
    wanted = chosen()
    if wanted == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        if wanted == "uvloop":
            raise ValueError("MILLRACE_EVENT_LOOP=uvloop, but uvloop is not installed") from None
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def name_of(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: what ``loop`` is (the segment store logs it at start)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
