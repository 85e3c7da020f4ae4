"""Writer marks: a writer reports its time and position; watermarks are computed from them."""

from __future__ import annotations

from collections.abc import Mapping

from controller_app import selectors as sel
from controller_app.errors import InvalidArgumentError
from controller_app.models import WriterMark
from controller_app.segments import encode_stream_cut
from controller_app.workflows.common import get_stream

WRITER_ID_LENGTH_MAX = 64


def note_writer_mark(
    scope: str, name: str, writer_id: str, timestamp: int, position: Mapping[int, int]
) -> WriterMark:
    """Record that ``writer_id`` wrote everything up to ``timestamp`` (ms) by ``position``.

    Times never go back: an older report than the stored one is ignored.
    """
    if not writer_id or len(writer_id) > WRITER_ID_LENGTH_MAX:
        raise InvalidArgumentError(f"writer id must be 1 to {WRITER_ID_LENGTH_MAX} characters")
    if timestamp < 0:
        raise InvalidArgumentError("timestamp must not be negative")
    stream = get_stream(scope, name)
    cut = {int(k): int(v) for k, v in position.items()}
    for segment_id, offset in cut.items():
        sel.segment_record(stream, segment_id)  # SegmentNotFoundError for a foreign segment
        if offset < 0:
            raise InvalidArgumentError(f"offset {offset} of segment {segment_id} is negative")
    mark, created = WriterMark.objects.get_or_create(
        stream=stream,
        writer_id=writer_id,
        defaults={"timestamp": timestamp, "position": encode_stream_cut(cut)},
    )
    if not created and timestamp >= mark.timestamp:
        WriterMark.objects.filter(pk=mark.pk, timestamp__lte=timestamp).update(
            timestamp=timestamp, position=encode_stream_cut(cut), is_alive=True
        )
        mark.refresh_from_db()
    return mark
