"""Scopes: create and delete (only when empty)."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from controller_app.errors import AlreadyExistsError, PreconditionFailedError, ScopeNotFoundError
from controller_app.models import KeyValueTable, ReaderGroup, Scope, Stream
from controller_app.workflows.config import check_name


def create_scope(name: str) -> Scope:
    """A new scope ``name``; ``AlreadyExistsError`` if it exists."""
    check_name("scope", name)
    try:
        with transaction.atomic():
            return Scope.objects.create(name=name)
    except IntegrityError:
        raise AlreadyExistsError(f"scope {name} exists already") from None


def get_scope(name: str) -> Scope:
    scope = Scope.objects.filter(name=name).first()
    if scope is None:
        raise ScopeNotFoundError(f"scope {name} does not exist")
    return scope


def delete_scope(name: str) -> None:
    """Delete the scope ``name``; only an empty one (no streams, reader groups or key-value
    tables)."""
    with transaction.atomic():
        scope = get_scope(name)
        if Stream.objects.filter(scope=scope).exists():
            raise PreconditionFailedError(f"scope {name} is not empty: delete its streams first")
        if ReaderGroup.objects.filter(scope=scope).exists():
            raise PreconditionFailedError(f"scope {name} still has reader groups")
        if KeyValueTable.objects.filter(scope=scope).exists():
            raise PreconditionFailedError(f"scope {name} still has key-value tables")
        scope.delete()
