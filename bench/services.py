"""Servers the benchmarks drive: a Millrace segment store node and a redis-server, as processes.

Responsibility: start each on a spare loopback port with a data directory of its own under a
temporary directory, wait until it answers, and stop it (SIGTERM, then SIGKILL after a grace
period) however the benchmark ends. Optionally the node runs under a profiler: ``py-spy record``
(raw folded stacks) or ``cProfile`` (a ``.prof`` file); both are written when the node stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 30.0
REDIS_SERVER = "/usr/bin/redis-server"
_LISTENING = re.compile(r"listening on [^:]+:(\d+)")


def spare_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes], pid: int | None = None) -> None:
    """SIGTERM ``pid`` (default: the process itself), wait, SIGKILL the process if it hangs."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid or proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def child_pid(pid: int) -> int | None:
    """The first child of ``pid`` (the node under py-spy), from /proc."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    return None


def py_spy_command(out: Path) -> list[str]:
    """``py-spy record`` writing raw folded stacks to ``out`` (append ``--`` and a command)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    # --nonblocking: sampling does not pause the process (the figures stay close to an
    # unprofiled run; a stack may now and then be torn)
    flags = ["--format", "raw", "--rate", "250", "--threads", "--nonblocking"]
    return [py_spy, "record", *flags, "-o", str(out)]


def node_command(data_dir: Path, profile: str | None, profile_out: Path | None) -> list[str]:
    node = [sys.executable, "-m", "millrace.ops.cli", "segmentstore", "--data-dir", str(data_dir)]
    node += ["--port", "0"]
    if profile == "py-spy":
        assert profile_out is not None
        return [*py_spy_command(profile_out), "--", *node]
    if profile == "loop-stalls":
        probe = str(Path(__file__).resolve().parent / "loop_stalls.py")
        return [sys.executable, probe, str(profile_out), *node[3:]]
    if profile == "cprofile":
        return [sys.executable, "-m", "cProfile", "-o", str(profile_out), *node[1:]]
    return node


@contextlib.contextmanager
def millrace_node(
    work_dir: Path,
    *,
    profile: str | None = None,
    profile_out: Path | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[tuple[str, int, int]]:
    """A segment store node (file tier-1, filesystem tier-2, auth off) on ``work_dir/data``;
    yields (host, port, pid of the node's Python process)."""
    data_dir = work_dir / "millrace-data"
    data_dir.mkdir(parents=True, exist_ok=True)  # (a node started again on it: a restart)
    env = {**os.environ, "MILLRACE_AUTH": "off", "PYTHONUNBUFFERED": "1", **(env or {})}
    log_path = work_dir / "node.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            node_command(data_dir, profile, profile_out),
            stdout=subprocess.PIPE,
            stderr=log_file,
            env=env,
            start_new_session=True,
        )
    node_pid: int | None = None
    try:
        port = _await_listening(proc, log_path)
        node_pid = child_pid(proc.pid) if profile == "py-spy" else proc.pid
        yield "127.0.0.1", port, node_pid or proc.pid
    finally:
        _stop(proc, node_pid)
        if proc.stdout is not None:
            proc.stdout.close()


def _await_listening(proc: subprocess.Popen[bytes], log_path: Path) -> int:
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode(errors="replace")
        if not line and proc.poll() is not None:
            break
        match = _LISTENING.search(line)
        if match:
            return int(match.group(1))
    tail = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"segment store node did not start (exit {proc.poll()}):\n{tail}")


@contextlib.contextmanager
def redis_server(work_dir: Path) -> Iterator[tuple[str, int, int]]:
    """redis-server with AOF on and fsync on every write, no RDB snapshots; yields
    (host, port, pid)."""
    import redis

    data_dir = work_dir / "redis-data"
    data_dir.mkdir(parents=True)
    port = spare_port()
    cmd = [
        REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
        "--appendonly", "yes", "--appendfsync", "always", "--save", "",
        "--daemonize", "no", "--logfile", str(work_dir / "redis.log"),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start (exit {proc.poll()})") from None
                time.sleep(0.05)
        client.close()
        yield "127.0.0.1", port, proc.pid
    finally:
        _stop(proc)


@contextlib.contextmanager
def standalone_node(
    work_dir: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, str, int]]:
    """``millrace standalone`` on spare ports with embedded defaults (and ``env``); yields
    (REST base URL, admin token, wire port)."""
    data_dir = work_dir / "standalone"
    http, wire = spare_port(), spare_port()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
        "MILLRACE_SEGMENTSTORE_METRICS_PORT": str(spare_port()),
        "MILLRACE_GRPC_PORT": str(spare_port()),
        **(env or {}),
    }
    log = open(work_dir / "standalone.log", "w+b")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "millrace.ops.cli", "standalone", "--data-dir", str(data_dir),
         "--http-port", str(http), "--segmentstore-port", str(wire)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S * 2
        while b"Millrace is running" not in (work_dir / "standalone.log").read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (work_dir / "standalone.log").read_bytes()[-3000:].decode(errors="replace")
                raise RuntimeError(f"standalone did not start:\n{tail}")
            time.sleep(0.1)
        token = (data_dir / "admin-token").read_text().strip()
        scheme = "https" if env.get("MILLRACE_TLS_ENABLED") == "1" else "http"
        yield f"{scheme}://127.0.0.1:{http}", token, wire
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def rest_call(base: str, token: str, method: str, path: str, body: Any = None) -> Any:
    """One REST call with the token (JSON in and out; ``None`` for an empty answer)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Token {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


@contextlib.contextmanager
def scratch_backend(backend: str, postgres_url: str) -> Iterator[dict[str, str]]:
    """The environment of a child process with Django on a scratch data directory and, for
    ``postgresql``, a scratch database ``millrace_bench_<pid>`` at ``postgres_url``'s server
    (dropped afterwards); no Redis."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    database = None
    with tempfile.TemporaryDirectory(prefix="millrace-bench-") as scratch:
        env["MILLRACE_DATA_DIR"] = scratch
        if backend == "postgresql":
            import psycopg

            database = f"millrace_bench_{os.getpid()}"
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {database}")
            env["DATABASE_URL"] = postgres_url.rsplit("/", 1)[0] + "/" + database
        try:
            yield env
        finally:
            if database is not None:
                import psycopg

                with psycopg.connect(postgres_url, autocommit=True) as conn:
                    conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def run_round_child(
    script: str, backend: str, postgres_url: str, argv: list[str]
) -> dict[str, Any]:
    """Run ``script --child argv`` with Django on a scratch ``backend`` (auth off) and return
    the JSON of its ``RESULT`` line: the periodic-round benches' parent side."""
    with scratch_backend(backend, postgres_url) as env:
        env["MILLRACE_AUTH"] = "off"
        return child_result([script, "--child", *argv], env=env)


def child_result(
    argv: list[str], env: dict[str, str] | None = None, timeout: float = 1200
) -> dict[str, Any]:
    """Run ``python argv`` (a bench's child) and return the JSON of its ``RESULT`` line."""
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True,
                          check=True, timeout=timeout)  # fmt: skip
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


def timed_writes(base: str, token: str, stream: str, events: int, flush_every: int) -> None:
    """In a bench's child: write ``events`` events of 100 B to ``bench/<stream>`` through the
    blocking writer as the README shows it, ``flush()`` every ``flush_every``; print the rate as
    the ``RESULT`` line ``child_result`` reads."""
    from millrace.client.manager import StreamManager

    with (
        StreamManager(base, token=token) as manager,
        manager.create_writer("bench", stream) as writer,
    ):
        writer.write_event(b"w", routing_key="k")  # (connections made before the clock)
        writer.flush()
        started = time.perf_counter()
        for i in range(events):
            writer.write_event(b"x" * 100, routing_key=f"k{i % 16}")
            if (i + 1) % flush_every == 0:
                writer.flush()
        writer.flush()
        took = time.perf_counter() - started
    print("RESULT " + json.dumps({"events_per_s": events / took}), flush=True)


@contextlib.contextmanager
def round_child_node() -> Iterator[Any]:
    """In a round bench's child: Django set up and migrated on the scratch data directory, a
    segment store node registered, scope ``bench`` made; yields the segment store port."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "millrace.project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    from controller_app.segment_client import register_node, segment_store
    from controller_app.workflows import scopes

    work = Path(os.environ["MILLRACE_DATA_DIR"]) / "node"
    with millrace_node(work) as (host, port, _pid):
        register_node(host=host, port=port, container_count=4)
        scopes.create_scope("bench")
        yield segment_store()


@contextlib.contextmanager
def counting_queries() -> Iterator[list[int]]:
    """Count the database queries made in the block (``[count]``, updated as they run)."""
    from django.db import connection

    queries = [0]

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        queries[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        yield queries


def write_and_read(manager: Any, events: int, keys: int = 60) -> tuple[float, float]:
    """(events/s written, events/s read) through a Python client's ``manager``
    (``StreamManager``): a new stream of 6 segments; ``events`` events of 100 bytes over
    ``keys`` routing keys with the blocking writer (``write_event``, then ``flush``: all
    durable), timed from the first write to the flush's return; then read back
    (``read_batch``), timed likewise."""
    import uuid

    payload, names = b"e" * 100, [f"key-{i}" for i in range(keys)]
    scope = f"t{uuid.uuid4().hex[:8]}"
    manager.create_scope(scope)
    manager.create_stream(scope, "st", initial_segments=6)
    writer = manager.create_writer(scope, "st")
    started = time.perf_counter()
    for i in range(events):
        writer.write_event(payload, routing_key=names[i % keys])
    writer.flush()
    written = events / (time.perf_counter() - started)
    writer.close()
    reader = manager.create_reader(scope, "st")
    got, started = 0, time.perf_counter()
    while got < events:
        got += len(reader.read_batch(4096, timeout=30))
    read = events / (time.perf_counter() - started)
    reader.close()
    return written, read
