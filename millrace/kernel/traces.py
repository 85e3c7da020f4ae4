"""Traces with OpenTelemetry: off by default, and free when off.

Responsibility: the spans the client and the node's processes make, and how a node's process
exports them.

* ``span(name, kind, **attributes)`` and ``inject(headers)`` are what the client and the
  controller call. They do nothing (one check, no allocation) unless the ``opentelemetry``
  API is installed and a program set a tracer provider (an application with OpenTelemetry's
  SDK, or a node's process with ``MILLRACE_TRACES``). The client needs only the API; a client
  installed without it traces nothing.
* ``current_traceparent()`` and ``remote_span(traceparent, ...)`` carry a sampled trace over
  the wire protocol (the client's ``TraceContext`` before a request; the segment store's span
  for it).
* ``setup(role, mode)`` sets a node's process up (``MILLRACE_TRACES``, the ``traces`` extra):
  ``off``; ``otlp`` (OTLP over HTTP, configured by OpenTelemetry's own variables,
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` and the rest; sampling by ``OTEL_TRACES_SAMPLER`` and
  ``OTEL_TRACES_SAMPLER_ARG``); or ``file:DIR`` (each process appends its spans as JSON
  lines to ``DIR/<role>-<pid>.jsonl``, for debugging and the tests). The service name is
  ``OTEL_SERVICE_NAME``, else ``millrace-<role>``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "MODES",
    "active",
    "current_traceparent",
    "inject",
    "messaging",
    "remote_span",
    "setup",
    "span",
]

#: What ``MILLRACE_TRACES`` may say (``file:`` takes a directory after it).
MODES = ("off", "otlp", "file:")

#: OpenTelemetry's ``trace`` and ``propagate`` modules once looked for; False: not installed.
_api: Any = None


def _otel() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import propagate, trace
        except ImportError:
            _api = False
        else:
            _api = (trace, propagate)
    return _api


def active() -> bool:
    """Whether spans are recorded: the API is installed and a tracer provider was set."""
    api = _otel()
    return bool(api) and not isinstance(api[0].get_tracer_provider(), api[0].ProxyTracerProvider)


@contextlib.contextmanager
def span(name: str, kind: str = "internal", **attributes: Any) -> Iterator[Any]:
    """A span around the block (``kind``: internal, client, server, producer, consumer), or
    nothing when tracing is off. Yields the span (None when off)."""
    if not active():
        yield None
        return
    trace = _api[0]
    tracer = trace.get_tracer("millrace")
    with tracer.start_as_current_span(
        name, kind=getattr(trace.SpanKind, kind.upper()), attributes=attributes
    ) as current:
        yield current


def messaging(operation: str, scope: str, stream: str, **more: Any) -> dict[str, Any]:
    """OpenTelemetry's messaging attributes for an operation on ``scope/stream``."""
    return {
        "messaging.system": "millrace",
        "messaging.destination.name": f"{scope}/{stream}",
        "messaging.operation.type": operation,
        **more,
    }


def inject(headers: dict[str, str] | None) -> dict[str, str] | None:
    """``headers`` with the current trace context (``traceparent``) when tracing is on."""
    if not active():
        return headers
    carrier = dict(headers or {})
    _api[1].inject(carrier)
    return carrier


def current_traceparent() -> str | None:
    """The current span's ``traceparent`` while it is sampled (for the wire's
    ``TraceContext``), else None: a request outside a sampled trace sends nothing more."""
    if not active():
        return None
    context = _api[0].get_current_span().get_span_context()
    if not (context.is_valid and context.trace_flags.sampled):
        return None
    carrier: dict[str, str] = {}
    _api[1].inject(carrier)
    return carrier.get("traceparent")


@contextlib.contextmanager
def remote_span(traceparent: str | None, name: str, **attributes: Any) -> Iterator[Any]:
    """A server span, the child of a peer's ``traceparent`` (nothing when there is none or
    tracing is off here)."""
    if traceparent is None or not active():
        yield None
        return
    trace, propagate = _api
    parent = propagate.extract({"traceparent": traceparent})
    tracer = trace.get_tracer("millrace")
    with tracer.start_as_current_span(
        name, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
    ) as current:
        yield current


def setup(role: str, mode: str) -> bool:
    """Set this process's tracer provider up for ``mode`` (see the module); False when off."""
    if mode == "off":
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    name = os.environ.get("OTEL_SERVICE_NAME") or f"millrace-{role}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if mode == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif mode.startswith("file:"):
        where = Path(mode.removeprefix("file:"))
        where.mkdir(parents=True, exist_ok=True)
        out = open(where / f"{role}-{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115
        exporter = ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n")
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        raise ValueError(f"MILLRACE_TRACES is off, otlp or file:DIR, not {mode!r}")
    trace.set_tracer_provider(provider)
    return True
