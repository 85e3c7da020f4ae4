"""``millrace standalone``: one command that runs a whole node as a small process tree.

Responsibility: start, watch and stop the processes of a node on one data directory:

* the segment store (``millrace segmentstore``: wire protocol, containers, tiers),
* the controller (``millrace controller``: the ASGI app under uvicorn: REST API, console,
  WebSockets),
* a Celery worker (``millrace worker``: the controller's workflows) and Celery beat
  (``millrace beat``: retention, watermarks, transaction timeouts, the sweeper).

Before starting them it migrates the metadata database, creates the administrator on first
start (API token in ``<data dir>/admin-token``, password in ``<data dir>/admin-password``, both
readable only by the owner) and registers the segment store as the owner of every container.

Each child runs in its own session, so Ctrl-C reaches only this supervisor, which then stops
the children in reverse order (SIGTERM, then SIGKILL after a grace period); on Linux a child
also gets SIGKILL if the supervisor itself dies, so no orphan keeps a port or a lock. A child
that exits on its own is restarted with a growing delay; one that keeps failing stops the node
with exit status 1 and its last lines of output.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: Seconds a child has to stop after SIGTERM before it gets SIGKILL.
STOP_GRACE_SECONDS = 10.0
#: Seconds a child has to become ready (port open, health answering).
READY_TIMEOUT_SECONDS = 60.0
#: A child that exits more often than this within ``RESTART_WINDOW_SECONDS`` stops the node.
RESTARTS_MAX = 5
RESTART_WINDOW_SECONDS = 60.0
#: Output lines of a child kept to show when it fails.
OUTPUT_TAIL_LINES = 30

ADMIN_USER = "admin"
_PR_SET_PDEATHSIG = 1


class StandaloneError(Exception):
    """The node cannot start or keep running; the message says which part and why."""


@dataclasses.dataclass
class Child:
    """One process of the node: how to start it, how to tell it is ready, its state."""

    name: str
    argv: list[str]
    ready: Callable[[], bool]
    process: subprocess.Popen[bytes] | None = None
    restarts: deque[float] = dataclasses.field(default_factory=deque)
    output: deque[str] = dataclasses.field(default_factory=lambda: deque(maxlen=OUTPUT_TAIL_LINES))


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Supervisor:
    """Starts children in order, restarts the ones that die, stops them in reverse order."""

    def __init__(self, children: Sequence[Child], *, echo: Callable[[str], None] = print) -> None:
        self.children = list(children)
        self.echo = echo
        self.stopping = threading.Event()

    def start_all(self) -> None:
        for child in self.children:
            self._spawn(child)
            self._wait_ready(child)

    def _spawn(self, child: Child) -> None:
        process = subprocess.Popen(
            child.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform == "linux" else os.setsid,
        )
        child.process = process
        threading.Thread(
            target=self._pump, args=(child, process), name=f"{child.name}-output", daemon=True
        ).start()

    def _pump(self, child: Child, process: subprocess.Popen[bytes]) -> None:
        """Copy a child's output to ours, each line prefixed with its name."""
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            child.output.append(line)
            sys.stdout.write(f"[{child.name}] {line}\n")
            sys.stdout.flush()

    def _wait_ready(self, child: Child) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not child.ready():
            if child.process is not None and child.process.poll() is not None:
                raise StandaloneError(self._failure(child, "exited while starting"))
            if time.monotonic() > deadline:
                raise StandaloneError(
                    self._failure(child, f"not ready after {READY_TIMEOUT_SECONDS:.0f} s")
                )
            time.sleep(0.1)

    def _failure(self, child: Child, what: str) -> str:
        code = child.process.poll() if child.process else None
        status = f" (exit status {code})" if code is not None else ""
        tail = "\n".join(f"    {line}" for line in child.output)
        return f"{child.name} {what}{status}; its last output:\n{tail}"

    def watch(self) -> None:
        """Until ``stopping`` is set: restart children that exited, with a growing delay."""
        while not self.stopping.wait(0.5):
            for child in self.children:
                if child.process is None or child.process.poll() is None:
                    continue
                self._restart(child)

    def _restart(self, child: Child) -> None:
        now = time.monotonic()
        while child.restarts and now - child.restarts[0] > RESTART_WINDOW_SECONDS:
            child.restarts.popleft()
        if len(child.restarts) >= RESTARTS_MAX:
            raise StandaloneError(
                self._failure(
                    child, f"exited {RESTARTS_MAX} times in {RESTART_WINDOW_SECONDS:.0f} s"
                )
            )
        delay = 0.5 * 2 ** len(child.restarts)
        code = child.process.poll() if child.process else None
        self.echo(f"millrace standalone: {child.name} exited ({code}); restarting in {delay:.1f} s")
        child.restarts.append(now)
        if self.stopping.wait(delay):
            return
        self._spawn(child)
        self._wait_ready(child)
        self.echo(f"millrace standalone: {child.name} is back")

    def stop_all(self) -> None:
        self.stopping.set()
        for child in reversed(self.children):
            process = child.process
            if process is None or process.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.echo(f"millrace standalone: {child.name} did not stop; killing it")
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()


# -- readiness checks ------------------------------------------------------------------------


def port_open(host: str, port: int) -> Callable[[], bool]:
    def check() -> bool:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return True
        return False

    return check


def http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return bool(response.status < 500)
        except OSError:
            return False

    return check


def alive_for(seconds: float) -> Callable[[], bool]:
    """Ready once the process has stayed up ``seconds`` (for processes without a port)."""
    started: list[float] = []

    def check() -> bool:
        if not started:
            started.append(time.monotonic())
        return time.monotonic() - started[0] >= seconds

    return check


def ensure_port_free(what: str, host: str, port: int, option: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise StandaloneError(
                f"{what} port {host}:{port} is not free ({exc.strerror}); "
                f"stop what uses it or choose another with {option}"
            ) from None


# -- first start -----------------------------------------------------------------------------


def _write_secret(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    os.chmod(path, 0o600)


def ensure_admin(data_dir: Path) -> tuple[str, str, bool]:
    """The administrator's (token, password), creating them on first start; ``True`` if new."""
    from django.contrib.auth import get_user_model

    from millrace.tokens import token_for

    token_file, password_file = data_dir / "admin-token", data_dir / "admin-password"
    user_model = get_user_model()
    user = user_model.objects.filter(username=ADMIN_USER).first()
    created = user is None or not token_file.exists()
    if user is None:
        password = secrets.token_urlsafe(18)
        user = user_model.objects.create_superuser(ADMIN_USER, password=password)
        _write_secret(password_file, password)
    token = token_for(user)
    if not token_file.exists() or token_file.read_text().strip() != token:
        _write_secret(token_file, token)
    password = password_file.read_text().strip() if password_file.exists() else "(unchanged)"
    return token, password, created


def register_segment_store(host: str, port: int, container_count: int) -> None:
    from controller_app.segment_client import register_node

    register_node(host=host, port=port, container_count=container_count, node_id="standalone")


# -- the command -----------------------------------------------------------------------------


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "millrace.cli", *args]


def build_children(
    *, data_dir: Path, store: Any, http_host: str, http_port: int, worker_concurrency: int
) -> list[Child]:
    health = f"http://{'127.0.0.1' if http_host in ('0.0.0.0', '') else http_host}:{http_port}"
    return [
        Child(
            "segmentstore",
            _cli("segmentstore", "--data-dir", str(data_dir), "--host", store.host,
                 "--port", str(store.port)),
            port_open(store.host if store.host != "0.0.0.0" else "127.0.0.1", store.port),
        ),
        Child(
            "worker",
            _cli("worker", "--data-dir", str(data_dir), "--concurrency", str(worker_concurrency)),
            alive_for(1.0),
        ),
        Child("beat", _cli("beat", "--data-dir", str(data_dir)), alive_for(0.5)),
        Child(
            "controller",
            _cli("controller", "--data-dir", str(data_dir), "--host", http_host,
                 "--http-port", str(http_port)),
            http_ok(f"{health}/health/liveness"),
        ),
    ]  # fmt: skip


def run(
    *, data_dir: Path, store: Any, http_host: str, http_port: int, worker_concurrency: int
) -> int:
    """Run the node until SIGINT or SIGTERM; the exit status."""
    ensure_port_free("segment store", store.host, store.port, "--segmentstore-port")
    ensure_port_free("HTTP", http_host, http_port, "--http-port")
    token, password, first = ensure_admin(data_dir)
    register_segment_store(
        "127.0.0.1" if store.host == "0.0.0.0" else store.host, store.port, store.container_count
    )
    children = build_children(
        data_dir=data_dir,
        store=store,
        http_host=http_host,
        http_port=http_port,
        worker_concurrency=worker_concurrency,
    )
    supervisor = Supervisor(children)
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop_requested.set()
        supervisor.stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        supervisor.start_all()
        _print_ready(data_dir, store, http_host, http_port, token, password, first)
        supervisor.watch()
        return 0
    except StandaloneError as exc:
        if stop_requested.is_set():
            return 0
        print(f"millrace standalone: error: {exc}", file=sys.stderr)
        return 1
    finally:
        print("millrace standalone: stopping", flush=True)
        supervisor.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("millrace standalone: stopped", flush=True)


def _print_ready(
    data_dir: Path,
    store: Any,
    http_host: str,
    http_port: int,
    token: str,
    password: str,
    first: bool,
) -> None:
    host = "127.0.0.1" if http_host in ("0.0.0.0", "") else http_host
    lines = [
        "",
        "Millrace is running. Ctrl-C stops it.",
        f"  REST API      http://{host}:{http_port}/v1/   (schema: /api/schema/)",
        f"  console       http://{host}:{http_port}/      (user {ADMIN_USER})",
        f"  WebSockets    ws://{host}:{http_port}/ws/",
        f"  wire protocol tcp://{store.host}:{store.port}   (segment store)",
        f"  credentials   {data_dir / 'admin-token'} (API token), "
        f"{data_dir / 'admin-password'} (console password)",
        f'  try:          curl -H "Authorization: Token $(cat {data_dir / "admin-token"})" '
        f"http://{host}:{http_port}/v1/scopes",
    ]
    if first:
        lines += [f"  admin token   {token}", f"  admin password {password}"]
    print("\n".join(lines) + "\n", flush=True)
