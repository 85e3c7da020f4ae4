"""Room in a scope: what it holds (streams, segments, reader groups, tables) against the counts
its quota allows (``models.ScopeQuota``), checked by the workflows that create."""

from __future__ import annotations

from controller_app import selectors as sel
from controller_app.errors import QuotaExceededError
from controller_app.models import KeyValueTable, ReaderGroup, Scope, ScopeQuota


def counts(scope: Scope) -> dict[str, int]:
    """How many streams (the user's), segments (of their current epochs), reader groups and
    tables ``scope`` holds."""
    streams = list(sel.stream_listing(scope))  # (each with its tail epoch's segments: 1 query)
    return {
        "streams": len(streams),
        "segments": sum(len(s.segment_list or ()) for s in streams),  # type: ignore[attr-defined,misc]
        "reader_groups": ReaderGroup.objects.filter(scope=scope).count(),
        "tables": KeyValueTable.objects.filter(scope=scope).count(),
    }


def check_room(scope: str, **adding: int) -> None:
    """Nothing when ``scope`` has room for ``adding`` more (``streams=1, segments=4`` ...);
    ``QuotaExceededError`` naming the limit when it has not."""
    quota = ScopeQuota.objects.filter(scope__name=scope).select_related("scope").first()
    if quota is None or all(getattr(quota, kind) is None for kind in adding):
        return
    held = counts(quota.scope)
    for kind, more in adding.items():
        limit = getattr(quota, kind)
        if limit is not None and more > 0 and held[kind] + more > limit:
            what = kind.replace("_", " ")
            raise QuotaExceededError(
                f"scope {scope} may hold {limit} {what} (its quota); it holds {held[kind]}, "
                f"and this adds {more}"
            )
