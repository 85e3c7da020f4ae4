"""Geometry of the console's server-drawn SVG figures: the key-space bar of a stream's current
segments and the epoch history (key space over epochs, each scale a new column).

Pure functions of segments and epochs; the templates only place what these return.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller_app.segments import Segment

#: The SVGs' user-space sizes (they scale to the page's width).
BAR_WIDTH, BAR_HEIGHT = 1000.0, 48.0
HISTORY_WIDTH, HISTORY_HEIGHT = 1000.0, 240.0


def hue(number: int) -> int:
    """A colour per segment number, far from its neighbours' (golden-angle steps)."""
    return (number * 137) % 360


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float
    hue: int
    segment_id: int
    number: int
    label: str
    title: str

    @property
    def label_x(self) -> float:
        return self.x + 4.0


def keyspace_bar(
    segments: Sequence[Segment], rates: Mapping[int, float] | None = None
) -> list[Box]:
    """One box per segment along the key space [0, 1), left to right."""
    boxes = []
    for g in sorted(segments, key=lambda g: g.key_start):
        rate = (rates or {}).get(g.id)
        title = (
            f"segment {g.number} (epoch {g.creation_epoch}):"
            f" keys [{g.key_start:.4g}, {g.key_end:.4g})"
        )
        if rate is not None:
            title += f", {rate:,.1f} events/s"
        boxes.append(
            Box(
                x=g.key_start * BAR_WIDTH,
                y=0.0,
                width=(g.key_end - g.key_start) * BAR_WIDTH,
                height=BAR_HEIGHT,
                hue=hue(g.number),
                segment_id=g.id,
                number=g.number,
                label=str(g.number),
                title=title,
            )
        )
    return boxes


@dataclass(frozen=True)
class Column:
    epoch: int
    x: float
    width: float
    when: str
    boxes: list[Box]


def epoch_history(epochs: Sequence[tuple[int, int, Sequence[Segment]]]) -> list[Column]:
    """``(epoch, creation time ms, segments)`` oldest first -> one column per epoch, the key
    space drawn bottom (0) to top (1)."""
    if not epochs:
        return []
    width = HISTORY_WIDTH / len(epochs)
    columns = []
    for index, (epoch, created_ms, segments) in enumerate(epochs):
        when = dt.datetime.fromtimestamp(created_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        boxes = [
            Box(
                x=index * width,
                y=(1.0 - g.key_end) * HISTORY_HEIGHT,
                width=width,
                height=(g.key_end - g.key_start) * HISTORY_HEIGHT,
                hue=hue(g.number),
                segment_id=g.id,
                number=g.number,
                label=str(g.number),
                title=f"epoch {epoch} ({when} UTC): segment {g.number},"
                f" keys [{g.key_start:.4g}, {g.key_end:.4g})",
            )
            for g in segments
        ]
        columns.append(Column(epoch, index * width, width, when, boxes))
    return columns
