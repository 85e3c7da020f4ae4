"""Kafka's clients against a standalone node's Kafka listener, beside Redis and Millrace's own
client, in one run (issue 59's targets).

Usage::

    .venv/bin/python bench/kafka_clients.py          # 1,000,000 records, 3 rounds (minutes)
    .venv/bin/python bench/kafka_clients.py --quick  # 100,000 records, 1 round (a smoke run)

One ``millrace standalone`` (embedded defaults: SQLite, file tier-1 with fdatasync before every
acknowledgement, filesystem tier-2), every client a process of its own, rounds interleaved:

* **produce**: a ``confluent-kafka`` producer (``acks=all``, its default batching) produces
  records of 100 B, no key, to a topic of one partition, and flushes: records/s = records /
  (first produce to flush done). Beside it, the README's blocking writer (``write_event`` of
  100 B with routing keys, one ``flush``) and redis-py pipelining ``XADD`` (1000 per pipeline)
  into ``redis-server --appendfsync always``. Targets: >= 3x Redis, >= 0.5x Millrace's writer.
* **consume**: a ``confluent-kafka`` consumer in a new group reads the records back (from the
  first record to the last); beside it a reader group's blocking ``read_next`` loop over the
  writer's events. Target: >= 0.5x Millrace's reader.
* **lone**: one ``produce`` + ``flush()`` at a time (``acks=all``), 500 times; median and p90.
  Target: median <= 1 ms.
* **CPU**: the segment store process's CPU time (user + system, from /proc) while each producer
  runs, per record.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_client import _redis_pipelined, _role
from services import redis_server, spare_port, standalone_node

HERE = Path(__file__).resolve()
RECORDS = 1_000_000


def _kafka_settings(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{spec['kafka_port']}",
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
        "sasl.username": "admin", "sasl.password": spec["token"],
    }  # fmt: skip


def role_kafka_producer(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    settings = _kafka_settings(spec)
    admin = AdminClient(settings)
    admin.create_topics([NewTopic(spec["topic"], num_partitions=1)])[spec["topic"]].result(60)
    producer = Producer({**settings, "acks": "all"})
    payload = bytes(range(100))
    producer.produce(spec["topic"], payload)  # (connections made before the clock)
    producer.flush(60)
    failed = []
    count = spec["records"]
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(spec["topic"], payload,
                                 on_delivery=lambda e, m: e and failed.append(e))  # fmt: skip
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    return {"records": count, "seconds": elapsed, "records_per_s": count / elapsed,
            "failed": len(failed)}  # fmt: skip


def role_kafka_consumer(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Consumer

    consumer = Consumer({**_kafka_settings(spec), "group.id": spec["group"],
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([spec["topic"]])
    want = spec["records"] + 1
    first = None
    while first is None:
        first = consumer.poll(30)
    got = 1
    started = time.perf_counter()
    while got < want:
        batch = consumer.consume(10_000, 10)
        if not batch:
            break
        got += len(batch)
    elapsed = time.perf_counter() - started
    consumer.close()
    return {"records": got, "seconds": elapsed, "records_per_s": (got - 1) / elapsed}


def role_kafka_lone(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer({**_kafka_settings(spec), "acks": "all"})
    payload = bytes(range(100))
    producer.produce(spec["topic"], payload)
    producer.flush(60)
    took = []
    for _ in range(spec["samples"]):
        started = time.perf_counter()
        producer.produce(spec["topic"], payload)
        producer.flush(10)
        took.append(time.perf_counter() - started)
    took.sort()
    return {"median_ms": statistics.median(took) * 1000,
            "p90_ms": took[int(len(took) * 0.9)] * 1000}  # fmt: skip


ROLES = {"kafka_producer": role_kafka_producer, "kafka_consumer": role_kafka_consumer,
         "kafka_lone": role_kafka_lone}  # fmt: skip


def _kafka_role(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(HERE), "--role", name, json.dumps(spec)],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _store_pid(work: Path) -> int:
    """The standalone's segment store process (its command line names ``segmentstore``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b" segmentstore " in line and str(work).encode() in line:
            return int(entry.name)
    raise RuntimeError("no segment store process found")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _with_cpu(pid: int, run: Any) -> tuple[dict[str, Any], float]:
    before = _cpu_seconds(pid)
    result = run()
    return result, _cpu_seconds(pid) - before


def measure(work: Path, rounds: int, records: int) -> dict[str, Any]:
    kafka_port = spare_port()
    runs: dict[str, list[float]] = {k: [] for k in (
        "kafka_produce", "writer", "redis", "kafka_consume", "read_next", "lone_median",
        "lone_p90", "kafka_cpu_us", "writer_cpu_us")}  # fmt: skip
    (work / "node").mkdir(parents=True)
    with (
        standalone_node(work / "node", env={"MILLRACE_KAFKA_PORT": str(kafka_port)}) as (
            base, token, _wire),
        redis_server(work / "redis") as (host, port, _pid),
    ):  # fmt: skip
        store = _store_pid(work / "node")
        for n in range(rounds):
            spec = {"kafka_port": kafka_port, "token": token, "records": records,
                    "topic": f"bench{n}", "group": f"g{n}", "samples": 500}  # fmt: skip
            produced, cpu = _with_cpu(store, lambda s=spec: _kafka_role("kafka_producer", s))
            assert produced["failed"] == 0, produced
            runs["kafka_produce"].append(produced["records_per_s"])
            runs["kafka_cpu_us"].append(cpu / records * 1e6)
            wspec = {"base": base, "token": token, "scope": f"w{n}", "stream": "s",
                     "events": records, "group": f"rg{n}", "mode": "next"}  # fmt: skip
            written, cpu = _with_cpu(store, lambda s=wspec: _role("blocking_writer", s))
            runs["writer"].append(written["events_per_s"])
            runs["writer_cpu_us"].append(cpu / records * 1e6)
            runs["redis"].append(_redis_pipelined(host, port))
            runs["kafka_consume"].append(_kafka_role("kafka_consumer", spec)["records_per_s"])
            runs["read_next"].append(_role("blocking_reader", wspec)["events_per_s"])
            lone = _kafka_role("kafka_lone", {**spec, "topic": f"lone{n}"})
            runs["lone_median"].append(lone["median_ms"])
            runs["lone_p90"].append(lone["p90_ms"])
            print(f"  round {n + 1}: " + ", ".join(f"{k} {v[-1]:,.2f}" for k, v in runs.items()),
                  file=sys.stderr)  # fmt: skip
    m = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "records": records, "rounds": rounds, "medians": m, "runs": runs,
        "met": {
            "produce_vs_redis": m["kafka_produce"] >= 3 * m["redis"],
            "produce_vs_writer": m["kafka_produce"] >= 0.5 * m["writer"],
            "consume_vs_reader": m["kafka_consume"] >= 0.5 * m["read_next"],
            "lone": m["lone_median"] <= 1.0,
        },
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--role", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.role:
        print(json.dumps(ROLES[args.role](json.loads(rest[0]))))
        return 0
    rounds, records = (1, 100_000) if args.quick else (args.rounds, RECORDS)
    print(f"machine: {os.cpu_count()} cores, {platform.python_implementation()} "
          f"{platform.python_version()}, {platform.platform()};"
          f" load {os.getloadavg()[0]:.2f}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="millrace-kafka-") as scratch:
        result = measure(Path(scratch), rounds, records)
    m, met = result["medians"], result["met"]

    def verdict(name: str) -> str:
        return "MET" if met[name] else "NOT MET"

    print(f"{records:,} records of 100 B, medians of {rounds} rounds:")
    print(f"  confluent-kafka produce (acks=all): {m['kafka_produce']:,.0f} records/s;"
          f" Redis XADD pipelined (AOF always) {m['redis']:,.0f}:"
          f" {m['kafka_produce'] / m['redis']:.1f}x"
          f" (>= 3x: {verdict('produce_vs_redis')}); Millrace's blocking writer"
          f" {m['writer']:,.0f}: {m['kafka_produce'] / m['writer']:.2f}x"
          f" (>= 0.5x: {verdict('produce_vs_writer')})")  # fmt: skip
    print(f"  confluent-kafka consume: {m['kafka_consume']:,.0f} records/s; Millrace's read_next"
          f" {m['read_next']:,.0f}: {m['kafka_consume'] / m['read_next']:.2f}x"
          f" (>= 0.5x: {verdict('consume_vs_reader')})")  # fmt: skip
    print(f"  lone produce + flush: median {m['lone_median']:.2f} ms, p90 {m['lone_p90']:.2f} ms"
          f" (<= 1 ms: {verdict('lone')})")  # fmt: skip
    print(f"  node CPU per record: Kafka produce {m['kafka_cpu_us']:.2f} µs, Millrace's writer"
          f" {m['writer_cpu_us']:.2f} µs")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
