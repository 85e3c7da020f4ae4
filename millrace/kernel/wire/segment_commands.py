"""Wire commands of segment lifecycle, merges, attributes, and the error replies.

Responsibility: name these commands of the protocol's command table with their type code and
field layout (Java v17 names in CamelCase, fields in snake_case, in wire order). Optional trailing
fields (``?``) default to what Java reads when they are absent.
"""

from __future__ import annotations

import dataclasses
import uuid

from .codec import Command, wire
from .commands import ERROR_UNSPECIFIED, ConditionalAttributeUpdate

# --------------------------------------------------------------------------------------------
# segment lifecycle


@wire(
    20,
    "request_id L",
    "segment S",
    "target_rate I",
    "scale_type B",
    "delegation_token S",
    "rollover_size_bytes L?",
)
@dataclasses.dataclass(slots=True)
class CreateSegment(Command):
    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str = ""
    rollover_size_bytes: int = 0


@wire(21, "request_id L", "segment S")
@dataclasses.dataclass(slots=True)
class SegmentCreated(Command):
    request_id: int
    segment: str


@wire(28, "request_id L", "segment S", "delegation_token S")
@dataclasses.dataclass(slots=True)
class SealSegment(Command):
    request_id: int
    segment: str
    delegation_token: str = ""


@wire(29, "request_id L", "segment S")
@dataclasses.dataclass(slots=True)
class SegmentSealed(Command):
    request_id: int
    segment: str


@wire(30, "request_id L", "segment S", "delegation_token S")
@dataclasses.dataclass(slots=True)
class DeleteSegment(Command):
    request_id: int
    segment: str
    delegation_token: str = ""


@wire(31, "request_id L", "segment S")
@dataclasses.dataclass(slots=True)
class SegmentDeleted(Command):
    request_id: int
    segment: str


@wire(32, "request_id L", "segment S", "target_rate I", "scale_type B", "delegation_token S")
@dataclasses.dataclass(slots=True)
class UpdateSegmentPolicy(Command):
    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str = ""


@wire(33, "request_id L", "segment S")
@dataclasses.dataclass(slots=True)
class SegmentPolicyUpdated(Command):
    request_id: int
    segment: str


@wire(38, "request_id L", "segment S", "truncation_offset L", "delegation_token S")
@dataclasses.dataclass(slots=True)
class TruncateSegment(Command):
    request_id: int
    segment: str
    truncation_offset: int
    delegation_token: str = ""


@wire(39, "request_id L", "segment S")
@dataclasses.dataclass(slots=True)
class SegmentTruncated(Command):
    request_id: int
    segment: str


@wire(40, "request_id L", "writer_id U", "parent_segment S", "delegation_token S")
@dataclasses.dataclass(slots=True)
class CreateTransientSegment(Command):
    request_id: int
    writer_id: uuid.UUID
    parent_segment: str
    delegation_token: str = ""


@wire(
    58,
    "request_id L",
    "target S",
    "source S",
    "delegation_token S",
    "attribute_updates AttrUpdates?",
)
@dataclasses.dataclass(slots=True)
class MergeSegments(Command):
    request_id: int
    target: str
    source: str
    delegation_token: str = ""
    attribute_updates: tuple[ConditionalAttributeUpdate, ...] = ()


@wire(59, "request_id L", "target S", "source S", "new_target_write_offset L?")
@dataclasses.dataclass(slots=True)
class SegmentsMerged(Command):
    request_id: int
    target: str
    source: str
    new_target_write_offset: int = -1


@wire(90, "request_id L", "target_segment_id S", "source_segment_ids Strs", "delegation_token S")
@dataclasses.dataclass(slots=True)
class MergeSegmentsBatch(Command):
    request_id: int
    target_segment_id: str
    source_segment_ids: tuple[str, ...]
    delegation_token: str = ""


@wire(91, "request_id L", "target S", "merged Merged")
@dataclasses.dataclass(slots=True)
class SegmentsBatchMerged(Command):
    """``merged``: (source, new target write offset) per source, in merge order."""

    request_id: int
    target: str
    merged: tuple[tuple[str, int], ...]


# --------------------------------------------------------------------------------------------
# attributes


@wire(34, "request_id L", "segment_name S", "attribute_id U", "delegation_token S")
@dataclasses.dataclass(slots=True)
class GetSegmentAttribute(Command):
    request_id: int
    segment_name: str
    attribute_id: uuid.UUID
    delegation_token: str = ""


@wire(35, "request_id L", "value L")
@dataclasses.dataclass(slots=True)
class SegmentAttribute(Command):
    request_id: int
    value: int


@wire(
    36,
    "request_id L",
    "segment_name S",
    "attribute_id U",
    "new_value L",
    "expected_value L",
    "delegation_token S",
)
@dataclasses.dataclass(slots=True)
class UpdateSegmentAttribute(Command):
    request_id: int
    segment_name: str
    attribute_id: uuid.UUID
    new_value: int
    expected_value: int
    delegation_token: str = ""


@wire(37, "request_id L", "success Z")
@dataclasses.dataclass(slots=True)
class SegmentAttributeUpdated(Command):
    request_id: int
    success: bool


# --------------------------------------------------------------------------------------------
# error replies


@wire(50, "request_id L", "segment S", "correct_host S", "server_stack_trace S?")
@dataclasses.dataclass(slots=True)
class WrongHost(Command):
    request_id: int
    segment: str
    correct_host: str
    server_stack_trace: str = ""


@wire(51, "request_id L", "segment S", "server_stack_trace S?", "offset L?")
@dataclasses.dataclass(slots=True)
class SegmentIsSealed(Command):
    request_id: int
    segment: str
    server_stack_trace: str = ""
    offset: int = -1


@wire(52, "request_id L", "segment S", "server_stack_trace S?")
@dataclasses.dataclass(slots=True)
class SegmentAlreadyExists(Command):
    request_id: int
    segment: str
    server_stack_trace: str = ""


@wire(53, "request_id L", "segment S", "server_stack_trace S?", "offset L?")
@dataclasses.dataclass(slots=True)
class NoSuchSegment(Command):
    request_id: int
    segment: str
    server_stack_trace: str = ""
    offset: int = -1


@wire(55, "writer_id U", "request_id L", "server_stack_trace S?", "event_number L?")
@dataclasses.dataclass(slots=True)
class InvalidEventNumber(Command):
    writer_id: uuid.UUID
    request_id: int
    server_stack_trace: str = ""
    event_number: int = -1


@wire(
    56,
    "request_id L",
    "segment S",
    "start_offset L",
    "server_stack_trace S?",
    "offset L?",
)
@dataclasses.dataclass(slots=True)
class SegmentIsTruncated(Command):
    request_id: int
    segment: str
    start_offset: int
    server_stack_trace: str = ""
    offset: int = -1


@wire(57, "request_id L", "operation_name S", "server_stack_trace S?")
@dataclasses.dataclass(slots=True)
class OperationUnsupported(Command):
    request_id: int
    operation_name: str
    server_stack_trace: str = ""


@wire(60, "request_id L", "server_stack_trace S?", "error_code I?")
@dataclasses.dataclass(slots=True)
class AuthTokenCheckFailed(Command):
    request_id: int
    server_stack_trace: str = ""
    error_code: int = ERROR_UNSPECIFIED


@wire(61, "request_id L", "segment S", "message S", "error_code I")
@dataclasses.dataclass(slots=True)
class ErrorMessage(Command):
    request_id: int
    segment: str
    message: str
    error_code: int = ERROR_UNSPECIFIED


__all__ = [
    "AuthTokenCheckFailed",
    "CreateSegment",
    "CreateTransientSegment",
    "DeleteSegment",
    "ErrorMessage",
    "GetSegmentAttribute",
    "InvalidEventNumber",
    "MergeSegments",
    "MergeSegmentsBatch",
    "NoSuchSegment",
    "OperationUnsupported",
    "SealSegment",
    "SegmentAlreadyExists",
    "SegmentAttribute",
    "SegmentAttributeUpdated",
    "SegmentCreated",
    "SegmentDeleted",
    "SegmentIsSealed",
    "SegmentIsTruncated",
    "SegmentPolicyUpdated",
    "SegmentSealed",
    "SegmentTruncated",
    "SegmentsBatchMerged",
    "SegmentsMerged",
    "TruncateSegment",
    "UpdateSegmentAttribute",
    "UpdateSegmentPolicy",
    "WrongHost",
]
