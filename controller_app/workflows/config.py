"""A stream's configuration as a value: what create and update take, checked in one place.

``StreamConfig`` mirrors Pravega's ``StreamConfiguration`` in Millrace units (retention in ms
or bytes; the REST layer converts Pravega's days and MB). Its field names are the ``Stream``
model's columns, so ``model_fields()`` feeds the model and ``from_stream()`` reads one back.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from controller_app.choices import RetentionPolicyType, ScalingPolicyType
from controller_app.errors import InvalidArgumentError
from controller_app.models.stream import RETENTION_MAX_DEFAULT, Stream

#: Pravega's rule for scope and stream names (``NameUtils``): letters, digits, ``-`` and ``.``;
#: a leading ``_`` marks an internal stream (reader-group state, for instance).
NAME_PATTERN = re.compile(r"^_?[A-Za-z0-9][A-Za-z0-9.\-]*$")
NAME_LENGTH_MAX = 250
TAG_LENGTH_MAX = 256
TAGS_MAX = 128
#: Segments one stream may have in one epoch (a bound on every per-epoch operation).
SEGMENTS_PER_EPOCH_MAX = 1024
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def check_name(kind: str, name: object) -> str:
    """``name`` if it is a valid scope or stream name, else ``InvalidArgumentError``."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"{kind} name must be a non-empty string")
    if len(name) > NAME_LENGTH_MAX:
        raise InvalidArgumentError(f"{kind} name is longer than {NAME_LENGTH_MAX} characters")
    if not NAME_PATTERN.match(name):
        raise InvalidArgumentError(
            f"{kind} name {name!r} may hold only letters, digits, '-' and '.'"
            " (and a leading '_' for internal names)"
        )
    return name


@dataclass(frozen=True)
class StreamConfig:
    """Scaling policy, retention policy, timestamp aggregation, rollover size and tags."""

    #: How the stream scales: a fixed number of segments, or by event or byte rate.
    scaling_type: str = ScalingPolicyType.FIXED_NUM_SEGMENTS
    #: Per-segment rate that triggers a scale (KiB/s or events/s); 0 for fixed.
    target_rate: int = 0
    #: At most this many segments replace one hot segment.
    scale_factor: int = 0
    #: Segments at creation, and the floor scale-down never goes below.
    min_segments: int = 1
    #: NONE, TIME (``retention_value`` ms) or SIZE (``retention_value`` bytes).
    retention_type: str = RetentionPolicyType.NONE
    #: Keep at least this much (ms or bytes).
    retention_value: int = 0
    #: Keep at most this much (ms or bytes).
    retention_max: int = RETENTION_MAX_DEFAULT
    #: Writers silent this long (ms) are left out of watermarks; 0 = the default.
    timestamp_aggregation_timeout: int = 0
    #: Tier-2 chunk rollover size (bytes); 0 = the default.
    rollover_size_bytes: int = 0
    #: Free-form labels, each at most 256 characters.
    tags: tuple[str, ...] = field(default=())

    def validate(self) -> StreamConfig:
        """``self`` if every field is in range, else ``InvalidArgumentError`` naming it."""
        if self.scaling_type not in ScalingPolicyType.values:
            raise InvalidArgumentError(f"unknown scaling policy type {self.scaling_type!r}")
        if self.retention_type not in RetentionPolicyType.values:
            raise InvalidArgumentError(f"unknown retention policy type {self.retention_type!r}")
        if not 1 <= self.min_segments <= SEGMENTS_PER_EPOCH_MAX:
            raise InvalidArgumentError(
                f"minSegments must be between 1 and {SEGMENTS_PER_EPOCH_MAX}"
            )
        for name in ("target_rate", "scale_factor"):
            if not 0 <= getattr(self, name) <= _INT32_MAX:
                raise InvalidArgumentError(f"{name} must be between 0 and {_INT32_MAX}")
        by_rate = self.scaling_type != ScalingPolicyType.FIXED_NUM_SEGMENTS
        if by_rate and (self.target_rate < 1 or self.scale_factor < 1):
            raise InvalidArgumentError(
                "a rate scaling policy needs targetRate and scaleFactor >= 1"
            )
        for name in (
            "retention_value",
            "retention_max",
            "timestamp_aggregation_timeout",
            "rollover_size_bytes",
        ):
            if not 0 <= getattr(self, name) <= _INT64_MAX:
                raise InvalidArgumentError(f"{name} must be between 0 and {_INT64_MAX}")
        if self.retention_max < self.retention_value:
            raise InvalidArgumentError("retention maximum is below the retention value")
        self._validate_tags()
        return self

    def _validate_tags(self) -> None:
        if len(self.tags) > TAGS_MAX:
            raise InvalidArgumentError(f"a stream has at most {TAGS_MAX} tags")
        for tag in self.tags:
            if not isinstance(tag, str) or not tag or len(tag) > TAG_LENGTH_MAX:
                raise InvalidArgumentError(
                    f"tag {tag!r} must be a string of 1 to {TAG_LENGTH_MAX} characters"
                )

    def model_fields(self) -> dict[str, Any]:
        """The ``Stream`` columns this configuration sets (everything but ``tags``)."""
        values = asdict(self)
        values.pop("tags")
        return values

    @classmethod
    def from_stream(cls, stream: Stream, tags: tuple[str, ...] | list[str] = ()) -> StreamConfig:
        """The configuration stored in ``stream`` (tags read separately, by the caller)."""
        names = [f.name for f in fields(cls) if f.name != "tags"]
        return cls(**{name: getattr(stream, name) for name in names}, tags=tuple(sorted(tags)))
