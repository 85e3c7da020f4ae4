"""Auto-scaling: split hot segments and merge cold ones of streams scaled by rate.

Each round (beat, a quarter of the decision window) reads the traffic monitors of the segment
store nodes (``SegmentTraffic`` per segment: rates averaged over the decision window,
``MILLRACE_AUTOSCALE_WINDOW_S``) and plans, per ACTIVE stream whose scaling policy is by rate
(``BY_RATE_IN_EVENTS_PER_SEC``, or ``BY_RATE_IN_KBYTES_PER_SEC`` with KiB/s):

* **hot**: a segment above the target rate is split into ``min(scaleFactor, ceil(rate /
  target))`` equal key ranges (at least 2), as Pravega splits by the load it saw; one scale
  replaces one contiguous key range, so a round splits the run of adjacent hot segments that
  holds the hottest one;
* **cold**: a segment below half the target, measured for at least a window, is cold; a run
  of two or more adjacent cold segments is merged into one, never below ``minSegments`` (the
  first such run per round);
* nothing for a segment younger than ``MILLRACE_AUTOSCALE_MUTE_S``, and nothing for a stream
  whose last scale (manual or automatic) is younger than ``MILLRACE_AUTOSCALE_COOLDOWN_S``.
  Splits go first; merges wait for a round without a split.

The plan is carried out by the scale workflow (``scale_stream``), so it serializes with manual
scale, seal, truncate and transaction commits and keeps every guarantee of a scale; a stream
busy with another workflow, or moved on since the round read it, waits for the next round.
Nothing is kept between rounds: each decides from the monitors' averages and the metadata, so
a restarted worker, beat or controller loses nothing (docs/decisions/0005).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence

from controller_app import audit
from controller_app import selectors as sel
from controller_app.choices import ScalingPolicyType, StreamState
from controller_app.errors import ControllerError
from controller_app.models import Stream
from controller_app.ports import SegmentTraffic, Traffic
from controller_app.segments import Segment, uniform_ranges
from controller_app.workflows.common import now_ms
from controller_app.workflows.config import SEGMENTS_PER_EPOCH_MAX
from controller_app.workflows.scale import scale_stream

log = logging.getLogger(__name__)

RATE_POLICIES = (
    ScalingPolicyType.BY_RATE_IN_EVENTS_PER_SEC,
    ScalingPolicyType.BY_RATE_IN_KBYTES_PER_SEC,
)


@dataclasses.dataclass(frozen=True)
class AutoscaleSettings:
    window_s: float
    cooldown_s: float
    mute_s: float


@dataclasses.dataclass(frozen=True)
class Plan:
    """A scale: the segments to seal and the key ranges replacing them; ``split`` or not."""

    sealed: list[int]
    ranges: list[tuple[float, float]]
    split: bool


def _rate(stream: Stream, found: SegmentTraffic | None) -> float:
    if found is None:
        return 0.0
    if stream.scaling_type == ScalingPolicyType.BY_RATE_IN_KBYTES_PER_SEC:
        return found.bytes_per_s / 1024
    return found.events_per_s


def plan(
    stream: Stream,
    segments: Sequence[Segment],
    traffic: Traffic,
    settings: AutoscaleSettings,
    now: int,
) -> Plan | None:
    """The scale the stream needs now, or ``None`` (see the module docstring)."""
    target = stream.target_rate
    if stream.scaling_type not in RATE_POLICIES or target <= 0 or not segments:
        return None
    last_scale = max(s.creation_time for s in segments)
    if now - last_scale < settings.cooldown_s * 1000:
        return None
    names = {s.id: sel.segment_name(stream, s.id) for s in segments}
    ordered = sorted(segments, key=lambda s: s.key_start)
    awake = [s for s in ordered if now - s.creation_time >= settings.mute_s * 1000]
    hot = plan_splits(stream, awake, traffic, names, len(segments))
    if hot is not None:
        return hot
    cold = set()
    for segment in awake:
        found = traffic.segments.get(names[segment.id])
        measured = found.seen_s if found is not None else traffic.uptime_s
        if measured >= settings.window_s and _rate(stream, found) < target / 2:
            cold.add(segment.id)
    return plan_merges(ordered, cold, stream.min_segments)


def _runs(ordered: Sequence[Segment], chosen: set[int]) -> list[list[Segment]]:
    """The runs of adjacent ``chosen`` segments, in key order (current segments: each is
    adjacent to the one before; a scale replaces one contiguous key range)."""
    runs: list[list[Segment]] = [[]]
    for segment in ordered:
        if segment.id in chosen:
            runs[-1].append(segment)
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def plan_splits(
    stream: Stream,
    candidates: Sequence[Segment],
    traffic: Traffic,
    names: Mapping[int, str],
    count: int,
) -> Plan | None:
    """Split the run of adjacent segments above the target that holds the hottest one, each
    by its load (within the epoch's limit); other hot runs wait for the next round."""
    rates = {s.id: _rate(stream, traffic.segments.get(names[s.id])) for s in candidates}
    hot = {sid for sid, rate in rates.items() if rate > stream.target_rate}
    if not hot:
        return None
    hottest = max(hot, key=lambda sid: rates[sid])
    run = next(r for r in _runs(candidates, hot) if any(s.id == hottest for s in r))
    sealed: list[int] = []
    ranges: list[tuple[float, float]] = []
    factor = max(2, stream.scale_factor)
    for segment in run:
        parts = min(factor, max(2, math.ceil(rates[segment.id] / stream.target_rate)))
        if count + parts - 1 > SEGMENTS_PER_EPOCH_MAX:
            break
        count += parts - 1
        sealed.append(segment.id)
        ranges.extend(uniform_ranges(parts, segment.key_start, segment.key_end))
    return Plan(sealed, ranges, split=True) if sealed else None


def plan_merges(ordered: Sequence[Segment], cold: set[int], min_segments: int) -> Plan | None:
    """Merge the first run of two or more adjacent cold segments (in key order) into one,
    keeping at least ``min_segments``; other runs wait for the next round."""
    room = len(ordered) - min_segments  # segments that may still go
    for run in _runs(ordered, cold):
        run = run[: room + 1]
        if len(run) >= 2:
            return Plan([s.id for s in run], [(run[0].key_start, run[-1].key_end)], split=False)
    return None


def autoscale_stream(stream: Stream, traffic: Traffic, settings: AutoscaleSettings) -> Plan | None:
    """Plan the stream's scale and start it through the scale workflow; the plan started."""
    if stream.state != StreamState.ACTIVE:
        return None
    found = plan(stream, sel.current_segments(stream), traffic, settings, now_ms())
    if found is None:
        return None
    try:
        scale_stream(stream.scope.name, stream.name, found.sealed, found.ranges, wait=None)
    except ControllerError as exc:  # busy, moved on, sealed meanwhile: the next round
        log.info("auto-scaling of %s waits for the next round: %s", stream, exc)
        return None
    log.info(
        "auto-scaling %s: %s %s into %s",
        stream, "split" if found.split else "merged", found.sealed, found.ranges,
    )  # fmt: skip
    audit.record(
        "stream.scale", stream.scoped_name, username="system:autoscale", source="workflow",
        detail=f"{'split' if found.split else 'merge'} {found.sealed} into {found.ranges}",
    )  # fmt: skip
    return found


def rate_streams() -> list[Stream]:
    """The ACTIVE streams scaled by rate."""
    return list(
        Stream.objects.select_related("scope").filter(
            scaling_type__in=RATE_POLICIES, state=StreamState.ACTIVE
        )
    )
