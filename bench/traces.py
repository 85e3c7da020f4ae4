"""Appends with traces off and on: the cost of the client's spans.

Target (issue 47): traces off, appends within noise of the client without them; on at 1 %
sampling, at least 0.95x the rate.

One ``millrace standalone`` node (embedded defaults). Each run is a child process writing
``--events`` events of 100 bytes through the blocking writer, as the README shows, with a
``flush()`` every ``--flush-every`` events (each flush is one ``send`` span: small flushes are
the worst case for tracing). The runs, interleaved ``--rounds`` times:

* ``without``: the client's tracing calls replaced by no-ops (the client before traces);
* ``off``: the client as shipped, no tracer provider set (OpenTelemetry's API installed);
* ``1%``: OpenTelemetry's SDK set up by the program, ``ParentBased(TraceIdRatioBased(0.01))``,
  spans batched to an exporter that serializes them (to /dev/null);
* ``100%``: the same, every span sampled (for reference).

Usage::

    .venv/bin/python bench/traces.py
    .venv/bin/python bench/traces.py --events 5000 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import services

CASES = ("without", "off", "1%", "100%")


def _child(args: argparse.Namespace) -> None:
    if args.case == "without":
        from millrace.kernel import traces

        traces.span = lambda *a, **k: contextlib.nullcontext()  # type: ignore[assignment]
        traces.inject = lambda headers: headers  # type: ignore[assignment]
    elif args.case in ("1%", "100%"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        ratio = 0.01 if args.case == "1%" else 1.0
        provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
        sink = open("/dev/null", "w")  # noqa: SIM115 - lives as long as the child
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sink)))
        trace.set_tracer_provider(provider)
    services.timed_writes(args.base, args.token, args.stream, args.events, args.flush_every)


def _run(case: str, base: str, token: str, stream: str, args: argparse.Namespace) -> float:
    found = services.child_result([__file__, "--child", case, "--base", base, "--token", token,
                                   "--stream", stream, "--events", str(args.events),
                                   "--flush-every", str(args.flush_every)])  # fmt: skip
    return float(found["events_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--flush-every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=CASES)
    parser.add_argument("--base")
    parser.add_argument("--token")
    parser.add_argument("--stream")
    args = parser.parse_args()
    if args.child:
        args.case = args.child
        _child(args)
        return
    from millrace.client.manager import StreamManager

    rates: dict[str, list[float]] = {case: [] for case in CASES}
    with (
        tempfile.TemporaryDirectory() as tmp,
        services.standalone_node(Path(tmp)) as (base, token, _),
    ):
        with StreamManager(base, token=token) as manager:
            manager.create_scope("bench")
            manager.create_stream("bench", "st", 4)
        for round_ in range(args.rounds):
            for case in CASES:
                rates[case].append(_run(case, base, token, "st", args))
                print(f"round {round_ + 1} {case}: {rates[case][-1]:,.0f} events/s",
                      file=sys.stderr)  # fmt: skip
    medians = {case: statistics.median(found) for case, found in rates.items()}
    print(json.dumps({
        "events": args.events, "flush_every": args.flush_every, "rates": rates,
        "median": medians,
        "off_vs_without": medians["off"] / medians["without"],
        "one_percent_vs_off": medians["1%"] / medians["off"],
        "all_vs_off": medians["100%"] / medians["off"],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
