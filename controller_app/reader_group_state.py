"""The live state of a reader group, and every change to it, as plain Python (no database).

A reader group shares its streams' segments among its readers: each segment is read by at
most one reader at a time. This module holds that bookkeeping as a JSON-ready document,
changed only through the methods of ``GroupState``; ``controller_app.workflows.reader_groups``
loads it from the ``ReaderGroup`` row, applies one request and writes it back with a
compare-and-swap on ``ReaderGroup.state_version`` (optimistic concurrency, as Pravega's state
synchronizer does with conditional appends).

Segments are named by *keys*, ``"<scope>/<stream>/<segment id>"``, so one group can read
several streams. A segment is in exactly one of four places:

``readers[r]["segments"]``
    assigned to reader ``r``, with the offset up to which ``r`` has handed events to its
    application (its *position*, reported on every sync);
``unassigned``
    waiting for a reader, with the offset to start at;
``future``
    a successor of a segment that ended, waiting until every predecessor has been read to its
    end (so the events of one routing key come out in the order written, across scaling), with
    the predecessors it still waits for;
``completed``
    read to its end while one of its successors is still in ``future``: kept, at its end
    offset, only so that a checkpoint's stream cut covers its key range.

Balancing: a reader may hold ``ceil(segments / readers)`` segments (only the floor while
another reader holds fewer than the floor); one with fewer takes unassigned ones (lowest keys
first), one with more is asked to release the surplus.

Checkpoints: ``start_checkpoint`` snapshots the unassigned and completed segments and waits
for every reader online then. Each reader hands its application a checkpoint marker and acks
with its positions at that moment (a reader with a checkpoint pending neither acquires nor is
asked to release). A segment a pending reader reads to its end counts at its end offset. When
no reader is pending, the positions form one stream cut per stream.

A reader that stops syncing for ``reader_timeout_ms`` is declared dead: its segments go back to
``unassigned`` at its last reported positions (so events it handed out since its last report
may be read again: the at-least-once window) and it stops holding back checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Completed checkpoints kept in the state (older ones are dropped, oldest first).
CHECKPOINTS_KEPT = 10


def segment_key(scope: str, stream: str, segment_id: int) -> str:
    return f"{scope}/{stream}/{segment_id}"


def split_key(key: str) -> tuple[str, str, int]:
    """``(scope, stream, segment id)`` of a segment key."""
    scope, stream, number = key.rsplit("/", 2)
    return scope, stream, int(number)


class ReaderNotInGroup(LookupError):
    """The reader is not (or no longer) a member of the group."""


@dataclass
class GroupState:
    readers: dict[str, dict[str, Any]] = field(default_factory=dict)
    unassigned: dict[str, int] = field(default_factory=dict)
    future: dict[str, list[str]] = field(default_factory=dict)
    #: key -> {"end": end offset, "successors": successors that wait in ``future``}
    completed: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)

    # -- storage ---------------------------------------------------------------------------

    @classmethod
    def start(cls, positions: Mapping[str, int]) -> GroupState:
        """A fresh state whose segments all wait, unassigned, at ``positions``."""
        return cls(unassigned=dict(positions))

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> GroupState:
        return cls(
            readers={
                r: dict(v, segments=dict(v["segments"])) for r, v in data.get("readers", {}).items()
            },
            unassigned=dict(data.get("unassigned", {})),
            future={k: list(v) for k, v in data.get("future", {}).items()},
            completed={k: dict(v) for k, v in data.get("completed", {}).items()},
            checkpoints=[dict(c) for c in data.get("checkpoints", [])],
        )

    def dump(self) -> dict[str, Any]:
        return {
            "readers": self.readers,
            "unassigned": self.unassigned,
            "future": self.future,
            "completed": self.completed,
            "checkpoints": self.checkpoints,
        }

    # -- membership ------------------------------------------------------------------------

    def member(self, reader: str) -> dict[str, Any]:
        try:
            return self.readers[reader]
        except KeyError:
            raise ReaderNotInGroup(reader) from None

    def add_reader(self, reader: str, now_ms: int) -> None:
        """Add ``reader``; a reader that was a member already (a restarted process reusing its
        id) first gives its segments back at their last reported positions."""
        if reader in self.readers:
            self.remove_reader(reader)
        self.readers[reader] = {"seen": now_ms, "segments": {}}

    def remove_reader(self, reader: str, positions: Mapping[str, int] | None = None) -> None:
        """``reader`` leaves (or is declared dead): its segments become unassigned at
        ``positions`` where given for them, else at its last reported positions."""
        held = self.member(reader)["segments"]
        given = positions or {}
        final = {key: max(offset, given.get(key, offset)) for key, offset in held.items()}
        for checkpoint in self.checkpoints:
            if reader in checkpoint["pending"]:
                checkpoint["pending"].remove(reader)
                checkpoint["positions"].update(final)
        self.unassigned.update(final)
        del self.readers[reader]

    def expire(self, now_ms: int, timeout_ms: int, grace_from_ms: int = 0) -> list[str]:
        """Declare dead every reader not seen for ``timeout_ms``; their ids. A reader is not
        blamed for time before ``grace_from_ms`` (the database was away: its syncs could not
        be answered), so it has ``timeout_ms`` from then to sync again."""
        dead = [
            r
            for r, v in self.readers.items()
            if now_ms - max(v["seen"], grace_from_ms) > timeout_ms
        ]
        for reader in dead:
            self.remove_reader(reader)
        return dead

    # -- a reader's report -----------------------------------------------------------------

    def report(self, reader: str, now_ms: int, positions: Mapping[str, int]) -> None:
        """A sync from ``reader``: it is alive, and it has handed out events up to
        ``positions`` (only the segments it holds count; positions never move back)."""
        member = self.member(reader)
        member["seen"] = now_ms
        held = member["segments"]
        for key, offset in positions.items():
            if key in held and offset > held[key]:
                held[key] = offset

    def release(self, reader: str, positions: Mapping[str, int]) -> None:
        """``reader`` gives segments back at ``positions``."""
        held = self.member(reader)["segments"]
        for key, offset in positions.items():
            if key in held:
                self.unassigned[key] = max(offset, held.pop(key))
                for checkpoint in self.checkpoints:
                    if reader in checkpoint["pending"]:
                        checkpoint["positions"][key] = self.unassigned[key]

    def complete(
        self, reader: str, key: str, end_offset: int, successors: Mapping[str, Iterable[str]]
    ) -> None:
        """``reader`` read segment ``key`` to its end: it leaves the group's segments and its
        ``successors`` (each with all its predecessors) wait for their other predecessors."""
        held = self.member(reader)["segments"]
        if key not in held:
            return
        del held[key]
        for checkpoint in self.checkpoints:
            if reader in checkpoint["pending"]:
                checkpoint["positions"][key] = end_offset
        known = self._placed()
        for successor, predecessors in successors.items():
            if successor in self.future:
                waiting = self.future[successor]
            elif successor in known:
                continue  # already readable or being read
            else:
                waiting = self.future[successor] = sorted(set(predecessors))
            if key in waiting:
                waiting.remove(key)
        waited_for = [s for s, preds in successors.items() if self.future.get(s)]
        if waited_for:
            self.completed[key] = {"end": end_offset, "successors": waited_for}
        for successor in [s for s, waiting in self.future.items() if not waiting]:
            del self.future[successor]
            self.unassigned[successor] = 0
        # A completed segment stays only while one of its successors waits in ``future``.
        self.completed = {
            k: v
            for k, v in self.completed.items()
            if any(s in self.future for s in v["successors"])
        }

    def _placed(self) -> set[str]:
        placed = set(self.unassigned) | set(self.future) | set(self.completed)
        for member in self.readers.values():
            placed.update(member["segments"])
        return placed

    def _completed_ends(self) -> dict[str, int]:
        return {k: v["end"] for k, v in self.completed.items()}

    # -- balancing -------------------------------------------------------------------------

    def _fair_share(self) -> int:
        total = len(self.unassigned) + sum(len(m["segments"]) for m in self.readers.values())
        return math.ceil(total / len(self.readers)) if self.readers else 0

    def acquire(self, reader: str) -> dict[str, int]:
        """Unassigned segments ``reader`` takes now (up to its fair share), with offsets."""
        held = self.member(reader)["segments"]
        if self.pending_checkpoint(reader) is not None:
            return {}
        total = len(self.unassigned) + sum(len(m["segments"]) for m in self.readers.values())
        low = total // len(self.readers)
        starving = any(len(m["segments"]) < low for r, m in self.readers.items() if r != reader)
        # Up to the ceiling, or only the floor while another reader waits for its share (so
        # a reader does not take back what it just released for that one).
        room = (low if starving else self._fair_share()) - len(held)
        taken = {}
        for key in sorted(self.unassigned, key=_order)[: max(room, 0)]:
            taken[key] = held[key] = self.unassigned.pop(key)
        return taken

    def unreported(self, reader: str, positions: Mapping[str, int]) -> dict[str, int]:
        """Segments ``reader`` holds but did not report, with their offsets: the answer that
        gave them to it was lost (the database failed after the change was committed, or the
        connection did), so they are given again rather than left unread for good."""
        held = self.member(reader)["segments"]
        return {key: offset for key, offset in held.items() if key not in positions}

    def surplus(self, reader: str) -> int:
        """How many segments ``reader`` should release so that others get their share: those
        above ``ceil(segments / readers)``, or one when it holds that many and another reader
        holds fewer than ``floor(segments / readers)``."""
        if self.unassigned or self.pending_checkpoint(reader) is not None:
            return 0
        held = len(self.member(reader)["segments"])
        high = self._fair_share()
        total = sum(len(m["segments"]) for m in self.readers.values())
        low = total // len(self.readers)
        if held > high:
            return held - high
        starving = any(len(m["segments"]) < low for m in self.readers.values())
        return 1 if starving and held == high > low else 0

    def finished(self) -> bool:
        """Every segment read to its end and nothing left to read (the streams ended)."""
        return not (
            self.unassigned or self.future or any(m["segments"] for m in self.readers.values())
        )

    # -- checkpoints -----------------------------------------------------------------------

    def start_checkpoint(self, name: str, now_ms: int) -> None:
        if any(c["name"] == name for c in self.checkpoints):
            return  # the same request again
        self.checkpoints.append(
            {
                "name": name,
                "createdMs": now_ms,
                "pending": sorted(self.readers),
                "positions": {**self.unassigned, **self._completed_ends()},
            }
        )
        done = [c for c in self.checkpoints if not c["pending"]]
        for old in done[: max(len(done) - CHECKPOINTS_KEPT, 0)]:
            self.checkpoints.remove(old)

    def checkpoint(self, name: str) -> dict[str, Any] | None:
        return next((c for c in self.checkpoints if c["name"] == name), None)

    def pending_checkpoint(self, reader: str) -> str | None:
        """The oldest checkpoint waiting for ``reader``'s ack."""
        return next((c["name"] for c in self.checkpoints if reader in c["pending"]), None)

    def ack_checkpoint(self, reader: str, name: str, positions: Mapping[str, int]) -> bool:
        """``reader`` handed out the marker of checkpoint ``name`` at ``positions``; True when
        that completed the checkpoint."""
        held = self.member(reader)["segments"]
        found = self.checkpoint(name)
        if found is None or reader not in found["pending"]:
            return False
        for key, offset in held.items():
            found["positions"][key] = max(offset, positions.get(key, offset))
        found["pending"].remove(reader)
        return not found["pending"]

    def checkpoint_cuts(self, name: str) -> dict[tuple[str, str], dict[int, int]] | None:
        """The completed checkpoint's positions as ``{(scope, stream): {segment id: offset}}``,
        or None while readers are pending."""
        found = self.checkpoint(name)
        if found is None or found["pending"]:
            return None
        cuts: dict[tuple[str, str], dict[int, int]] = {}
        for key, offset in found["positions"].items():
            scope, stream, segment_id = split_key(key)
            cuts.setdefault((scope, stream), {})[segment_id] = offset
        return cuts

    def positions(self) -> dict[str, int]:
        """Where every segment stands now (readers' reported positions, the unassigned and
        completed ones): what a subscriber's cut or a reset to "now" would use."""
        out = {**self.unassigned, **self._completed_ends()}
        for member in self.readers.values():
            out.update(member["segments"])
        return out


def _order(key: str) -> tuple[str, str, int]:
    return split_key(key)
