"""Traces across processes: a program with OpenTelemetry's SDK (its in-memory exporter) uses
the Python client against a ``millrace standalone`` node whose controller, worker, beat
and segment store write their spans to files (``MILLRACE_TRACES=file:DIR``). Checked:

* the client's appends, reads and commits are spans with OpenTelemetry's messaging names;
* sealing a stream is one trace from the program's span through the client's REST call, the
  controller's request and the Celery task's publication to the worker running the workflow,
  and the segment store sealing the segment (a ``TraceContext`` before the wire request).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.standalone_node import Standalone, eventually, running_standalone

pytestmark = pytest.mark.slow

pytest.importorskip("opentelemetry.sdk", reason="the traces extra is not installed")


@pytest.fixture(scope="module")
def spans_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spans")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, spans_dir: Path) -> Iterator[Standalone]:
    env = {"MILLRACE_TRACES": f"file:{spans_dir}", "MILLRACE_CANARY_PERIOD_S": "0"}
    yield from running_standalone(tmp_path_factory, "traces", env)


def _server_spans(spans_dir: Path) -> list[dict[str, Any]]:
    found = []
    for path in spans_dir.glob("*.jsonl"):
        role = path.name.split("-", 1)[0]
        for line in path.read_text().splitlines():
            if line.strip():
                found.append({**json.loads(line), "role": role})
    return found


def test_one_trace_from_the_clients_call_to_the_workflows_end(
    node: Standalone, spans_dir: Path
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # (as a program does; once per process)
    tracer = trace.get_tracer("the program")
    scope = f"tr{uuid.uuid4().hex[:8]}"
    with node.manager() as manager:
        manager.create_scope(scope)
        manager.create_stream(scope, "st", 1)
        with manager.create_writer(scope, "st") as writer:
            writer.write_event(b"x", routing_key="k")
            writer.flush()
        txns = manager.create_transaction_writer(scope, "st")
        txn = txns.begin_txn()
        txn.write_event(b"y", routing_key="k")
        txn.commit()
        group = manager.create_reader_group(scope, "g", [f"{scope}/st"])
        with group.create_reader("r1") as reader:
            assert reader.read_next(timeout=30) is not None
        with tracer.start_as_current_span("the program seals the stream") as root:
            manager.seal_stream(scope, "st")
    trace_id = f"0x{root.get_span_context().trace_id:032x}"

    mine = {span.name: span for span in exporter.get_finished_spans()}
    send = mine[f"send {scope}/st"]
    assert send.kind == trace.SpanKind.PRODUCER
    assert send.attributes["messaging.system"] == "millrace"
    assert send.attributes["messaging.destination.name"] == f"{scope}/st"
    assert mine[f"commit {scope}/st"].attributes["messaging.operation.name"] == "commit"
    receive = mine[f"receive {scope}/g"]
    assert receive.attributes["messaging.operation.type"] == "receive"
    assert receive.attributes["messaging.batch.message_count"] >= 1

    def whole() -> list[dict[str, Any]] | None:
        spans = [s for s in _server_spans(spans_dir) if s["context"]["trace_id"] == trace_id]
        roles = {s["role"] for s in spans}
        return spans if {"controller", "worker"} <= roles else None

    def whole_with_store() -> list[dict[str, Any]] | None:
        spans = whole()
        return spans if spans and any(s["role"] == "segmentstore" for s in spans) else None

    spans = eventually(whole_with_store, 30, "the controller's, worker's and store's spans")
    by_id = {s["context"]["span_id"]: s for s in spans}
    [run] = [s for s in spans if s["role"] == "worker" and s["name"].startswith("run/")]
    sealed = [s for s in spans if s["name"] == "segmentstore SealSegment"]
    assert sealed and sealed[0]["kind"] == "SpanKind.SERVER", spans
    assert sealed[0]["attributes"]["millrace.segment"].startswith(f"{scope}/st/")
    chain, ids, span = [], set(), sealed[0]
    while span is not None:  # from the segment store up to the request the client made
        chain.append((span["role"], span["kind"]))
        ids.add(span["context"]["span_id"])
        span = by_id.get(span.get("parent_id"))
    assert run["context"]["span_id"] in ids, chain  # the workflow's task sealed it
    assert ("worker", "SpanKind.CONSUMER") in chain, chain  # the task that ran the workflow
    assert ("controller", "SpanKind.SERVER") in chain, chain  # Django's request
    assert ("controller", "SpanKind.PRODUCER") in chain, chain  # the task's publication
    # the controller's request span is the child of the client's call, under the program's span
    [request] = [s for s in spans if s["role"] == "controller" and s["kind"] == "SpanKind.SERVER"
                 and s["attributes"].get("http.request.method", s["attributes"].get(
                     "http.method")) == "PUT"]  # fmt: skip
    client_call = next(s for s in exporter.get_finished_spans()
                       if f"0x{s.context.span_id:016x}" == request["parent_id"])  # fmt: skip
    assert client_call.kind == trace.SpanKind.CLIENT
    assert client_call.parent.span_id == root.get_span_context().span_id
