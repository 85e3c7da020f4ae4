"""Find and build storage-tier backends by name: the plugin registry of tier-1 and tier-2.

Responsibility: turn a configured backend name plus keyword options into a backend instance.
Names are looked up in the entry-point groups ``millrace.tier1`` / ``millrace.tier2`` (so a
third-party package adds a backend by declaring an entry point); a dotted path
(``"pkg.mod:Class"`` or ``"pkg.mod.Class"``) works too. Mistakes get errors that say what to type
instead: an unknown name lists the known ones with a "did you mean" guess, an option the backend's
constructor does not take is named, with the options it does take.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from importlib.metadata import entry_points
from typing import Any, TypeVar

from tiers.base import ChunkStorage, DurableDataLog

__all__ = [
    "TIER1_GROUP",
    "TIER2_GROUP",
    "BackendConfigError",
    "BackendOptionError",
    "UnknownBackendError",
    "available_tier1",
    "available_tier2",
    "load_tier1",
    "load_tier2",
    "resolve_tier1",
    "resolve_tier2",
]

TIER1_GROUP = "millrace.tier1"
TIER2_GROUP = "millrace.tier2"

_B = TypeVar("_B", DurableDataLog, ChunkStorage)


class BackendConfigError(ValueError):
    """A tier backend is misconfigured (bad name or options)."""


class UnknownBackendError(BackendConfigError):
    """No backend of that name is installed."""


class BackendOptionError(BackendConfigError):
    """The backend's constructor does not take the options given (or misses a required one)."""


def available_tier1() -> dict[str, str]:
    """Installed tier-1 backends: name -> ``"module:Class"``."""
    return _available(TIER1_GROUP)


def available_tier2() -> dict[str, str]:
    """Installed tier-2 backends: name -> ``"module:Class"``."""
    return _available(TIER2_GROUP)


def resolve_tier1(name: str) -> type[DurableDataLog]:
    """The tier-1 backend class for an entry-point name or a dotted path."""
    obj = _resolve(name, TIER1_GROUP, "tier-1")
    if isinstance(obj, type) and issubclass(obj, DurableDataLog):
        return obj
    raise _not_a_backend("tier-1", name, obj, "DurableDataLog")


def resolve_tier2(name: str) -> type[ChunkStorage]:
    """The tier-2 backend class for an entry-point name or a dotted path."""
    obj = _resolve(name, TIER2_GROUP, "tier-2")
    if isinstance(obj, type) and issubclass(obj, ChunkStorage):
        return obj
    raise _not_a_backend("tier-2", name, obj, "ChunkStorage")


def load_tier1(name: str, **options: Any) -> DurableDataLog:
    """Build the tier-1 backend ``name`` (entry-point name or dotted path) with ``options``."""
    return _build(resolve_tier1(name), name, options)


def load_tier2(name: str, **options: Any) -> ChunkStorage:
    """Build the tier-2 backend ``name`` (entry-point name or dotted path) with ``options``."""
    return _build(resolve_tier2(name), name, options)


# -- internals -------------------------------------------------------------------------------


def _available(group: str) -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=group)}


def _is_dotted(name: str) -> bool:
    return ":" in name or "." in name


def _resolve(name: str, group: str, label: str) -> object:
    if not isinstance(name, str) or not name:
        raise UnknownBackendError(f"{label} backend name must be a non-empty string, not {name!r}")
    if _is_dotted(name):
        return _import_dotted(name, label)
    return _load_entry_point(name, group, label)


def _not_a_backend(label: str, name: str, obj: object, base: str) -> BackendConfigError:
    return BackendConfigError(f"{label} backend {name!r} is {obj!r}, not a subclass of {base}")


def _load_entry_point(name: str, group: str, label: str) -> object:
    found = {ep.name: ep for ep in entry_points(group=group)}
    if name not in found:
        raise UnknownBackendError(_unknown_message(label, name, sorted(found)))
    try:
        return found[name].load()
    except (ImportError, AttributeError) as error:
        raise ImportError(
            f"{label} backend {name!r} ({found[name].value}) failed to import: {error}"
        ) from error


def _unknown_message(label: str, name: str, known: list[str]) -> str:
    message = f"unknown {label} backend {name!r}"
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        message += f"; did you mean {close[0]!r}?"
    listing = ", ".join(known) if known else "none (is the package installed?)"
    return f"{message} Known backends: {listing}. A dotted path 'pkg.mod:Class' also works."


def _import_dotted(path: str, label: str) -> object:
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise UnknownBackendError(f"{label} backend path {path!r} is not 'pkg.mod:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UnknownBackendError(
            f"{label} backend {path!r}: cannot import module {module_name!r} ({error})"
        ) from error
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownBackendError(
                f"{label} backend {path!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj


def _build(cls: type[_B], name: str, options: dict[str, Any]) -> _B:
    _check_options(cls, name, options)
    return cls(**options)


def _check_options(cls: type, name: str, options: dict[str, Any]) -> None:
    """Raise ``BackendOptionError`` naming options ``cls`` does not take or needs."""
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = [
        p.name
        for p in params.values()
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    for option in sorted(set(options) - set(accepted)):
        close = difflib.get_close_matches(option, accepted, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise BackendOptionError(
            f"backend {name!r} ({cls.__qualname__}) has no option {option!r}{hint}"
            f" Its options: {', '.join(accepted) or 'none'}."
        )
    missing = [
        p.name
        for p in params.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.name not in options
    ]
    if missing:
        raise BackendOptionError(
            f"backend {name!r} ({cls.__qualname__}) needs option(s): {', '.join(missing)}"
        )
