"""Traces of the controller, the worker and beat (``MILLRACE_TRACES``; ``millrace.kernel.traces``
says what the modes do).

Responsibility: set a process's exporter up and instrument what it serves with OpenTelemetry's
instrumentations: Django's requests (the REST API, the console; a client's ``traceparent``
continues its trace), the gRPC endpoint, and Celery (a task carries the trace context of whoever
sent it, so a workflow asked for over REST is one trace from the client's call to the
workflow's end). The controller starts it before it serves; a worker and beat from Celery's
``worker_init`` and ``beat_init`` signals (``connect``). Off, it imports nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from millrace.kernel import traces

log = logging.getLogger(__name__)


def start(role: str) -> bool:
    """Traces for this process of ``role`` (controller, worker, beat) when they are on."""
    mode = settings.MILLRACE.traces
    if mode == "off":
        return False
    try:
        traces.setup(role, mode)
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
        if role == "controller":
            from opentelemetry.instrumentation.django import DjangoInstrumentor
            from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorServer

            DjangoInstrumentor().instrument()
            GrpcAioInstrumentorServer().instrument()  # type: ignore[no-untyped-call]
    except ImportError as exc:
        log.error("MILLRACE_TRACES=%s needs the traces extra (pip install 'millrace[traces]'):"
                  " %s; no traces", mode, exc)  # fmt: skip
        return False
    log.info("traces on (%s)", mode)
    return True


def connect() -> None:
    """Start traces in a worker and in beat when Celery starts them."""
    from celery import signals

    signals.worker_init.connect(_worker, weak=False)
    signals.beat_init.connect(_beat, weak=False)


def _worker(**kwargs: Any) -> None:
    start("worker")


def _beat(**kwargs: Any) -> None:
    start("beat")
