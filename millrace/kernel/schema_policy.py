"""What a segment store needs to know to guard a stream's appends by the stream's schemas.

A stream names its value subject in the schema registry and how strictly its appends are held
to it (``MODES``). ``SchemaPolicy`` is that, as a node uses it: the mode, the subject, and the
schema ids registered under it, each with a check of an event's bytes after the 5-byte header
(used by ``validate``). ``SchemaPolicies`` is where a node reads them
(``controller_app.registry.policies.DatabaseSchemaPolicies`` implements it from the metadata
database); ``segment_app.server.schema_guard`` applies them. Here, below both, so that neither
imports the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Protocol

__all__ = [
    "ENFORCEMENT_HEADER",
    "ENFORCEMENT_NONE",
    "ENFORCEMENT_VALIDATE",
    "HEADER_BYTES",
    "MODES",
    "NO_POLICY",
    "REFUSAL_MARK",
    "SchemaPolicies",
    "SchemaPolicy",
    "default_subject",
]

#: Appends are not looked at.
ENFORCEMENT_NONE = "none"
#: Every event starts with the header of a schema registered under the subject (any version).
ENFORCEMENT_HEADER = "header"
#: ... and what follows the header decodes with that schema.
ENFORCEMENT_VALIDATE = "validate"
MODES = (ENFORCEMENT_NONE, ENFORCEMENT_HEADER, ENFORCEMENT_VALIDATE)

#: What the message of a block refused by its stream's enforcement says (an ErrorMessage,
#: illegal argument): the Python client tells it from other errors by it, and fails that block's
#: events alone (the writer goes on).
REFUSAL_MARK = "refused by the stream's schema enforcement"

#: Confluent's wire format: a 0 byte, then the schema id as 4 bytes big-endian.
HEADER_BYTES = 5

#: Why an event's body (after the header) does not decode with a schema; None: it does.
BodyCheck = Callable[[bytes], "str | None"]


#: The longest subject name (the registry's column).
SUBJECT_LENGTH_MAX = 255


def default_subject(scope: str, stream: str) -> str:
    """A stream's value subject unless it names another: what Confluent's serializers use for
    ``SerializationContext("<scope>.<stream>", MessageField.VALUE)`` (the topic name
    strategy)."""
    return f"{scope}.{stream}-value"


@dataclasses.dataclass(frozen=True)
class SchemaPolicy:
    """How a stream's appends are held to its subject."""

    mode: str
    subject: str = ""
    #: The schema ids registered under the subject (versions not deleted), each with the
    #: check of an event's body (None in ``header`` mode: not needed).
    schemas: Mapping[int, BodyCheck | None] = dataclasses.field(default_factory=dict)

    @property
    def enforced(self) -> bool:
        return self.mode != ENFORCEMENT_NONE


NO_POLICY = SchemaPolicy(ENFORCEMENT_NONE)


class SchemaPolicies(Protocol):
    """Streams' schema policies, as a node reads them (blocking calls; run in a thread)."""

    def policy(self, scope: str, stream: str) -> SchemaPolicy:
        """The stream's policy now (``NO_POLICY`` for a stream that does not exist); raises
        ``OSError`` or the database's error when it cannot be read."""
