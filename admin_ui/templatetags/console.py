"""Template helpers of the console: links that keep a page's URL state."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template

from admin_ui.console import with_params

register = template.Library()


@register.simple_tag(takes_context=True)
def query(context: dict[str, Any], **changes: Any) -> str:
    """This page's query string with ``changes`` (``{% query page=2 sort="name" %}``); an
    empty value removes a parameter."""
    return with_params(
        context["request"], **{k: (v if v != "" else None) for k, v in changes.items()}
    )


@register.filter
def ms_date(value: Any) -> str:
    """Milliseconds since the Unix epoch as ``YYYY-MM-DD HH:MM:SS`` (UTC)."""
    try:
        return dt.datetime.fromtimestamp(int(value) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(value)


@register.filter
def duration(value: Any) -> str:
    """A ``timedelta`` as ``1h 02m 03s`` (``-`` before a past one)."""
    if not isinstance(value, dt.timedelta):
        return ""
    seconds = int(value.total_seconds())
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return (
        f"{sign}{hours}h {minutes:02d}m {seconds:02d}s"
        if hours
        else f"{sign}{minutes}m {seconds:02d}s"
    )
