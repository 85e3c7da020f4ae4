"""``millrace standalone``: one command that runs a whole node as a small process tree.

Responsibility: start, watch and stop the processes of a node on one data directory:

* the segment store (``millrace segmentstore``: wire protocol, containers, tiers),
* the controller (``millrace controller``: the ASGI app under uvicorn: REST API, console,
  WebSockets),
* a Celery worker (``millrace worker``: the controller's workflows) and Celery beat
  (``millrace beat``: transaction timeouts, completed-transaction cleanup, the sweeper).

Before starting them it migrates the metadata database, creates the administrator on first
start (API token in ``<data dir>/admin-token``, password in ``<data dir>/admin-password``, both
readable only by the owner) and registers the segment store as the owner of every container.

Each child runs in its own session, so Ctrl-C reaches only this supervisor, which then stops
the children in reverse order (SIGTERM, then SIGKILL after a grace period); on Linux a child
also gets SIGKILL if the supervisor itself dies, so no orphan keeps a port or a lock.

Supervision works as a production init system's: the first start fails fast (exit status 1 and
the failing child's last output); once the node was ready, a child that exits (at any moment,
its own restart included) or stops answering its liveness check is restarted after a delay that
grows by half per failure in a row up to 30 s, for as long as the node runs. The node never stops by
itself; it says what is wrong instead: a log line with the child's last output, and the state
file (``<data dir>/run/standalone.json``) from which ``/health`` names the child and its
restarts.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from millrace.client.transport.probe import ProbeError, probe_segment_store
from millrace.kernel import status_files
from millrace.kernel.config import TlsSettings, write_secret_file
from millrace.kernel.status_files import supervisor_state_path, write_status
from millrace.kernel.tls import peer_context

#: Seconds a child has to stop after SIGTERM before it gets SIGKILL.
STOP_GRACE_SECONDS = 10.0
#: Seconds a child has to become ready (port open, health answering), at every start.
READY_TIMEOUT_SECONDS = 60.0
#: Delay before restarting a child after its first exit; it grows by ``RESTART_DELAY_FACTOR``
#: with every exit in a row (an exit before the child was ready again counts too), up to
#: ``RESTART_DELAY_MAX_SECONDS``: 0.5, 0.75, 1.1, 1.7, 2.5, 3.8 ... 30 s (gRPC's connection
#: backoff grows by 1.6).
RESTART_DELAY_FIRST_SECONDS = 0.5
RESTART_DELAY_FACTOR = 1.5
RESTART_DELAY_MAX_SECONDS = 30.0
#: A child that stays ready this long has its restart delay start again from the first.
STABLE_SECONDS = 60.0
#: A ready child whose liveness check has failed for this long is killed and restarted.
LIVENESS_TIMEOUT_SECONDS = 15.0
#: Seconds between two liveness checks of a ready child.
LIVENESS_INTERVAL_SECONDS = 1.0
#: Seconds between two rounds of the supervisor's loop (exits, deadlines, the state file).
TICK_SECONDS = 0.2
#: Seconds between two writes of the state file while nothing changes (readers believe it
#: for ``controller_app.operations.health.STATUS_FRESH_SECONDS``).
STATE_WRITE_SECONDS = 1.0
#: Output lines of a child kept to show when it fails.
OUTPUT_TAIL_LINES = 30

ADMIN_USER = "admin"
_PR_SET_PDEATHSIG = 1


class StandaloneError(Exception):
    """The node cannot start; the message says which part and why."""


class ChildState(enum.StrEnum):
    """What a child is doing (the ``state`` of ``Child`` and of the state file)."""

    STARTING = "starting"  # spawned, not ready yet
    READY = "ready"
    WAITING = "waiting"  # exited; restarts at ``restart_at``
    STOPPED = "stopped"  # the node is stopping


@dataclasses.dataclass
class Child:
    """One process of the node: how to start it, how to tell it is ready and alive, its state."""

    name: str
    argv: list[str]
    ready: Callable[[], bool]
    #: Liveness check of a ready child (defaults to ``ready``); None: only its exit counts.
    alive: Callable[[], bool] | None = None
    process: subprocess.Popen[bytes] | None = None
    output: deque[str] = dataclasses.field(default_factory=lambda: deque(maxlen=OUTPUT_TAIL_LINES))
    state: ChildState = ChildState.STARTING
    #: When ``state`` last changed (monotonic seconds).
    since: float = 0.0
    ever_ready: bool = False
    #: Restarts since the node started, and exits since the child was last stable.
    restarts: int = 0
    exits_in_a_row: int = 0
    restart_at: float = 0.0
    #: Last time the liveness check passed (monotonic seconds).
    alive_at: float = 0.0
    #: Why the child is not ready (its last exit or failed check); empty when ready.
    reason: str = ""

    def exit_status(self) -> int | None:
        return self.process.poll() if self.process is not None else None


def _tail(child: Child) -> str:
    return "\n".join(f"    {line}" for line in child.output)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Supervisor:
    """Starts children in order, restarts the ones that exit or stop answering, stops them in
    reverse order.

    The first start of the node fails fast: a child that exits or is not ready in time before
    the node was ever ready raises ``StandaloneError``. After that the node never stops by
    itself: every exit of a child, at any moment (its restart and readiness wait included), is
    one more restart after a delay that grows per exit in a row up to
    ``RESTART_DELAY_MAX_SECONDS``, announced with the child's last output. A ready child whose
    liveness check fails for ``LIVENESS_TIMEOUT_SECONDS`` gets SIGKILL and is restarted the same
    way. ``state_file`` (when given) holds each child's state as JSON for the health check.

    ``unsafe`` (TEST-ONLY, ``MILLRACE_TEST_UNSAFE``) switches protections off so the tests can
    show they detect their absence: ``no-restart-while-starting`` stops the node when a child
    exits before it is ready again; ``no-liveness-restart`` never kills an unresponsive child.
    """

    def __init__(
        self,
        children: Sequence[Child],
        *,
        echo: Callable[[str], None] = print,
        state_file: Path | None = None,
        unsafe: frozenset[str] = frozenset(),
    ) -> None:
        self.children = list(children)
        self.echo = echo
        self.state_file = state_file
        self.unsafe = unsafe
        self.stopping = threading.Event()
        self.started = False
        self._state_written = 0.0
        self._probes: dict[str, threading.Thread] = {}

    # -- starting -------------------------------------------------------------------------------

    def start_all(self) -> None:
        """Start the children in order, each ready before the next starts (``StandaloneError``
        when one cannot start); children started earlier are looked after meanwhile."""
        for child in self.children:
            self._spawn(child)
            deadline = time.monotonic() + READY_TIMEOUT_SECONDS
            while child.state is not ChildState.READY:
                if self.stopping.wait(TICK_SECONDS):
                    return
                if not child.ever_ready:
                    self._check_first_start(child, deadline)
                self.tick()
        self.started = True
        self._write_state()

    def _check_first_start(self, child: Child, deadline: float) -> None:
        if child.exit_status() is not None:
            raise StandaloneError(self._failure(child, "exited while starting"))
        if time.monotonic() > deadline:
            raise StandaloneError(
                self._failure(child, f"not ready after {READY_TIMEOUT_SECONDS:.0f} s")
            )

    def _spawn(self, child: Child) -> None:
        process = subprocess.Popen(
            child.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform == "linux" else os.setsid,
        )
        child.process = process
        self._set(child, ChildState.STARTING)
        threading.Thread(
            target=self._pump, args=(child, process), name=f"{child.name}-output", daemon=True
        ).start()

    def _pump(self, child: Child, process: subprocess.Popen[bytes]) -> None:
        """Copy a child's output to ours, each line prefixed with its name (a JSON log record,
        ``MILLRACE_LOG_FORMAT=json``, gets it as its ``child`` field instead)."""
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            child.output.append(line)
            sys.stdout.write(_labelled(child.name, line) + "\n")
            sys.stdout.flush()

    def _failure(self, child: Child, what: str) -> str:
        """``<name> <what> (exit status N); its last output: ...`` for the log."""
        code = child.exit_status()
        status = f" (exit status {code})" if code is not None else ""
        return f"{child.name} {what}{status}; its last output:\n{_tail(child)}"

    def _set(self, child: Child, state: ChildState, reason: str = "") -> None:
        child.state, child.since, child.reason = state, time.monotonic(), reason
        self._write_state()

    # -- watching -------------------------------------------------------------------------------

    def watch(self) -> None:
        """Until ``stopping`` is set: look after the children (``tick``) every ``TICK_SECONDS``."""
        while not self.stopping.wait(TICK_SECONDS):
            self.tick()
            if time.monotonic() - self._state_written >= STATE_WRITE_SECONDS:
                self._write_state()  # (changes are written at once; this keeps it fresh)

    def tick(self) -> None:
        """One round: notice exits, readiness and silence; restart children whose delay ran out."""
        now = time.monotonic()
        for child in self.children:
            if child.state is ChildState.WAITING:
                if now >= child.restart_at:
                    self._respawn(child, now)
            elif child.exit_status() is not None:
                self._exited(child, now)
            elif child.state is ChildState.STARTING:
                self._check_ready(child, now)
            elif child.state is ChildState.READY:
                self._check_alive(child, now)

    def _respawn(self, child: Child, now: float) -> None:
        """Start ``child`` again; a start that fails (no memory, no file descriptors left) is
        one more failure in a row, retried after the next delay: never the end of the node."""
        try:
            self._spawn(child)
        except OSError as exc:
            child.reason = f"could not be started ({exc})"
            child.exits_in_a_row += 1
            delay = self._delay(child)
            child.restart_at = now + delay
            self.echo(
                f"millrace standalone: {child.name} {child.reason}; retrying in {delay:.1f} s"
            )
            self._set(child, ChildState.WAITING, child.reason)

    def _delay(self, child: Child) -> float:
        """The delay before the next start after ``exits_in_a_row`` failures in a row."""
        return min(
            RESTART_DELAY_FIRST_SECONDS * RESTART_DELAY_FACTOR ** (child.exits_in_a_row - 1),
            RESTART_DELAY_MAX_SECONDS,
        )

    def _check_ready(self, child: Child, now: float) -> None:
        if child.ready():
            child.ever_ready = True
            child.alive_at = now
            self._set(child, ChildState.READY)
            self._start_probe(child)
            if child.restarts:
                self.echo(f"millrace standalone: {child.name} is back (restart {child.restarts})")
        elif child.ever_ready and now - child.since > READY_TIMEOUT_SECONDS:
            self._kill(child, f"not ready {READY_TIMEOUT_SECONDS:.0f} s after its restart")

    def _check_alive(self, child: Child, now: float) -> None:
        if child.exits_in_a_row and now - child.since > STABLE_SECONDS:
            child.exits_in_a_row = 0
        silent = now - child.alive_at
        if silent > LIVENESS_TIMEOUT_SECONDS and "no-liveness-restart" not in self.unsafe:
            self._kill(child, f"did not answer its liveness check for {silent:.0f} s")

    def _kill(self, child: Child, why: str) -> None:
        self.echo(f"millrace standalone: {child.name} {why}; killing it")
        child.reason = why
        with contextlib.suppress(ProcessLookupError):
            if child.process is not None:
                child.process.kill()
                child.process.wait()

    def _exited(self, child: Child, now: float) -> None:
        if not self.started and not child.ever_ready:
            return  # the first start: start_all reports it
        if child.state is ChildState.STARTING and "no-restart-while-starting" in self.unsafe:
            raise StandaloneError(self._failure(child, "exited while starting"))
        child.exits_in_a_row += 1
        child.restarts += 1
        delay = self._delay(child)
        child.restart_at = now + delay
        why = f"{child.reason or 'exited'} (exit status {child.exit_status()})"
        what = f"{why}; restarting in {delay:.1f} s (restart {child.restarts})"
        self.echo(f"millrace standalone: {child.name} {what}; its last output:\n{_tail(child)}")
        self._set(child, ChildState.WAITING, what)

    # -- liveness probes --------------------------------------------------------------------------

    def _start_probe(self, child: Child) -> None:
        """A thread checking a ready child every ``LIVENESS_INTERVAL_SECONDS`` (so a check that
        hangs until its timeout never holds up the supervisor's loop)."""
        check = child.alive or child.ready
        if child.name in self._probes and self._probes[child.name].is_alive():
            return

        def run() -> None:
            while not self.stopping.wait(LIVENESS_INTERVAL_SECONDS):
                if child.state is ChildState.READY and check():
                    child.alive_at = time.monotonic()

        self._probes[child.name] = thread = threading.Thread(
            target=run, name=f"{child.name}-liveness", daemon=True
        )
        thread.start()

    # -- state file -------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "pid": os.getpid(),
            "started": self.started,
            "children": {
                child.name: {
                    "state": child.state,
                    "pid": child.process.pid if child.process else None,
                    "for_seconds": round(now - child.since, 1),
                    "restarts": child.restarts,
                    "reason": child.reason,
                    "last_output": list(child.output)[-5:],
                }
                for child in self.children
            },
        }

    def _write_state(self) -> None:
        if self.state_file is None:
            return
        with contextlib.suppress(OSError):
            write_status(self.state_file, self.snapshot())
        self._state_written = time.monotonic()

    # -- stopping ---------------------------------------------------------------------------------

    def stop_all(self) -> None:
        self.stopping.set()
        for child in reversed(self.children):
            process = child.process
            child.state = ChildState.STOPPED
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
        if self.state_file is not None:
            with contextlib.suppress(OSError):
                self.state_file.unlink()


# -- readiness checks ------------------------------------------------------------------------


def port_open(host: str, port: int) -> Callable[[], bool]:
    def check() -> bool:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return True
        return False

    return check


def http_ok(url: str, tls: ssl.SSLContext | None = None) -> Callable[[], bool]:
    """The URL answers below 500 within a second (``https://`` verified with ``tls``)."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1.0, context=tls) as response:
                return bool(response.status < 500)
        except OSError:
            return False

    return check


def wire_answers(host: str, port: int, tls: ssl.SSLContext | None = None) -> Callable[[], bool]:
    """The segment store's wire server answers a keep-alive ``Hello`` within a second (over
    TLS with ``tls``)."""

    def check() -> bool:
        try:
            probe_segment_store(host, port, timeout=1.0, tls=tls)
        except ProbeError:
            return False
        return True

    return check


def heartbeat_fresh(role: str, child: Child) -> Callable[[], bool]:
    """The Celery process of ``child`` (worker or beat) wrote a fresh heartbeat file
    (``controller_app.operations.heartbeats``): it is past its start-up and not hung. The file, not
    the
    database: a worker waiting for a database that is away is alive, not to be killed."""

    def check() -> bool:
        from controller_app.operations import heartbeats

        if child.process is None:
            return False
        age = heartbeats.local_age_seconds(role, child.process.pid)
        return age is not None and age < status_files.HEARTBEAT_STALE_SECONDS

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


def ensure_admin(data_dir: Path) -> tuple[str, str, bool]:
    """The administrator's (token, password), creating them on first start; ``True`` if new."""
    from django.contrib.auth import get_user_model

    from controller_app.access.roles import grant
    from controller_app.access.tokens import token_for

    token_file, password_file = data_dir / "admin-token", data_dir / "admin-password"
    user_model = get_user_model()
    user = user_model.objects.filter(username=ADMIN_USER).first()
    created = user is None or not token_file.exists()
    if user is None:
        password = secrets.token_urlsafe(18)
        user = user_model.objects.create_superuser(ADMIN_USER, password=password)
        grant(user, "admin")
        write_secret_file(password_file, password)
    token = token_for(user)
    if not token_file.exists() or token_file.read_text().strip() != token:
        write_secret_file(token_file, token)
    password = password_file.read_text().strip() if password_file.exists() else "(unchanged)"
    return token, password, created


#: Bind addresses meaning "every interface": no client can connect to them as such.
ALL_INTERFACES = ("0.0.0.0", "::", "")


def certificate_names(cert_file: str | None) -> list[str]:
    """The host names and IP addresses a PEM certificate's first certificate names (its
    subject alternative names); none when there is no file or it cannot be read."""
    if not cert_file:
        return []
    try:
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except Exception:  # (no file, no SAN: the TLS settings' own checks say so elsewhere)
        return []
    return [*names.get_values_for_type(x509.DNSName),
            *(str(ip) for ip in names.get_values_for_type(x509.IPAddress))]  # fmt: skip


def advertised_host(bind: str, tls: TlsSettings) -> str:
    """The address clients are told for a server bound to ``bind``: the machine's name when
    it listens on every interface (another host cannot use ``127.0.0.1``), and with TLS a name
    the certificate holds (Pravega's Rust client verifies a certificate against host names
    only, never IP addresses: ``localhost`` for loopback)."""
    names = certificate_names(tls.cert_file) if tls.enabled else []
    if bind in ALL_INTERFACES:
        host = socket.getfqdn()
        if host.startswith("localhost"):  # (a machine whose name resolves to loopback)
            host = socket.gethostname()
        if names and host not in names:
            host = next((n for n in names if n != "localhost" and not _is_ip(n)), host)
        return host
    if tls.enabled and bind == "127.0.0.1" and "localhost" in names:
        return "localhost"
    return bind


def _is_ip(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def register_segment_store(
    host: str, port: int, container_count: int, metrics_port: int | None = None, tls: bool = False
) -> None:
    from controller_app.cluster.membership import register_node

    register_node(
        host=host, port=port, container_count=container_count, node_id="standalone",
        metrics_port=metrics_port or None, tls=tls,
    )  # fmt: skip


# -- the command -----------------------------------------------------------------------------


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "millrace.ops.cli", *args]


def build_children(
    *,
    data_dir: Path,
    store: Any,
    http_host: str,
    http_port: int,
    worker_concurrency: int,
    grpc_port: int = 0,
) -> list[Child]:
    tls = peer_context(TlsSettings.from_env())
    scheme = "https" if tls else "http"
    health = f"{scheme}://{'127.0.0.1' if http_host in ('0.0.0.0', '') else http_host}:{http_port}"
    wire_host = store.host if store.host != "0.0.0.0" else "127.0.0.1"
    segmentstore = Child(
        "segmentstore",
        cli_argv("segmentstore", "--data-dir", str(data_dir), "--host", store.host,
             "--port", str(store.port), "--schemas"),
        port_open(wire_host, store.port),
        wire_answers(wire_host, store.port, tls),
    )  # fmt: skip
    worker = Child(
        "worker",
        cli_argv("worker", "--data-dir", str(data_dir), "--concurrency", str(worker_concurrency)),
        lambda: False,
    )
    beat = Child("beat", cli_argv("beat", "--data-dir", str(data_dir)), lambda: False)
    for child in (worker, beat):
        child.ready = heartbeat_fresh(child.name, child)
    controller = Child(
        "controller",
        cli_argv("controller", "--data-dir", str(data_dir), "--host", http_host,
             "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--no-assign"),
        http_ok(f"{health}/health/liveness", tls),
    )  # fmt: skip
    return [segmentstore, worker, beat, controller]


def _labelled(name: str, line: str) -> str:
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            return json.dumps({**record, "child": name}, ensure_ascii=False)
    return f"[{name}] {line}"


def run(
    *,
    data_dir: Path,
    store: Any,
    http_host: str,
    http_port: int,
    worker_concurrency: int,
    grpc_port: int = 0,
) -> int:
    """Run the node until SIGINT or SIGTERM; the exit status."""
    ensure_port_free("segment store", store.host, store.port, "--segmentstore-port")
    ensure_port_free("HTTP", http_host, http_port, "--http-port")
    if grpc_port:
        ensure_port_free("gRPC", http_host, grpc_port, "--grpc-port")
    if store.kafka_port:
        ensure_port_free("Kafka", store.host, store.kafka_port, "MILLRACE_KAFKA_PORT")
    if store.metrics_port:
        ensure_port_free(
            "segment store metrics", store.host, store.metrics_port,
            "MILLRACE_SEGMENTSTORE_METRICS_PORT",
        )  # fmt: skip
    token, password, first = ensure_admin(data_dir)
    tls_settings = TlsSettings.from_env()
    tls = tls_settings.enabled
    wire_name = advertised_host(store.host, tls_settings)
    register_segment_store(wire_name, store.port, store.container_count, store.metrics_port, tls)
    children = build_children(
        data_dir=data_dir,
        store=store,
        http_host=http_host,
        http_port=http_port,
        worker_concurrency=worker_concurrency,
        grpc_port=grpc_port,
    )
    ready = _Ready(
        data_dir, store, http_host, http_port, grpc_port, tls, wire_name,
        advertised_host(http_host, tls_settings),
    )  # fmt: skip
    return supervise(
        "millrace standalone", children, data_dir, store.unsafe,
        lambda: _print_ready(ready, token, password, first),
    )  # fmt: skip


def supervise(
    name: str,
    children: list[Child],
    data_dir: Path,
    unsafe: frozenset[str],
    on_ready: Callable[[], None],
) -> int:
    """Start ``children``, call ``on_ready``, and keep them running until SIGINT or SIGTERM
    (``Supervisor``); then stop them in reverse order. The exit status: 0 after a stop, 1 when
    the first start failed (``name`` says who, on stderr)."""
    states = supervisor_state_path(data_dir)
    states.parent.mkdir(parents=True, exist_ok=True)
    supervisor = Supervisor(children, state_file=states, unsafe=unsafe)
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop_requested.set()
        supervisor.stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        supervisor.start_all()
        on_ready()
        supervisor.watch()
        return 0
    except StandaloneError as exc:
        if stop_requested.is_set():
            return 0
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        print(f"{name}: stopping", flush=True)
        supervisor.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print(f"{name}: stopped", flush=True)


@dataclasses.dataclass(frozen=True)
class _Ready:
    """What the start banner names."""

    data_dir: Path
    store: Any
    http_host: str
    http_port: int
    grpc_port: int
    tls: bool
    #: What clients are told to connect to: the segment store, the HTTP and gRPC ports.
    wire_name: str
    http_name: str


def _print_ready(node: _Ready, token: str, password: str, first: bool) -> None:
    host = node.http_name
    http, ws, wire = ("https", "wss", "tls") if node.tls else ("http", "ws", "tcp")
    data_dir, store, http_port = node.data_dir, node.store, node.http_port
    lines = [
        "",
        "Millrace is running. Ctrl-C stops it." + (" TLS on every port." if node.tls else ""),
        f"  REST API      {http}://{host}:{http_port}/v1/   (schema: /api/schema/)",
        f"  console       {http}://{host}:{http_port}/      (user {ADMIN_USER})",
        f"  WebSockets    {ws}://{host}:{http_port}/ws/",
        f"  wire protocol {wire}://{node.wire_name}:{store.port}   (segment store)",
    ]
    if node.http_host in ALL_INTERFACES or store.host in ALL_INTERFACES:
        lines.append(
            f"  across hosts  clients are told {node.wire_name} (this machine's name); if other"
            " hosts cannot resolve it, set MILLRACE_SEGMENTSTORE_HOST to the address they reach"
        )
    if node.grpc_port:
        lines.append(
            f"  gRPC          {wire}://{host}:{node.grpc_port}   (Pravega's clients:"
            f' pravega_client.StreamManager("{wire}://{host}:{node.grpc_port}", True, {node.tls}))'
        )
    if store.kafka_port:
        security = "SASL_SSL" if node.tls else "SASL_PLAINTEXT"
        lines.append(
            f"  Kafka         {node.wire_name}:{store.kafka_port}   (Kafka's clients:"
            f" bootstrap.servers={node.wire_name}:{store.kafka_port}, security.protocol="
            f"{security}, sasl.mechanism=PLAIN, user {ADMIN_USER}, password its API token)"
        )
    lines += [
        f"  credentials   {data_dir / 'admin-token'} (API token), "
        f"{data_dir / 'admin-password'} (console password)",
        f'  try:          curl -H "Authorization: Token $(cat {data_dir / "admin-token"})" '
        f"{http}://{host}:{http_port}/v1/scopes" + (" --cacert <your CA file>" if node.tls else ""),
    ]
    if first and sys.stdout.isatty():  # (never into a journal or a log file)
        lines += [f"  admin token   {token}", f"  admin password {password}"]
    elif first:
        lines.append("  first start:  the admin's token and password are in the files above")
    print("\n".join(lines) + "\n", flush=True)
