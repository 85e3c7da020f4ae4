"""A full disk under a node: its data directory on a small filesystem of the test's own.

Whole processes: a 1 GiB ext4 image (sparse) made by the test and loop-mounted (skipped with a
notice where the machine cannot: not root, no ``mkfs.ext4``, no loop device), a
``millrace standalone`` node with its data directory on it, a file of the test's filling it to
90 %, then a writer filling the rest. Checked: appends are refused before the disk is full
(the limit, 95 %), the writer's ``flush()`` raises ``DeliveryTimeoutError`` naming the disk
within its delivery timeout, a REST append answers 503 ``tier1-unavailable``, health names
tier-1 and the disk, no process of the node dies or is restarted; once the test's file is
deleted, writes are acknowledged again within 30 s with nothing restarted by hand, and every
acknowledged event reads back exactly once. With the test-only switch ``no-disk-threshold``
the same writes run the disk to ENOSPC: tier-1 fails (the guard is what keeps it from that),
and still no process dies of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace.client.manager import StreamManager
from millrace.client.transport.segment_store import SegmentStoreError
from tests.acceptance.standalone_node import (
    READY_LINE,
    Standalone,
    eventually,
    free_ports,
    new_stream,
    request,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: The disk's size: its 5 % above the limit must take what the node writes between two looks
#: of its disk guard (0.1 s), tier-1 and tier-2 together at page-cache speed.
DISK_BYTES = 1024 * 2**20
EVENT = "x" * 4000
#: The writer's delivery timeout: shorter than the default (120 s, which a test would wait out
#: for nothing), long enough for the disk guard's refusals to be retried a few times.
DELIVERY_S = 20.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 GiB ext4 filesystem (a sparse image) mounted on a folder of the test's (its path)."""
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        pytest.skip("a loop-mounted filesystem needs root and mkfs.ext4")
    image, mount = tmp_path / "disk.img", tmp_path / "disk"
    with open(image, "wb") as f:
        f.truncate(DISK_BYTES)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    mount.mkdir()
    done = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot loop-mount a filesystem here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


def _fill(disk: Path, to: float) -> Path:
    """A file of the test's taking the disk to ``to`` (a fraction) of its size, as the node
    counts it (what is not available to a process that is not root is used)."""
    fs = os.statvfs(disk)
    size, used = fs.f_blocks * fs.f_frsize, (fs.f_blocks - fs.f_bavail) * fs.f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, int(size * to) - used)
    return filler


def _tier1(node: Standalone) -> dict[str, Any]:
    """tier-1's health details ({} while the node does not say)."""
    _, body = node.health()
    try:
        return dict(body["children"]["tiers"]["children"]["tier1"]["details"])
    except (KeyError, TypeError):
        return {}


def _restarts(node: Standalone) -> dict[str, int]:
    return {name: child["restarts"] for name, child in node.supervisor_state().items()}


def _write_until_refused(manager: StreamManager, scope: str) -> tuple[set[str], float, str]:
    """Writes numbered events, flushing every 500, until a flush fails; (the events
    acknowledged, seconds from the failed flush's start to its failure, its error)."""
    writer = manager.create_writer(scope, "st", delivery_timeout_s=DELIVERY_S)
    acked: set[str] = set()
    batch: list[str] = []
    for n in range(1_000_000):
        batch.append(f"{n}:{EVENT}")
        writer.write_event(batch[-1], routing_key=str(n % 7))
        if len(batch) == 500:
            started = time.monotonic()
            try:
                writer.flush()
            except SegmentStoreError as exc:
                return acked, time.monotonic() - started, f"{type(exc).__name__}: {exc}"
            acked.update(batch)
            batch = []
    pytest.fail("the disk never filled")


def _read_back(node: Standalone, manager: StreamManager, scope: str) -> Counter[str]:
    status, answer = request(node.base, "PUT", f"/v1/scopes/{scope}/streams/st/state",
                             node.token, {"streamState": "SEALED"})  # fmt: skip
    assert status == 200, answer
    with manager.create_reader(scope, "st") as reader:
        return Counter(event.data.decode() for event in reader)


def _node(disk: Path, env: dict[str, str] | None = None) -> tuple[Standalone, StreamManager, str]:
    node = Standalone(disk / "data", *free_ports(2), env=env)
    node.wait_for(READY_LINE)
    return node, *new_stream(node, segments=1)


def _after_freeing(manager: StreamManager, scope: str, filler: Path) -> float:
    """Delete the test's file; seconds until a new writer's event is acknowledged."""
    filler.unlink()
    freed = time.monotonic()

    def write_one() -> bool:
        try:
            with manager.create_writer(scope, "st", delivery_timeout_s=5) as writer:
                writer.write_event("after")
        except Exception:
            return False
        return True

    eventually(write_one, 30.0, "a write acknowledged after space was freed", every=0.5)
    return time.monotonic() - freed


def test_a_full_disk_refuses_appends_in_time_and_recovers_by_itself(small_disk: Path) -> None:
    node, manager, scope = _node(small_disk)
    try:
        restarts = _restarts(node)
        filler = _fill(small_disk, 0.9)
        acked, refused_for, why = _write_until_refused(manager, scope)
        assert refused_for <= DELIVERY_S + 10, refused_for
        assert why.startswith("DeliveryTimeoutError") and "appends refused: the disk of" in why, why
        tier1 = _tier1(node)
        assert "appends refused" in tier1.get("disk", ""), tier1
        # Stopped before tier-1 met ENOSPC (tier-2 flushes on the same disk may still take
        # what is left to others than root; what root keeps is the node's own room).
        assert not any("No space left on device" in line for line in node.lines), tier1
        assert os.statvfs(small_disk).f_bfree > 0
        status, answer = request(node.base, "POST", f"/v1/scopes/{scope}/streams/st/events",
                                 node.token, {"events": [{"data": "rest"}]})  # fmt: skip
        assert (status, answer["code"]) == (503, "tier1-unavailable"), answer
        assert "disk" in answer["message"], answer
        assert node.process.poll() is None and _restarts(node) == restarts, node.output()[-3000:]

        assert _after_freeing(manager, scope, filler) < 30.0
        eventually(lambda: not _tier1(node).get("disk", "DOWN").startswith("DOWN"), 10.0,
                   "health no longer naming the disk")  # fmt: skip
        read = _read_back(node, manager, scope)
        assert not acked - set(read), "acknowledged events lost"
        assert max(read.values()) == 1, [e[:20] for e, n in read.items() if n > 1][:5]
        assert _restarts(node) == restarts
        manager.close()
    finally:
        (small_disk.parent / "standalone.log").write_text(node.output())
        node.kill()


def test_without_the_threshold_the_same_writes_run_tier1_out_of_space(small_disk: Path) -> None:
    node, manager, scope = _node(small_disk, {"MILLRACE_TEST_UNSAFE": "no-disk-threshold"})
    try:
        filler = _fill(small_disk, 0.9)
        _write_until_refused(manager, scope)
        assert "No space left on device" in str(_tier1(node)) or any(
            "No space left on device" in line for line in node.lines
        ), _tier1(node)
        # Even run out of space, no process of the node dies of it (no SIGBUS: exit -7).
        assert node.process.poll() is None
        assert "exit status -7" not in node.output(), node.output()[-3000:]
        filler.unlink()
        manager.close()
    finally:
        (small_disk.parent / "standalone.log").write_text(node.output())
        node.kill()
