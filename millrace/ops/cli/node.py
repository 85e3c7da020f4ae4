"""The commands that run a node's processes: ``standalone``, ``segmentstore``, ``controller``,
``worker``, ``beat`` and ``migrate``.

They need the server extra (``pip install 'millrace[server]'``): Django, Celery and the engine
are imported when one of them runs, never to build the parser, so ``millrace --help`` and the
client's commands work on the base install.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import warnings
from typing import Any

from millrace.kernel import logs
from millrace.kernel.config import (
    GRPC_PORT,
    HTTP_PORT,
    LogSettings,
    SegmentStoreSettings,
    TlsSettings,
    WebSettings,
    parse_advertise,
    variables,
)
from millrace.ops.cli.base import (
    EXIT_OK,
    CommandError,
    Parents,
    any_port,
    command,
    migrate,
    millrace_version,
    needs,
    port,
    setup_django,
    warn,
)

#: The longest WebSocket handshake request line the controller reads (and answers).
WEBSOCKET_REQUEST_LINE_BYTES_MAX = 1024 * 1024

_STORE = variables(SegmentStoreSettings)
_WIRE_PORT = SegmentStoreSettings.port
_WEB = variables(WebSettings)
_LOG = variables(LogSettings)
_TLS = variables(TlsSettings)


def register(commands: Any, parents: Parents) -> None:
    both = [parents.data_dir, parents.log_level]
    standalone = command(
        commands, "standalone", run_standalone,
        "Run a whole node on embedded defaults: segment store, controller (REST, console, "
        "WebSockets), Celery worker and beat.",
        variables=_unique(_STORE + _WEB + _LOG + _TLS), parents=both,
    )  # fmt: skip
    _http_options(
        standalone,
        "interface the HTTP server, and the segment store unless $MILLRACE_SEGMENTSTORE_HOST"
        " says otherwise, listen on (127.0.0.1)",
    )
    standalone.add_argument(
        "--segmentstore-port", type=port, default=None, metavar="PORT",
        help=f"wire protocol port (default $MILLRACE_SEGMENTSTORE_PORT or {_WIRE_PORT})",
    )  # fmt: skip
    standalone.add_argument(
        "--worker-concurrency", type=int, default=2, metavar="N",
        help="worker processes of the Celery worker (default 2)",
    )  # fmt: skip
    store = command(
        commands, "segmentstore", run_segmentstore,
        "Run a segment store node (the wire-protocol server and its containers).",
        variables=_STORE + _LOG + _TLS, parents=both,
    )  # fmt: skip
    _segmentstore_options(store)
    controller = command(
        commands, "controller", run_controller,
        "Run the controller's ASGI app (REST API, console, WebSockets) under uvicorn.",
        variables=_WEB + _LOG + _TLS, parents=both,
    )  # fmt: skip
    _http_options(controller)
    controller.add_argument(
        "--no-assign", action="store_true",
        help="never lead the cluster (default: with DATABASE_URL set, each controller may take "
        "the lease that assigns containers to segment store nodes; $MILLRACE_ASSIGN=0 too)",
    )  # fmt: skip
    worker = command(
        commands, "worker", run_worker, "Run a Celery worker for the controller's workflows.",
        passthrough="celery worker", variables=_WEB + _LOG + _TLS, parents=both,
    )  # fmt: skip
    worker.add_argument("--concurrency", type=int, default=2, metavar="N")
    command(
        commands, "beat", run_beat,
        "Run Celery beat (the periodic jobs). With DATABASE_URL set, run one or more: only the"
        " holder of the beat lease sends jobs, the others take over when it stops.",
        passthrough="celery beat", variables=_WEB + _LOG + _TLS, parents=both,
    )  # fmt: skip
    migrate_ = command(
        commands, "migrate", run_migrate, "Create or update the metadata database's tables.",
        variables=_WEB, parents=[parents.data_dir],
    )  # fmt: skip
    migrate_.add_argument("-v", "--verbosity", type=int, choices=range(4), default=1)


def _segmentstore_options(store: Any) -> None:
    store.add_argument(
        "--host", help="interface to listen on (default $MILLRACE_SEGMENTSTORE_HOST)"
    )
    store.add_argument(
        "--port", type=any_port, metavar="PORT",
        help=f"wire protocol port (default $MILLRACE_SEGMENTSTORE_PORT or {_WIRE_PORT}; 0: any)",
    )  # fmt: skip
    store.add_argument(
        "--metrics-port", type=any_port, metavar="PORT",
        help="port of /metrics and /traffic (default $MILLRACE_SEGMENTSTORE_METRICS_PORT or 9093;"
        " 0: none)",
    )  # fmt: skip
    store.add_argument(
        "--kafka-port", type=any_port, metavar="PORT",
        help="port of the Kafka listener, for Kafka's clients (default $MILLRACE_KAFKA_PORT or"
        " 9092, Kafka's; 0: none)",
    )  # fmt: skip
    store.add_argument("--containers", type=int, metavar="N", help="segment containers")
    store.add_argument(
        "--advertise", metavar="HOST[:PORT]",
        help="join the cluster of DATABASE_URL, reachable at this address (default "
        "$MILLRACE_ADVERTISE; unset: a node of its own, serving every container)",
    )  # fmt: skip
    store.add_argument(
        "--node-id", metavar="NAME", help="the node's name in the cluster (default: its address)"
    )
    store.add_argument(
        "--schemas", action="store_true",
        help="hold appends to their streams' schemas and their scopes' quotas, read from the "
        "controller's metadata database (DATABASE_URL, else the data directory's); on with "
        "--advertise",
    )  # fmt: skip
    store.add_argument(
        "--read-tail-wait", type=float, metavar="SECONDS",
        help="how long a read at the tail waits for data (default 5)",
    )  # fmt: skip


def _unique(found: list[Any]) -> list[Any]:
    return list({variable.name: variable for variable in found}.values())


def _http_options(parser: argparse.ArgumentParser, host_help: str = "") -> None:
    parser.add_argument(
        "--host", default="127.0.0.1",
        help=host_help or "interface the HTTP server listens on (127.0.0.1)",
    )  # fmt: skip
    parser.add_argument(
        "--http-port", type=port, default=HTTP_PORT, metavar="PORT",
        help=f"HTTP port of REST, console and WebSockets (default {HTTP_PORT}, Pravega's)",
    )  # fmt: skip
    parser.add_argument(
        "--grpc-port", type=int, default=None, metavar="PORT",
        help=f"gRPC port of Pravega's own clients (default $MILLRACE_GRPC_PORT or {GRPC_PORT},"
        " Pravega's; 0: none)",
    )  # fmt: skip


# -- the commands ---------------------------------------------------------------------------------


def run_segmentstore(args: argparse.Namespace, rest: list[str]) -> int:
    """The node's settings, read once: the environment, then the options over it."""
    settings = SegmentStoreSettings.from_env()
    overrides = {
        "host": args.host,
        "port": args.port,
        "metrics_port": args.metrics_port,
        "kafka_port": args.kafka_port,
        "container_count": args.containers,
        "read_tail_wait_seconds": args.read_tail_wait,
        "advertise": args.advertise and parse_advertise({"MILLRACE_ADVERTISE": args.advertise}),
        "node_id": args.node_id,
    }
    settings = dataclasses.replace(
        settings, **{name: value for name, value in overrides.items() if value is not None}
    )
    log = LogSettings.from_env()
    node = needs("segment_app.server.node", "the segment store")
    _traces("segmentstore", settings.traces)
    membership = _membership(settings)
    policies = _schema_policies() if args.schemas or membership is not None else None
    # (a node that reads the metadata database for schemas reads its scopes' quotas too)
    quotas = needs("controller_app.quotas", "quotas").DatabaseQuotas() if policies else None
    # (and serves Kafka's clients: topics, users and groups' offsets are in that database)
    catalog = None
    if policies and settings.kafka_port:
        catalog = needs("controller_app.kafka_catalog", "Kafka").DatabaseKafkaCatalog(
            settings.kafka_scope
        )
    return int(
        node.serve(settings, log, membership, TlsSettings.from_env(), policies, quotas, catalog)
    )


def _traces(role: str, mode: str) -> None:
    """The process's traces (``MILLRACE_TRACES``); without the traces extra, a warning."""
    from millrace.kernel import traces

    try:
        traces.setup(role, mode)
    except ImportError as exc:
        warn(f"MILLRACE_TRACES={mode} needs the traces extra (pip install 'millrace[traces]'):"
             f" {exc}; no traces")  # fmt: skip


def _schema_policies() -> Any:
    """Streams' schema policies, from the controller's metadata database."""
    needs("django", "--schemas")
    setup_django()
    policies = needs("controller_app.registry.policies", "--schemas")
    return policies.DatabaseSchemaPolicies()


def _membership(settings: SegmentStoreSettings) -> Any:
    """The cluster's metadata for a node that joins one (``--advertise``), else None."""
    if settings.advertise is None:
        return None
    if WebSettings.from_env().database_url is None:
        raise CommandError(
            "--advertise joins the cluster of DATABASE_URL: set it to the database every "
            "controller and node shares (e.g. postgres://millrace@db:5432/millrace)"
        )
    needs("django", "a cluster node")
    setup_django()
    membership = needs("controller_app.cluster.membership", "a cluster node")
    return membership.DatabaseMembership()


def run_standalone(args: argparse.Namespace, rest: list[str]) -> int:
    store = SegmentStoreSettings.from_env()  # check the whole configuration before starting
    if args.segmentstore_port is not None:
        store = dataclasses.replace(store, port=args.segmentstore_port)
    if args.host and not os.environ.get("MILLRACE_SEGMENTSTORE_HOST"):
        # (--host opens the node: its segment store listens there too, or no other host
        # could write to it)
        store = dataclasses.replace(store, host=args.host)
    log = LogSettings.from_env()
    logs.configure(log)
    needs("django", "the node's controller")
    setup_django()
    from django.conf import settings

    from millrace.ops import standalone

    database = settings.DATABASES["default"]
    print(f"millrace standalone {millrace_version()}: data directory {store.data_dir}")
    print(f"  metadata database: {database['ENGINE'].rsplit('.', 1)[-1]} {database['NAME']}")
    print(f"  broker: {settings.CELERY_BROKER_URL.split('://')[0]}; migrating the database…")
    migrate(verbosity=0)
    auth = "on" if store.auth_enabled else "off"
    print(
        f"  segment store: {store.host}:{store.port}, {store.container_count} containers, "
        f"tier-1 {store.tier1!r}, tier-2 {store.tier2!r}, auth {auth}",
        flush=True,
    )
    try:
        return standalone.run(
            data_dir=store.data_dir,
            store=store,
            http_host=args.host,
            http_port=args.http_port,
            grpc_port=grpc_port(args),
            worker_concurrency=args.worker_concurrency,
        )
    except standalone.StandaloneError as exc:
        raise CommandError(str(exc)) from exc


def run_controller(args: argparse.Namespace, rest: list[str]) -> int:
    """The ASGI app (REST API, console, WebSockets) under uvicorn."""
    # The websockets library (uvicorn's WebSocket protocol) drops a handshake whose request
    # line is over 8 KiB without a word; at 1 MiB the tail consumer gets it and answers why
    # it is refused (a query string over its limit). Read when websockets is imported.
    os.environ.setdefault("WEBSOCKETS_MAX_LINE_LENGTH", str(WEBSOCKET_REQUEST_LINE_BYTES_MAX))
    log = LogSettings.from_env()
    logs.configure(log)
    uvicorn = needs("uvicorn", "the controller")
    needs("django", "the controller")
    setup_django()
    from controller_app.operations import tracing

    tracing.start("controller")  # (before the app is built: its middleware, the gRPC server)
    needs("millrace.project.asgi", "the controller")  # loaded now: gc.freeze() below covers it
    # Everything loaded so far lives as long as the process: keep it out of the collector's
    # full passes (shorter pauses under load, e.g. the WebSocket tail reads' latency).
    gc.collect()
    gc.freeze()
    tls = TlsSettings.from_env()
    endpoint = _grpc_endpoint(args, tls)
    leader = _leader(args, endpoint)
    reloader = None
    https: dict[str, Any] = {}
    if tls.enabled:  # the certificate is re-read, in place, when its files change
        from millrace.kernel.tls import CertificateReloader, server_context

        # (MILLRACE_TLS_CLIENT_AUTH is for the segment store's ports: browsers and REST clients
        # sign in with tokens and passwords, not certificates)
        http_tls = dataclasses.replace(tls, client_auth=False)
        context = server_context(http_tls)
        reloader = CertificateReloader(context, http_tls).start()
        https = {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file,
                 "ssl_context_factory": lambda config, default: context}  # fmt: skip
    uvicorn.run(
        "millrace.project.asgi:application",
        host=args.host,
        port=args.http_port,
        log_level=log.level.lower(),
        log_config=logs.uvicorn_config(log),
        lifespan="off",
        proxy_headers=False,
        **https,
    )
    if reloader is not None:
        reloader.stop()
    if endpoint is not None:
        endpoint.stop()
    if leader is not None:
        leader.stop()
        leader.join(5)
    return EXIT_OK


def grpc_port(args: argparse.Namespace) -> int:
    """``--grpc-port``, else ``MILLRACE_GRPC_PORT`` (0: no gRPC endpoint)."""
    if args.grpc_port is None:
        return WebSettings.from_env().grpc_port
    if not 0 <= args.grpc_port <= 65535:
        raise CommandError(f"--grpc-port {args.grpc_port}: expected 0 (none) to 65535")
    return int(args.grpc_port)


def _grpc_endpoint(args: argparse.Namespace, tls: TlsSettings) -> Any:
    """The gRPC endpoint of Pravega's clients, serving; None with ``--grpc-port 0``."""
    chosen = grpc_port(args)
    if not chosen:
        return None
    from controller_app.grpc.server import GrpcEndpoint, GrpcStartError

    try:
        return GrpcEndpoint(args.host, chosen, tls).start()
    except GrpcStartError as exc:
        raise CommandError(f"{exc} (choose another with --grpc-port, or 0 for none)") from None


def _leader(args: argparse.Namespace, endpoint: Any) -> Any:
    """The thread that takes part in leading the cluster, started; None when this controller
    may not lead (``--no-assign``, ``MILLRACE_ASSIGN=0``) or has no shared database."""
    settings = WebSettings.from_env()
    if args.no_assign or not settings.assign or settings.database_url is None:
        return None
    from controller_app.cluster.leader import LeaderThread

    thread = LeaderThread(
        settings.session_timeout_s, address=(args.host, args.http_port),
        grpc_port=endpoint.port if endpoint is not None else None,
    )  # fmt: skip
    thread.start()
    return thread


def _celery(command_name: str, extra: list[str]) -> int:
    needs("celery", "the worker and beat")
    setup_django()
    from millrace.project.celery import app

    try:
        app.start(["--quiet", command_name, *extra])  # (no banner: the logs say it started)
    except SystemExit as exc:  # celery exits through sys.exit
        return int(exc.code or 0)
    return EXIT_OK


def run_worker(args: argparse.Namespace, rest: list[str]) -> int:
    """A Celery worker running the controller's workflows (all of Millrace's queues)."""
    log = LogSettings.from_env()
    logs.configure(log)
    celery_app = needs("millrace.project.celery", "the worker")
    from celery.exceptions import SecurityWarning

    # Celery warns at every start of a worker run as root (as in most containers); the risk
    # it names is pickled messages, and Millrace's workers accept JSON only.
    warnings.filterwarnings("ignore", "You're running the worker with superuser", SecurityWarning)
    return _celery("worker", celery_app.worker_arguments(args.concurrency, log) + rest)


def run_beat(args: argparse.Namespace, rest: list[str]) -> int:
    """Celery beat: sends the periodic jobs (transaction timeouts, cleanup, the sweeper,
    retention and watermark rounds)."""
    log = LogSettings.from_env()
    logs.configure(log)
    celery_app = needs("millrace.project.celery", "beat")
    return _celery("beat", celery_app.beat_arguments(log) + rest)


def run_migrate(args: argparse.Namespace, rest: list[str]) -> int:
    needs("django", "the metadata database")
    migrate(args.verbosity)
    return EXIT_OK
