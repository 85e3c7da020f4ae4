"""Traces (``millrace.kernel.traces``), each case in a fresh Python process (a tracer provider
is set once per process): off, the client's spans and header injection do nothing; a node's
process set up with ``file:DIR`` writes its spans as JSON lines; a bad ``MILLRACE_TRACES`` is
a configuration error naming it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from millrace.kernel.config import ConfigError, WebSettings


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_off_the_spans_and_the_headers_are_untouched() -> None:
    said = _python(
        "from millrace.kernel import traces\n"
        "headers = {'a': 'b'}\n"
        "with traces.span('send x/y', 'producer', k=1) as s:\n"
        "    print(s is None, traces.inject(headers) is headers, traces.active())\n"
    )
    assert said.split() == ["True", "True", "False"]


def test_a_process_set_up_with_a_directory_writes_its_spans(tmp_path: Path) -> None:
    said = _python(
        "from millrace.kernel import traces\n"
        f"print(traces.setup('worker', 'file:{tmp_path}'))\n"
        "with traces.span('send sc/st', 'producer', **traces.messaging('send', 'sc', 'st')):\n"
        "    print(sorted(traces.inject({'a': 'b'})))\n"
    )
    assert said.splitlines() == ["True", "['a', 'traceparent']"]
    (written,) = tmp_path.glob("worker-*.jsonl")
    (span,) = [json.loads(line) for line in written.read_text().splitlines()]
    assert span["name"] == "send sc/st" and span["kind"] == "SpanKind.PRODUCER"
    assert span["attributes"]["messaging.destination.name"] == "sc/st"
    assert span["resource"]["attributes"]["service.name"] == "millrace-worker"


def test_a_bad_mode_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as caught:
        WebSettings.from_env({"MILLRACE_TRACES": "jaeger"})
    assert "MILLRACE_TRACES='jaeger'" in str(caught.value)
    assert WebSettings.from_env({"MILLRACE_TRACES": "file:/tmp/x"}).traces == "file:/tmp/x"
