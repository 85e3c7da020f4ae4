"""Catch-up reads from tier-2 with a cold cache: ``filesystem`` beside ``s3`` and ``hdfs``.

Target (issue 17, section 4): for each tier-2 backend, next to ``filesystem``, the catch-up
read throughput from tier-2 with a cold cache (recorded; the issue sets no ratio for it).

``s3`` is moto's S3 server; ``hdfs`` is the WebHDFS test double (``tests/tiers/
webhdfs_server.py``: a Python HTTP server over local files, not HDFS), so its figure measures
the tier's WebHDFS path, not an HDFS cluster.

For each backend in turn (``--repeat`` times, interleaved): a segment store node (``millrace
segmentstore``, file tier-1, auth off) with ``MILLRACE_TIER2=<backend>`` writes ``--mib`` MiB
of 10 KiB events into one segment through the wire client (pipelined blocks), waits until the
node's metrics say all of it is in tier-2, stops (SIGTERM), and starts again on the same data
directory with a 16 MiB cache. Its tier-1 is replayed into that cache at start (what the
replay shows is in tier-2 is evicted as it goes), so nearly all of the segment comes from
tier-2. A reader then reads the segment from offset 0 to its end, 2 MiB per read with 4 reads
outstanding, as a catching-up reader does; the time of that read is the figure (MB/s =
10^6 bytes/s), with the ratio to ``filesystem``.

Usage::

    .venv/bin/python bench/tier_catchup.py                 # 512 MiB per backend, 3 runs each
    .venv/bin/python bench/tier_catchup.py --mib 64 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
import services  # a sibling module: bench/ is not a package

from millrace.client.transport.segment_store import SegmentStoreClient
from tests.tiers.s3_server import CREDENTIALS, make_bucket, moto_server
from tests.tiers.webhdfs_server import webhdfs_server

SEGMENT = "bench/catchup/0.#epoch.0"
EVENT = 10 * 1024
READ_BYTES = 2 * 1024 * 1024
READS_OUTSTANDING = 4
CACHE_BYTES = 16 * 1024 * 1024
BACKENDS = ("filesystem", "s3", "hdfs")


def lag_bytes(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as got:
        text = got.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("millrace_container_tier2_lag_bytes{")
    )


async def write(port: int, total: int) -> None:
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    try:
        await client.create_segment(SEGMENT)
        writer = uuid.uuid4()
        await client.setup_append(SEGMENT, writer)
        block = [os.urandom(EVENT)] * 25
        pending: list[asyncio.Future[Any]] = []
        for _ in range(0, total, EVENT * len(block)):
            pending.append(await client.append_block(writer, block))
            if len(pending) >= 16:
                await pending.pop(0)
        await asyncio.gather(*pending)
    finally:
        await client.close()


async def read(port: int) -> tuple[int, float]:
    """Bytes read and seconds, from 0 to the segment's end."""
    client = await SegmentStoreClient.connect("127.0.0.1", port)
    try:
        length = (await client.get_info(SEGMENT)).write_offset
        started = time.perf_counter()
        offsets = iter(range(0, length, READ_BYTES))
        done = 0

        async def reader() -> None:
            nonlocal done
            for offset in offsets:
                at = offset
                while at < min(offset + READ_BYTES, length):
                    got = await client.read_segment(SEGMENT, at, offset + READ_BYTES - at)
                    at += len(got.data)
                    done += len(got.data)

        await asyncio.gather(*(reader() for _ in range(READS_OUTSTANDING)))
        return done, time.perf_counter() - started
    finally:
        await client.close()


def one_run(backend: str, env: dict[str, str], total: int, work: Path) -> dict[str, Any]:
    metrics = services.spare_port()
    env = {**env, "MILLRACE_SEGMENTSTORE_METRICS_PORT": str(metrics)}
    with services.millrace_node(work, env=env) as (_, port, _pid):
        asyncio.run(write(port, total))
        deadline = time.monotonic() + 300
        while lag_bytes(metrics) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{backend}: tier-2 never caught up")
            time.sleep(0.2)
    cold = {**env, "MILLRACE_CACHE_BYTES": str(CACHE_BYTES)}
    with services.millrace_node(work, env=cold) as (_, port, _pid):
        done, seconds = asyncio.run(read(port))
    if done < total:
        raise RuntimeError(f"{backend}: read {done} of {total} bytes")
    return {"backend": backend, "bytes": done, "seconds": seconds, "mb_s": done / seconds / 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512, help="MiB written, then read, each run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.mib < 1 or args.repeat < 1:
        parser.error("--mib and --repeat must be at least 1")
    total = args.mib * 1024 * 1024
    root = Path(tempfile.mkdtemp(prefix="millrace-bench-catchup-"))
    runs: list[dict[str, Any]] = []
    try:
        with moto_server() as s3_url, webhdfs_server(root / "webhdfs") as namenode:
            make_bucket(s3_url, "bench")
            for rep in range(args.repeat):
                for backend in BACKENDS:
                    env: dict[str, str] = {"MILLRACE_TIER2": backend}
                    if backend == "s3":
                        options = {"bucket": "bench", "prefix": f"r{rep}/", "endpoint_url": s3_url}
                        env.update(CREDENTIALS, MILLRACE_TIER2_OPTIONS=json.dumps(options))
                    if backend == "hdfs":
                        hdfs = {"url": namenode.url, "root": f"/r{rep}"}
                        env.update(MILLRACE_TIER2_OPTIONS=json.dumps(hdfs))
                    work = root / f"{backend}-{rep}"
                    run = one_run(backend, env, total, work)
                    shutil.rmtree(work, ignore_errors=True)
                    runs.append(run)
                    print(f"  {backend} #{rep + 1}: {run['mb_s']:.1f} MB/s"
                          f" ({run['seconds']:.2f} s)", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    median = {b: statistics.median(r["mb_s"] for r in runs if r["backend"] == b)
              for b in BACKENDS}  # fmt: skip
    print(f"\ncatch-up read of {args.mib} MiB from tier-2, cold cache, median of {args.repeat}:")
    print("| tier-2 | MB/s | vs filesystem |\n| --- | ---: | ---: |")
    for backend, value in median.items():
        print(f"| {backend} | {value:.1f} | {value / median['filesystem']:.2f} |")
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "median_mb_s": median}, indent=2))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
