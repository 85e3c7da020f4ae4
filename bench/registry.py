"""The schema registry's lookups by id, as Confluent's client makes them, with 10,000 schemas
registered (issue 46's registry target: p99 under 5 ms for an uncached client).

A ``millrace standalone`` node on embedded defaults (SQLite). ``--schemas`` distinct Avro
schemas are registered through the REST API (``POST /registry/subjects/<s>/versions``, 100
versions a subject, the level ``NONE``), four requests at a time, with a progress bar. Then
``--lookups`` schemas chosen at random are fetched by id one at a time with ``confluent-kafka``'s
``SchemaRegistryClient.get_schema``, its caches cleared before each call so each is a request
to the node, as a newly started consumer's first decode of each id is.

    .venv/bin/python bench/registry.py [--schemas 10000] [--lookups 2000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import standalone_node  # noqa: E402

PER_SUBJECT = 100
TARGET_P99_MS = 5.0


def _schema(n: int) -> str:
    fields = [{"name": "id", "type": "long"}, {"name": f"f{n}", "type": "string", "default": ""}]
    return json.dumps({"type": "record", "name": "Order", "namespace": "bench", "fields": fields})


def populate(base: str, token: str, count: int) -> list[int]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{base}/registry", headers=headers, timeout=60) as client:
        client.put("/config", json={"compatibility": "NONE"}).raise_for_status()

        def register(n: int) -> int:
            subject = f"bench.s{n // PER_SUBJECT:04d}-value"
            answer = client.post(f"/subjects/{subject}/versions", json={"schema": _schema(n)})
            answer.raise_for_status()
            return int(answer.json()["id"])

        with ThreadPoolExecutor(4) as pool:
            return list(tqdm(pool.map(register, range(count)), total=count, desc="register",
                             unit="schema", file=sys.stderr))  # fmt: skip


def look_up(base: str, token: str, ids: list[int], lookups: int) -> list[float]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({
        "url": f"{base}/registry", "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.token": token, "bearer.auth.logical.cluster": "millrace",
    })  # fmt: skip
    chosen = random.Random(7).choices(ids, k=lookups)
    for schema_id in chosen[:50]:  # (connections made, code warm)
        client.get_schema(schema_id)
    seconds = []
    for schema_id in tqdm(chosen, desc="look up", unit="id", file=sys.stderr):
        client.clear_caches()
        started = time.perf_counter()
        client.get_schema(schema_id)
        seconds.append(time.perf_counter() - started)
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schemas", type=int, default=10_000)
    p.add_argument("--lookups", type=int, default=2_000)
    args = p.parse_args(argv)
    if args.schemas < 1 or args.lookups < 1:
        p.error("--schemas and --lookups must be at least 1")
    with (
        tempfile.TemporaryDirectory(prefix="millrace-bench-") as tmp,
        standalone_node(Path(tmp)) as (base, token, _),
    ):
        started = time.perf_counter()
        ids = populate(base, token, args.schemas)
        took = time.perf_counter() - started
        seconds = look_up(base, token, ids, args.lookups)
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[int(len(ms) * 0.99) - 1]
    rate = len(ids) / took
    print(f"registered {len(set(ids)):,} schemas in {took:.0f} s ({rate:,.0f}/s, 4 at once)")
    print(f"get_schema by id, uncached, {len(ms):,} lookups: p50 {statistics.median(ms):.2f} ms, "
          f"p99 {p99:.2f} ms, max {ms[-1]:.2f} ms")  # fmt: skip
    print(f"target p99 < {TARGET_P99_MS:g} ms: {'MET' if p99 < TARGET_P99_MS else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
