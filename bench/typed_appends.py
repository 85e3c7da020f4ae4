"""Appends held to a stream's schema against the same appends unguarded (issue 46's target:
with ``header`` enforcement at least 0.95x the blocking writer without; ``validate``: its cost
stated).

One ``millrace standalone`` node (embedded defaults). Six streams of 4 segments: enforcement
``none``, ``header`` and ``validate``, each bound to its subject, where the schema is registered
with Confluent's client; ``varied``: ``header`` again with events of 8 sizes (96 to 103 B:
blocks the node walks event by event rather than judging at once); ``validate-json`` and
``validate-protobuf``: ``validate`` with JSON Schema and Protobuf. The events are what
Confluent's ``AvroSerializer`` (``JSONSerializer``, ``ProtobufSerializer`` with a class protoc
generates) makes of a record of a long and a string, 100 B each with the header. Each run is
the README's blocking loop in a process of its own: ``write_event`` of ``--events`` events over
64 routing keys, one ``flush``; the modes alternate run by run and the median of ``--runs`` is
compared.

    .venv/bin/python bench/typed_appends.py [--events 300000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from bench.services import standalone_node  # noqa: E402

MODES = ("none", "header", "validate", "varied", "validate-json", "validate-protobuf")
#: Each stream's enforcement.
ENFORCEMENT = {"none": "none", "header": "header", "validate": "validate", "varied": "header",
               "validate-json": "validate", "validate-protobuf": "validate"}  # fmt: skip
JSON_SCHEMA = json.dumps({"type": "object", "required": ["id", "note"], "properties": {
    "id": {"type": "integer"}, "note": {"type": "string"}}})  # fmt: skip
PROTO = 'syntax = "proto3"; package bench;\nmessage Reading { int64 id = 1; string note = 2; }\n'
SCHEMA = json.dumps({"type": "record", "name": "Reading", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": "string"}]})  # fmt: skip
EVENT_BYTES = 100
TARGET_RATIO = 0.95


def _serializer(client: Any, mode: str, work: Path) -> Any:
    """Confluent's serializer of the mode's format, and a maker of its values."""
    if mode == "validate-json":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        return JSONSerializer(JSON_SCHEMA, client), lambda note: {"id": 1, "note": note}
    if mode == "validate-protobuf":
        import importlib

        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        (work / "reading.proto").write_text(PROTO)
        protoc = [sys.executable, "-m", "grpc_tools.protoc", f"-I{work}", f"--python_out={work}"]
        subprocess.run([*protoc, str(work / "reading.proto")], check=True)
        sys.path.insert(0, str(work))
        reading = importlib.import_module("reading_pb2").Reading
        serializer = ProtobufSerializer(reading, client, {"use.deprecated.format": False})
        return serializer, lambda note: reading(id=1, note=note)
    from confluent_kafka.schema_registry.avro import AvroSerializer

    return AvroSerializer(client, SCHEMA), lambda note: {"id": 1, "note": note}


def _events(base: str, token: str, mode: str, sizes: range, work: Path) -> list[bytes]:
    """Events as Confluent's serializer writes them (registering the schema), one a size."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": f"{base}/registry",
                                   "bearer.auth.credentials.source": "STATIC_TOKEN",
                                   "bearer.auth.token": token,
                                   "bearer.auth.logical.cluster": "-",
                                   "bearer.auth.identity.pool.id": "-"})  # fmt: skip
    serializer, value = _serializer(client, mode, work)
    context = SerializationContext(f"bench.{mode}", MessageField.VALUE)
    probe = len(serializer(value(""), context))
    events = []
    for size in sizes:  # (the string's length, and a field's tag, take a byte or two)
        made = [serializer(value("n" * (size - probe - extra)), context) for extra in range(4)]
        events.append(next(e for e in made if len(e) == size))
    return events


def role_writer(spec: dict[str, Any]) -> dict[str, Any]:
    """The README's blocking loop over 64 keys, one flush; events/s."""
    from millrace.client.manager import StreamManager

    manager = StreamManager(spec["base"], token=spec["token"])
    writer = manager.create_writer(spec["scope"], spec["stream"])
    payloads = [bytes.fromhex(event) for event in spec["events_hex"]]
    payloads = [payloads[i % len(payloads)] for i in range(8)]
    keys = [f"key-{i}" for i in range(64)]
    writer.write_event(payloads[0], keys[0])  # connect before the clock starts
    writer.flush()
    write = writer.write_event
    count = spec["events"]
    started = time.perf_counter()
    for i in range(count):
        write(payloads[i & 7], keys[i & 63])
    writer.flush()
    elapsed = time.perf_counter() - started
    writer.close()
    manager.close()
    return {"events_per_s": count / elapsed}


def _role(spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HERE), "--role", json.dumps(spec)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"writer failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--role", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        print(json.dumps(role_writer(json.loads(args.role))))
        return
    with tempfile.TemporaryDirectory() as work, standalone_node(Path(work)) as (base, token, _):
        headers = {"Authorization": f"Token {token}"}
        rest = httpx.Client(base_url=f"{base}/v1", headers=headers, timeout=60)
        rest.post("/scopes", json={"scopeName": "bench"}).raise_for_status()
        events = {}
        for mode in MODES:
            body = {"streamName": mode,
                    "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 4},
                    "schema": {"enforcement": ENFORCEMENT[mode]}}  # fmt: skip
            rest.post("/scopes/bench/streams", json=body).raise_for_status()
            sizes = range(96, 104) if mode == "varied" else range(EVENT_BYTES, EVENT_BYTES + 1)
            events[mode] = [e.hex() for e in _events(base, token, mode, sizes, Path(work))]
        runs: dict[str, list[float]] = {mode: [] for mode in MODES}
        for run in range(args.runs):
            for mode in MODES:
                spec = {"base": base, "token": token, "scope": "bench", "stream": mode,
                        "events": args.events, "events_hex": events[mode]}  # fmt: skip
                runs[mode].append(_role(spec)["events_per_s"])
            print(f"  run {run + 1}: " + ", ".join(f"{m} {runs[m][-1]:,.0f}/s" for m in MODES),
                  file=sys.stderr)  # fmt: skip
    medians = {mode: statistics.median(runs[mode]) for mode in MODES}
    header, validate, varied, as_json, as_protobuf = (medians[m] / medians["none"]
                                                      for m in MODES[1:])  # fmt: skip
    result = {"events_per_s": medians, "header_ratio": header, "validate_ratio": validate,
              "varied_ratio": varied, "validate_json_ratio": as_json,
              "validate_protobuf_ratio": as_protobuf, "runs": runs,
              "met": header >= TARGET_RATIO}  # fmt: skip
    print(json.dumps(result))
    print(f"blocking writer, {EVENT_BYTES} B events, median of {args.runs} runs: "
          f"none {medians['none']:,.0f}/s, header {medians['header']:,.0f}/s ({header:.2f}x, "
          f"target {TARGET_RATIO}x: {'met' if result['met'] else 'NOT MET'}), "
          f"validate {medians['validate']:,.0f}/s ({validate:.2f}x), header with 8 sizes "
          f"{medians['varied']:,.0f}/s ({varied:.2f}x), validate JSON Schema "
          f"{medians['validate-json']:,.0f}/s ({as_json:.2f}x), validate Protobuf "
          f"{medians['validate-protobuf']:,.0f}/s ({as_protobuf:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
