"""Who may do what to which resource: Pravega's resource strings, grants, denials, roles.

Every call that touches a scope, a stream, a reader group or a key-value table is judged here,
from every face (REST, the console, WebSocket tails, gRPC, and the delegation tokens the wire
protocol carries), by ``judge(user, resource, permission)``:

* **Resources** are Pravega's strings (PDP-42): ``prn::/`` (the cluster), ``prn::/scope:S``,
  ``prn::/scope:S/stream:T``, ``prn::/scope:S/reader-group:R``,
  ``prn::/scope:S/key-value-table:K``; the schema registry's are ``prn::/registry`` and
  ``prn::/registry/subject:X``. A stream's internal companions answer to their owner: a
  reader group's state stream ``_RG<name>`` to the reader group, a writer-marks stream
  ``_MARK<name>`` to the stream, a table's ``<name>_kvtable`` to the table.
* **Patterns**: a grant's resource may hold ``*`` (any characters, ``/`` included):
  ``prn::/scope:team-a*`` is every scope whose name starts with ``team-a`` and everything in
  them; ``prn::/scope:S/*`` is everything in S but S itself; ``prn::*`` is everything.
* **Permissions**, weakest first: ``READ``; ``READ_UPDATE`` (write, transactions, a reader
  group's positions); ``MANAGE`` (create, change and delete what a scope holds, and the scope).
  A grant of one includes the weaker ones.
* **Order**: an admin (or superuser) may do everything. A denial that matches and covers the
  permission asked refuses (denying ``READ`` denies everything, ``READ_UPDATE`` writes and
  management). Otherwise a user with allowing grants (its own or its groups') may do exactly
  what they allow; a user with none keeps its role's default: a viewer reads everything, an
  operator manages everything.

Reading through a reader group needs ``READ`` on its streams and ``READ_UPDATE`` on the reader
group, never ``READ_UPDATE`` on a stream (Pravega's trap, its issue #3277).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from django.conf import settings

from controller_app.access.roles import Need, may, refusal
from controller_app.errors import InvalidArgumentError, PermissionRefusedError
from millrace.kernel.kvt import KVTABLE_SUFFIX

__all__ = [
    "MANAGE", "PERMISSIONS", "READ", "READ_UPDATE", "ROOT", "PermissionRefusedError", "Verdict",
    "allowed", "authorize", "judge", "resource_of", "stream_prn",
]  # fmt: skip

_T = TypeVar("_T")

READ, READ_UPDATE, MANAGE = "READ", "READ_UPDATE", "MANAGE"
#: Permissions, weakest first: each includes those before it.
PERMISSIONS = (READ, READ_UPDATE, MANAGE)
ROOT = "prn::/"
REGISTRY = "prn::/registry"
#: The internal streams that belong to a reader group, and to a stream (writer marks).
READER_GROUP_STREAM_PREFIX = "_RG"
MARKS_STREAM_PREFIX = "_MARK"
_NAME = r"[A-Za-z0-9_.*-]+"
_PATTERN = re.compile(
    rf"prn::(\*|/(\*|registry(\*|/(\*|subject:[^/]+))?|scope:{_NAME}"
    rf"(/(\*|(stream|reader-group|key-value-table):{_NAME}))?)?)"
)


#: The changes (by the audit log's names, which REST and the console share) that manage what a
#: scope holds: they need MANAGE. Every other change needs READ_UPDATE, every read READ.
MANAGING = frozenset({
    "scope.create", "scope.delete", "stream.create", "stream.update", "stream.seal",
    "stream.delete", "stream.schema", "kvtable.create", "kvtable.delete",
})  # fmt: skip


def permission_of(action: str | None, reads: bool) -> str:
    """What a call asks: READ for a read, MANAGE for a managing change, else READ_UPDATE."""
    if reads:
        return READ
    return MANAGE if action in MANAGING else READ_UPDATE


# -- resources --------------------------------------------------------------------------------


def scope_resource(scope: str) -> str:
    return f"prn::/scope:{scope}"


def stream_prn(scope: str, stream: str) -> str:
    """The grant resource (Pravega's ``prn::`` form) a stream's segments answer to (an internal
    stream's owner's); a delegation token's resource claim is another thing
    (``claims.stream_resource``)."""
    if stream.startswith(READER_GROUP_STREAM_PREFIX):
        return reader_group_resource(scope, stream[len(READER_GROUP_STREAM_PREFIX) :])
    if stream.startswith(MARKS_STREAM_PREFIX):
        return stream_prn(scope, stream[len(MARKS_STREAM_PREFIX) :])
    if stream.endswith(KVTABLE_SUFFIX):
        return kvtable_resource(scope, stream[: -len(KVTABLE_SUFFIX)])
    return f"prn::/scope:{scope}/stream:{stream}"


def reader_group_resource(scope: str, reader_group: str) -> str:
    return f"prn::/scope:{scope}/reader-group:{reader_group}"


def kvtable_resource(scope: str, table: str) -> str:
    return f"prn::/scope:{scope}/key-value-table:{table}"


def subject_resource(subject: str | None) -> str:
    return f"{REGISTRY}/subject:{subject}" if subject else REGISTRY


def resource_of(kwargs: Mapping[str, Any]) -> str:
    """The resource a URL's parameters name (the innermost one), ``prn::/`` for none."""
    scope = kwargs.get("scope")
    if "subject" in kwargs or "schema_id" in kwargs:
        return subject_resource(kwargs.get("subject"))
    if not scope:
        return ROOT
    if kwargs.get("stream"):
        return stream_prn(scope, kwargs["stream"])
    if kwargs.get("reader_group"):
        return reader_group_resource(scope, kwargs["reader_group"])
    if kwargs.get("kvtable"):
        return kvtable_resource(scope, kwargs["kvtable"])
    return scope_resource(scope)


def parse_resource(text: str) -> str:
    """A grant's resource, checked; Pravega's older strings (``*``, ``scope``,
    ``scope/stream``, ``scope/*``) are turned into resource strings. InvalidArgumentError
    names what is wrong."""
    text = text.strip()
    if not text.startswith("prn::"):
        text = _from_legacy(text)
    if not _PATTERN.fullmatch(text):
        raise InvalidArgumentError(
            f"{text!r} is not a resource string: write prn::/, prn::/scope:S, "
            "prn::/scope:S/stream:T, prn::/scope:S/reader-group:R, "
            "prn::/scope:S/key-value-table:K or prn::/registry/subject:X, with * for any "
            "characters (prn::/scope:team-a*)"
        )
    return text


def _from_legacy(text: str) -> str:
    if text in ("*", ""):
        return "prn::*"
    if text == "/":
        return ROOT
    scope, _, rest = text.partition("/")
    if not rest:
        return scope_resource(scope)
    return f"prn::/scope:{scope}/*" if rest == "*" else stream_prn(scope, rest)


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def matches(pattern: str, resource: str) -> bool:
    """Whether the grant's ``pattern`` covers ``resource``."""
    if "*" not in pattern:
        return pattern == resource
    return _compiled(pattern).fullmatch(resource) is not None


def _covers(granted: str, asked: str) -> bool:
    return PERMISSIONS.index(granted) >= PERMISSIONS.index(asked)


# -- judging ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    #: Why: ``admin``, ``role operator``, ``grant #3``, ``denied by grant #4``, ``no grant``.
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Rule:
    id: int
    resource: str
    permission: str
    deny: bool


def _rules(user: Any) -> list[_Rule]:
    """The grants of ``user`` and its groups, read once per user object (one request)."""
    found = user.__dict__.get("_millrace_grants")
    if found is None:
        from django.db.models import Q

        from controller_app.models import Grant

        rows = Grant.objects.filter(Q(user=user) | Q(group__in=user.groups.all()))
        found = [_Rule(r.id, r.resource, r.permission, r.deny) for r in rows.order_by("id")]
        user.__dict__["_millrace_grants"] = found
    return found  # type: ignore[no-any-return]


def forget(user: Any) -> None:
    """Drop what ``user`` remembers of its grants (after a change to them)."""
    user.__dict__.pop("_millrace_grants", None)


def judge(user: Any, resource: str, permission: str) -> Verdict:
    """Whether ``user`` may do what ``permission`` names on ``resource``, and why."""
    node = settings.MILLRACE
    if not node.auth_enabled:
        return Verdict(True, "authentication is off")
    if user is None or not user.is_authenticated or not user.is_active:
        return Verdict(False, "not signed in")
    if may(user, "admin"):
        return Verdict(True, "admin")
    if "no-grants" in node.unsafe:  # TEST-ONLY: the guard switched off
        return Verdict(True, "grants are not checked (MILLRACE_TEST_UNSAFE=no-grants)")
    rules = _rules(user)
    for rule in rules:
        if rule.deny and _covers(permission, rule.permission) and matches(rule.resource, resource):
            return Verdict(
                False, f"denied by grant #{rule.id} ({rule.permission} on {rule.resource})"
            )
    allowing = [rule for rule in rules if not rule.deny]
    if not allowing:
        need: Need = "read" if permission == READ else "operate"
        if may(user, need):
            return Verdict(True, f"role {'viewer' if need == 'read' else 'operator'}")
        return Verdict(False, f"no grant, and {refusal(need)}")
    for rule in allowing:
        if _covers(rule.permission, permission) and matches(rule.resource, resource):
            return Verdict(True, f"grant #{rule.id}")
    return Verdict(False, "no grant covers it")


def allowed(user: Any, resource: str, permission: str) -> bool:
    return judge(user, resource, permission).allowed


def authorize(user: Any, resource: str, permission: str) -> None:
    """Nothing if ``user`` may; PermissionRefusedError naming resource and permission if not."""
    verdict = judge(user, resource, permission)
    if not verdict.allowed:
        raise PermissionRefusedError(resource, permission, verdict.reason)


def authorize_streams(user: Any, scoped_names: Iterable[str]) -> None:
    """A reader group reads its streams (``scope/stream``): whoever creates or resets it must
    be allowed READ on each, and no more."""
    for scoped in scoped_names:
        scope, _, stream = scoped.partition("/")
        authorize(user, stream_prn(scope, stream), READ)


def segments_resource(scope: str, stream: str) -> str:
    """The resource the segments of ``scope/stream`` answer to. ``<name>_kvtable`` is a key-value
    table's, or, where no table has that name, a reader group's: Pravega's Rust client keeps a
    reader group's state in a table segment named after the group."""
    if stream.endswith(KVTABLE_SUFFIX) and not stream.startswith(READER_GROUP_STREAM_PREFIX):
        from controller_app.models import KeyValueTable

        name = stream[: -len(KVTABLE_SUFFIX)]
        if not KeyValueTable.objects.filter(scope__name=scope, name=name).exists():
            return reader_group_resource(scope, name)
    return stream_prn(scope, stream)


def access_to_stream(user: Any, scope: str, stream: str) -> str:
    """The delegation token access ``user`` gets to a stream's segments: ``READ_UPDATE`` or
    ``READ``; PermissionRefusedError when it may not even read."""
    resource = segments_resource(scope, stream)
    if allowed(user, resource, READ_UPDATE):
        return READ_UPDATE
    authorize(user, resource, READ)
    return READ


def reaches_into(user: Any, resource: str) -> bool:
    """Whether ``user`` may see ``resource`` in a listing: it may read it, or it is not denied
    it and an allowing grant of its names something inside it (a scope is listed for a grant
    on one of its streams)."""
    verdict = judge(user, resource, READ)
    if verdict.allowed:
        return True
    if verdict.reason.startswith("denied") or not getattr(user, "is_authenticated", False):
        return False
    parts = resource.split("/")
    for rule in _rules(user):
        pattern = rule.resource.split("/")
        if (
            not rule.deny
            and len(pattern) > len(parts)
            and all(matches(p, r) for p, r in zip(pattern, parts, strict=False))
        ):
            return True
    return False


def sees_everything(user: Any) -> bool:
    """Whether ``user`` may read every resource: an admin, a user reading by its role with no
    grant or denial, or authentication off. Listings skip their filter for it."""
    if not settings.MILLRACE.auth_enabled or may(user, "admin"):
        return True
    return may(user, "read") and not _rules(user)


def visible(user: Any, rows: Iterable[_T], resource: Callable[[_T], str]) -> list[_T]:
    """``rows`` whose resource (``resource(row)``) ``user`` may see, in their order."""
    if sees_everything(user):
        return list(rows)
    return [row for row in rows if reaches_into(user, resource(row))]


def readable(user: Any, rows: Iterable[_T], resource: Callable[[_T], str]) -> list[_T]:
    """``rows`` whose resource ``user`` may READ, in their order."""
    if sees_everything(user):
        return list(rows)
    return [row for row in rows if allowed(user, resource(row), READ)]


#: Why a listing is refused.
NOTHING_VISIBLE = f"you may see nothing here: no grant, and {refusal('read')}"


def may_list(user: Any) -> bool:
    """Whether ``user`` may ask for a listing: it reads by its role, or has an allowing grant."""
    if may(user, "read"):
        return True
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return False
    return "no-grants" in settings.MILLRACE.unsafe or any(not r.deny for r in _rules(user))
