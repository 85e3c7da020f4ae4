"""Typed configuration of Millrace processes, read from environment variables once, at the edge.

Responsibility: turn environment variables (each with an embedded default) into frozen
dataclasses, one per component, and reject a bad value with a ``ConfigError`` whose one-line
message names the variable and the value. Commands and ``apps.py`` call the ``from_env``
constructors once and pass the result down; nothing below them reads the environment.

No Django import here: the segment store node and the CLI use this module without Django.
Tier names are checked through the tiers plugin registry, the one place that knows backends.
Secrets that are not given (``MILLRACE_SECRET_KEY``, ``MILLRACE_TOKEN_SECRET``) are generated
once and persisted under ``<data dir>/secrets/`` so every process sharing the data directory
agrees on them; nothing secret is ever hard-coded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from millrace.kernel import defaults

__all__ = [
    "DEFAULT_DATA_DIR",
    "HTTP_PORT",
    "UNSAFE_TEST_FLAGS",
    "ClientSettings",
    "ConfigError",
    "LogSettings",
    "SegmentStoreSettings",
    "TlsSettings",
    "Variable",
    "WebSettings",
    "parse_bool",
    "parse_data_dir",
    "parse_unsafe_flags",
    "persisted_secret",
    "read_settings",
    "variables",
]

Env = Mapping[str, str]
_S = TypeVar("_S")

DEFAULT_DATA_DIR = "./data"
#: The controller's HTTP port (REST, console, WebSockets): Pravega's REST port.
HTTP_PORT = 9091
#: The controller's gRPC port (Pravega's own clients): Pravega's controller port.
GRPC_PORT = 9090
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})

#: TEST-ONLY protection switches (MILLRACE_TEST_UNSAFE), each turning off one protection so the
#: acceptance tests can show that they detect its absence (docs/components/guarantees.md).
UNSAFE_TEST_FLAGS: Mapping[str, str] = {
    "no-fsync": "tier-1 and tier-2 never fsync (power loss loses acknowledged data)",
    "no-dedup": "idempotent writers' retries are appended again (duplicates)",
    "no-fencing": "tier-1 does not check its epoch fence after a write (a stale node acks)",
    "no-crc": "tier-1 record and data frame CRCs are not verified (corrupt bytes are served)",
    "no-restart-while-starting": "standalone stops the node when a child exits during its restart",
    "no-liveness-restart": "standalone never kills a child that stopped answering its checks",
    "no-health-contributors": "health checks only the metadata database (says UP with parts down)",
    "no-service-503": "a metadata database or broker that is away answers 500, not 503",
    "no-sync-grace": "reader-group syncs missed while the database was away count (evictions)",
    "no-disk-threshold": "the segment store takes appends until its disk is full (ENOSPC)",
    "no-pause-check": "a cluster node paused past its session serves on when it wakes",
    "no-wrong-host": "a cluster node answers a container it does not serve as a missing segment",
    "no-token-overlap": "a rotated token secret stops verifying at once (no overlap)",
    "no-grants": "grants and denials are not checked: every signed-in user may do everything",
    "no-signin-limit": "the console's sign-in takes any number of failed attempts",
    "no-table-versions": "table segments apply conditional updates without checking versions",
    "no-client-liveness": "clients never give up a connection that went silent (no keep-alive)",
}


class ConfigError(ValueError):
    """A configuration value is missing or malformed; the message is one line for the user."""


def _bad(name: str, value: str, why: str) -> ConfigError:
    return ConfigError(f"{name}={value!r}: {why}")


def parse_bool(env: Env, name: str, default: bool) -> bool:
    """``on/off``, ``true/false``, ``yes/no`` or ``1/0`` (any case); unset or empty = default."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise _bad(name, raw, "expected on/off (or true/false, yes/no, 1/0)")


def parse_int(env: Env, name: str, default: int, *, low: int, high: int) -> int:
    """An integer in ``[low, high]``; unset or empty = default."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad(name, raw, "not an integer") from None
    if not low <= value <= high:
        raise _bad(name, raw, f"must be between {low} and {high}")
    return value


def parse_json_object(env: Env, name: str) -> dict[str, Any]:
    """A JSON object (``{"key": value, ...}``); unset or empty = ``{}``."""
    raw = env.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _bad(name, raw, f"not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(value, dict):
        raise _bad(name, raw, "expected a JSON object ({...})")
    return value


def parse_data_dir(env: Env) -> Path:
    """``MILLRACE_DATA_DIR`` as an absolute path (default ``./data`` of the working directory)."""
    raw = env.get("MILLRACE_DATA_DIR", "").strip() or DEFAULT_DATA_DIR
    path = Path(raw).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise _bad("MILLRACE_DATA_DIR", raw, "exists and is not a directory")
    return path


def parse_tier(env: Env, name: str, default: str, tier: int) -> str:
    """A tier-``tier`` backend: an entry-point name or a dotted path (``pkg.mod:Class``).

    The plugin registry resolves it now, so a typo or a backend that cannot be imported stops
    the command before anything starts (imported here, lazily: ``--help`` stays fast).
    """
    from tiers.registry import BackendConfigError, resolve_tier1, resolve_tier2

    raw = env.get(name, "").strip() or default
    try:
        (resolve_tier1 if tier == 1 else resolve_tier2)(raw)
    except (BackendConfigError, ImportError) as exc:
        raise _bad(name, raw, " ".join(str(exc).split())) from None
    return raw


def parse_unsafe_flags(env: Env) -> frozenset[str]:
    """TEST-ONLY: ``MILLRACE_TEST_UNSAFE``, a comma list of ``UNSAFE_TEST_FLAGS``; unset = none."""
    raw = env.get("MILLRACE_TEST_UNSAFE", "").strip()
    flags = frozenset(part.strip().lower() for part in raw.split(",") if part.strip())
    unknown = sorted(flags - UNSAFE_TEST_FLAGS.keys())
    if unknown:
        known = ", ".join(UNSAFE_TEST_FLAGS)
        raise _bad("MILLRACE_TEST_UNSAFE", raw, f"unknown flag {unknown[0]!r} (known: {known})")
    return flags


def parse_redis_url(env: Env) -> str | None:
    """``REDIS_URL`` (``redis://``, ``rediss://`` or ``unix://``), or None when unset."""
    raw = env.get("REDIS_URL", "").strip()
    if not raw:
        return None
    if urlsplit(raw).scheme not in _REDIS_SCHEMES:
        raise _bad("REDIS_URL", mask_url_password(raw), "expected redis://host:port/db")
    return raw


def mask_url_password(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for error messages."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def persisted_secret(data_dir: Path, name: str) -> str:
    """The secret stored in ``<data_dir>/secrets/<name>``, generated there on first use.

    The file is written whole under a temporary name and then hard-linked into place, which
    fails if it exists: processes starting together all end up reading the one winning value.
    """
    folder = data_dir / "secrets"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / name
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(48))
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    value = path.read_text().strip()
    if not value:
        raise ConfigError(f"{path}: empty secret file; delete it or set the variable explicitly")
    return value


def write_secret_file(path: Path, value: str) -> None:
    """``value`` into ``path``, readable by its owner only, whole or not at all (written under
    a temporary name and renamed: a reader never sees half a token)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(value + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _secret(env: Env, name: str, data_dir: Path, filename: str) -> str:
    return env.get(name, "").strip() or persisted_secret(data_dir, filename)


# -- declared settings: each field names its variable, its default and its meaning, once ----------


@dataclasses.dataclass(frozen=True)
class Variable:
    """How one setting is read from the environment: ``read(env, data_dir)`` parses the
    variable ``name`` (a bad value raises ``ConfigError``); ``help`` says what it is."""

    name: str
    help: str
    read: Callable[[Env, Path], Any]
    #: What an unset variable means, as ``--help`` shows it.
    default_text: str = ""


def _declared(default: Any, variable: Variable, *, factory: bool = False) -> Any:
    metadata = {"variable": variable}
    if factory:
        return dataclasses.field(default_factory=default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def env_int(name: str, default: int, help: str, *, low: int, high: int) -> Any:
    """An integer setting in ``[low, high]``."""
    read = lambda env, data_dir: parse_int(env, name, default, low=low, high=high)  # noqa: E731
    return _declared(default, Variable(name, help, read, str(default)))


def env_bool(name: str, default: bool, help: str) -> Any:
    """An on/off setting."""
    read = lambda env, data_dir: parse_bool(env, name, default)  # noqa: E731
    return _declared(default, Variable(name, help, read, "on" if default else "off"))


def env_str(name: str, default: str, help: str) -> Any:
    """A string setting (stripped; empty means the default)."""
    read = lambda env, data_dir: env.get(name, "").strip() or default  # noqa: E731
    return _declared(default, Variable(name, help, read, default))


def env_optional(name: str, help: str, parse: Callable[[Env], str | None], unset: str) -> Any:
    """A setting that may be absent (None): ``unset`` says what then happens."""
    return _declared(None, Variable(name, help, lambda env, data_dir: parse(env), unset))


def env_json(name: str, help: str) -> Any:
    """A JSON object setting (unset: ``{}``)."""
    read = lambda env, data_dir: parse_json_object(env, name)  # noqa: E731
    return _declared(dict, Variable(name, help, read, "{}"), factory=True)


def env_tier(name: str, default: str, tier: int, help: str) -> Any:
    """A tier backend: entry-point name or dotted path, resolved now."""
    read = lambda env, data_dir: parse_tier(env, name, default, tier)  # noqa: E731
    return _declared(default, Variable(name, help, read, default))


def env_secret(name: str, filename: str, help: str) -> Any:
    """A secret: the variable, else one generated once into ``<data dir>/secrets/``."""
    read = lambda env, data_dir: _secret(env, name, data_dir, filename)  # noqa: E731
    unset = f"generated into <data dir>/secrets/{filename}"
    return dataclasses.field(
        default="", repr=False, metadata={"variable": Variable(name, help, read, unset)}
    )


def _data_dir() -> Any:
    help = "root of all local state (tiers, metadata database, broker, secrets, status files)"
    variable = Variable("MILLRACE_DATA_DIR", help, lambda env, data_dir: data_dir, DEFAULT_DATA_DIR)
    return dataclasses.field(metadata={"variable": variable})


def _unsafe() -> Any:
    help = "TEST-ONLY: protections switched off (comma list); never set in production"
    variable = Variable("MILLRACE_TEST_UNSAFE", help, lambda env, data_dir: parse_unsafe_flags(env))
    return dataclasses.field(default=frozenset(), metadata={"variable": variable})


def _auth() -> Any:
    return env_bool(
        "MILLRACE_AUTH", True, "requests must carry a valid token (REST, WebSocket, wire)"
    )


def _keyring_path(env: Env, data_dir: Path) -> Path:
    raw = env.get("MILLRACE_TOKEN_KEYRING_FILE", "").strip()
    return Path(raw).expanduser().absolute() if raw else data_dir / "secrets" / "token-keyring"


def _token_keyring() -> Any:
    help = (
        "the token secrets after a rotation (`millrace token secret rotate`): the one that "
        "signs and those still verifying; re-read when it changes (share it between hosts)"
    )
    variable = Variable(
        "MILLRACE_TOKEN_KEYRING_FILE", help, _keyring_path, "<data dir>/secrets/token-keyring"
    )
    # (None, built directly: no keyring file; read from the environment, always a path)
    return dataclasses.field(default=None, metadata={"variable": variable})


def _token_secret() -> Any:
    return env_secret(
        "MILLRACE_TOKEN_SECRET", "token-secret", "secret key signing the delegation tokens"
    )


def _autoscale_window() -> Any:
    return env_int(
        "MILLRACE_AUTOSCALE_WINDOW_S", 120, "the rate window auto-scaling decides by, seconds",
        low=1, high=86400,
    )  # fmt: skip


def _read_session_timeout(env: Env, data_dir: Path) -> int:
    name = "MILLRACE_NODE_SESSION_TIMEOUT_S"
    value = parse_int(env, name, SESSION_TIMEOUT_S_DEFAULT, low=2, high=600)
    if value <= defaults.CLIENT_SILENCE_SECONDS:
        raise _bad(
            name, str(value),
            f"must be above the clients' silence limit ({defaults.CLIENT_SILENCE_SECONDS:g} s): "
            "a client must give up a silent node before the node's containers move",
        )  # fmt: skip
    return value


#: A cluster member's session timeout when none is set (seconds).
SESSION_TIMEOUT_S_DEFAULT = 5


def _session_timeout() -> Any:
    help = "a cluster member whose session is not renewed this long is gone (seconds)"
    variable = Variable(
        "MILLRACE_NODE_SESSION_TIMEOUT_S",
        help,
        _read_session_timeout,
        str(SESSION_TIMEOUT_S_DEFAULT),
    )
    return _declared(SESSION_TIMEOUT_S_DEFAULT, variable)


def parse_advertise(env: Env) -> str | None:
    """``MILLRACE_ADVERTISE``: ``host:port`` (a port of 1-65535) or ``host`` (the port the
    node listens on), or None when unset."""
    value = env.get("MILLRACE_ADVERTISE", "").strip()
    if not value:
        return None
    host, colon, port = value.rpartition(":")
    if not colon:
        host, port = value, ""
    if not host or not (port == "" or (port.isdigit() and 0 < int(port) < 65536)):
        raise _bad("MILLRACE_ADVERTISE", value, "give host:port or host, e.g. 10.0.0.5:12345")
    return value


def variables(settings_class: type) -> list[Variable]:
    """The environment variables ``settings_class`` reads, in field order."""
    return [
        field.metadata["variable"]
        for field in dataclasses.fields(settings_class)
        if "variable" in field.metadata
    ]


def read_settings(settings_class: type[_S], env: Env | None = None) -> _S:
    """An instance of ``settings_class`` from ``env`` (default ``os.environ``): each declared
    field from its variable; a bad value raises ``ConfigError`` naming it."""
    env = os.environ if env is None else env
    data_dir = parse_data_dir(env)
    values = {
        field.name: field.metadata["variable"].read(env, data_dir)
        for field in dataclasses.fields(settings_class)  # type: ignore[arg-type]
        if "variable" in field.metadata
    }
    return settings_class(**values)


def _traces(env: Env, data_dir: Path) -> str:
    raw = env.get("MILLRACE_TRACES", "").strip() or "off"
    if raw in ("off", "otlp") or (raw.startswith("file:") and len(raw) > len("file:")):
        return raw
    raise _bad("MILLRACE_TRACES", raw, "expected off, otlp or file:DIR")


def _traces_setting() -> Any:
    return _declared("off", Variable(
        "MILLRACE_TRACES",
        "OpenTelemetry traces of the node's processes (the traces extra): off, otlp"
        " (OTEL_EXPORTER_OTLP_* say where; OTEL_TRACES_SAMPLER_ARG the sampling) or file:DIR"
        " (JSON lines per process)",
        _traces, "off",
    ))  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SegmentStoreSettings:
    """Everything a segment store node is built from (``millrace segmentstore``); the wire
    server and the engine each take their part (``segment_app.server.node``)."""

    data_dir: Path = _data_dir()  # noqa: RUF009 - a field specifier (it returns a field)
    host: str = env_str(
        "MILLRACE_SEGMENTSTORE_HOST", "127.0.0.1", "interface the wire-protocol server listens on"
    )
    port: int = env_int(
        "MILLRACE_SEGMENTSTORE_PORT", 12345,
        "wire-protocol port (Pravega's 12345; 0: any free port)", low=0, high=65535,
    )  # fmt: skip
    container_count: int = env_int(
        "MILLRACE_CONTAINERS", 4, "segment containers (shards); fixed for the life of a cluster",
        low=1, high=65536,
    )  # fmt: skip
    tier1: str = env_tier(
        "MILLRACE_TIER1",
        "file",
        1,
        "tier-1 (durable log) backend: entry-point name or pkg.mod:Class",
    )
    tier1_options: Mapping[str, Any] = env_json(
        "MILLRACE_TIER1_OPTIONS", "keyword options of the tier-1 backend (a JSON object)"
    )
    tier2: str = env_tier(
        "MILLRACE_TIER2",
        "filesystem",
        2,
        "tier-2 (chunk storage) backend: entry-point name or pkg.mod:Class",
    )
    tier2_options: Mapping[str, Any] = env_json(
        "MILLRACE_TIER2_OPTIONS", "keyword options of the tier-2 backend (a JSON object)"
    )
    auth_enabled: bool = _auth()
    token_secret: str = _token_secret()
    token_keyring: Path | None = _token_keyring()  # noqa: RUF009 - a field specifier
    tier2_flush_delay_ms: int = env_int(
        "MILLRACE_TIER2_FLUSH_DELAY_MS", 10_000,
        "a segment's data goes to tier-2 once this old (ms; Pravega's flushThresholdMillis)",
        low=10, high=3_600_000,
    )  # fmt: skip
    tier2_flush_bytes: int = env_int(
        "MILLRACE_TIER2_FLUSH_BYTES", 4 * 1024 * 1024,
        "... or this large (bytes; Pravega's flushThresholdBytes)", low=4096, high=1024**3,
    )  # fmt: skip
    cache_bytes: int = env_int(
        "MILLRACE_CACHE_BYTES", 512 * 1024 * 1024,
        "bytes of segment data each container's memory cache holds (data not yet in tier-2 "
        "cannot be evicted; appends are held back while it fills the cache)",
        low=16 * 1024**2, high=1024**4,
    )  # fmt: skip
    cache_disk_bytes: int = env_int(
        "MILLRACE_CACHE_DISK_BYTES", 0,
        "bytes each container keeps in its on-disk cache (LMDB under <data dir>/cache/; 0: none)",
        low=0, high=1024**5,
    )  # fmt: skip
    backlog_refuse_ms: int = env_int(
        "MILLRACE_BACKLOG_REFUSE_MS", 10_000,
        "appends held back this long (the cache full of data waiting for tier-2) are refused",
        low=100, high=3_600_000,
    )  # fmt: skip
    disk_full_percent: int = env_int(
        "MILLRACE_DISK_FULL_PERCENT", 95,
        "appends are refused (retriable) while the data directory's disk is this full (%)",
        low=50, high=100,
    )  # fmt: skip
    unsafe: frozenset[str] = _unsafe()
    metrics_port: int = env_int(
        "MILLRACE_SEGMENTSTORE_METRICS_PORT", 9093,
        "port of the node's /metrics and /traffic (0: none)", low=0, high=65535,
    )  # fmt: skip
    kafka_port: int = env_int(
        "MILLRACE_KAFKA_PORT", 9092,
        "port of the node's Kafka listener, for Kafka's clients (0: none)", low=0, high=65535,
    )  # fmt: skip
    kafka_scope: str = env_str(
        "MILLRACE_KAFKA_SCOPE", "kafka", "the scope of Kafka topics named without one"
    )
    kafka_auto_create: bool = env_bool(
        "MILLRACE_KAFKA_AUTO_CREATE", True,
        "a topic a Kafka producer or Metadata request names is created when missing",
    )  # fmt: skip
    kafka_partitions: int = env_int(
        "MILLRACE_KAFKA_PARTITIONS", 1,
        "partitions (segments) of a topic Kafka's clients create without a count",
        low=1, high=1000,
    )  # fmt: skip
    autoscale_window_s: int = _autoscale_window()
    traffic_monitor: bool = env_bool(
        "MILLRACE_TRAFFIC_MONITOR", True, "the traffic monitor counts appends (for auto-scaling)"
    )
    advertise: str | None = env_optional(
        "MILLRACE_ADVERTISE", "host:port clients reach this node at; set, the node joins the "
        "cluster of DATABASE_URL and serves the containers its leader assigns",
        parse_advertise, "a node of its own, serving every container",
    )  # fmt: skip
    node_id: str = env_str(
        "MILLRACE_NODE_ID", "", "this node's name in the cluster (unset: its advertised address)"
    )
    session_timeout_s: int = _session_timeout()
    traces: str = _traces_setting()
    #: How long a read at the tail of an open segment waits for data, seconds (under 30; the
    #: command line's ``--read-tail-wait``, no variable).
    read_tail_wait_seconds: float = 5.0

    @classmethod
    def from_env(cls, env: Env | None = None) -> SegmentStoreSettings:
        """Read the ``MILLRACE_*`` variables of ``env`` (default ``os.environ``)."""
        return read_settings(cls, env)


def _database_url(env: Env) -> str | None:
    return env.get("DATABASE_URL", "").strip() or None


def _allowed_hosts(env: Env, data_dir: Path) -> tuple[str, ...]:
    hosts = env.get("MILLRACE_ALLOWED_HOSTS", "").strip()
    return tuple(h.strip() for h in hosts.split(",") if h.strip()) or _ALLOWED_HOSTS


_ALLOWED_HOSTS = ("localhost", "127.0.0.1", "[::1]")


@dataclasses.dataclass(frozen=True)
class WebSettings:
    """What the Django side of a node (ASGI app, Celery, management commands) is built from."""

    data_dir: Path = _data_dir()  # noqa: RUF009 - a field specifier (it returns a field)
    database_url: str | None = env_optional(
        "DATABASE_URL", "metadata database, e.g. postgres://user@host:5432/millrace",
        _database_url, "SQLite <data dir>/millrace.sqlite3",
    )  # fmt: skip
    redis_url: str | None = env_optional(
        "REDIS_URL", "Redis for the Celery broker and the channel layer (redis://host:port/db)",
        parse_redis_url, "embedded (files under <data dir>/celery/, in-process channel layer)",
    )  # fmt: skip
    secret_key: str = env_secret(
        "MILLRACE_SECRET_KEY", "django-secret-key", "Django's SECRET_KEY (sessions, CSRF)"
    )
    auth_enabled: bool = _auth()
    token_secret: str = _token_secret()
    token_keyring: Path | None = _token_keyring()  # noqa: RUF009 - a field specifier
    token_ttl_seconds: int = env_int(
        "MILLRACE_TOKEN_TTL_SECONDS", 600,
        "lifetime of the delegation tokens this node issues (Pravega's is 600 s too)",
        low=2, high=7 * 86400,
    )  # fmt: skip
    api_token_ttl_days: int = env_int(
        "MILLRACE_API_TOKEN_TTL_DAYS", 0,
        "days an API token works after it was made (0: until revoked or rotated)",
        low=0, high=3650,
    )  # fmt: skip
    signin_failures_max: int = env_int(
        "MILLRACE_SIGNIN_FAILURES_MAX", 5,
        "failed sign-ins (console, admin, REST Basic) of one user from one address before "
        "they are refused for MILLRACE_SIGNIN_LOCKOUT_S",
        low=1, high=1000,
    )  # fmt: skip
    signin_lockout_s: int = env_int(
        "MILLRACE_SIGNIN_LOCKOUT_S", 900,
        "seconds a user and address are refused after too many failed sign-ins",
        low=1, high=7 * 86400,
    )  # fmt: skip
    debug: bool = env_bool("MILLRACE_DEBUG", False, "Django's debug mode; never in production")
    allowed_hosts: tuple[str, ...] = _declared(
        _ALLOWED_HOSTS,
        Variable(
            "MILLRACE_ALLOWED_HOSTS", "host names the HTTP server answers to (comma-separated)",
            _allowed_hosts, ",".join(_ALLOWED_HOSTS),
        ),
    )  # fmt: skip
    unsafe: frozenset[str] = _unsafe()
    retention_period_s: int = env_int(
        "MILLRACE_RETENTION_PERIOD_S", 300,
        "seconds between retention rounds (each truncates where a stream's policy allows)",
        low=1, high=7 * 86400,
    )  # fmt: skip
    watermark_period_s: int = env_int(
        "MILLRACE_WATERMARK_PERIOD_S", 10, "seconds between watermark rounds", low=1, high=86400
    )
    lag_period_s: int = env_int(
        "MILLRACE_LAG_PERIOD_S", 10,
        "seconds between reader-group lag rounds (a status looks at the last 10)", low=1, high=3600,
    )  # fmt: skip
    traces: str = _traces_setting()
    quota_period_s: int = env_int(
        "MILLRACE_QUOTA_PERIOD_S", 10,
        "seconds between measurements of the scopes' stored bytes (their stored-bytes quotas)",
        low=1, high=86400,
    )  # fmt: skip
    canary_period_s: int = env_int(
        "MILLRACE_CANARY_PERIOD_S", 30,
        "seconds between canary rounds (an event written to and read from every segment store"
        " node through the client; 0: no canary)", low=0, high=86400,
    )  # fmt: skip
    metrics_host: str = env_str(
        "MILLRACE_METRICS_HOST", "127.0.0.1",
        "interface the worker's and beat's metrics ports (/live, /ready, /metrics) listen on",
    )  # fmt: skip
    worker_metrics_port: int = env_int(
        "MILLRACE_WORKER_METRICS_PORT", 0,
        "the worker's metrics port (0: any free port, recorded with its heartbeat)",
        low=0, high=65535,
    )  # fmt: skip
    beat_metrics_port: int = env_int(
        "MILLRACE_BEAT_METRICS_PORT", 0,
        "beat's metrics port (0: any free port, recorded with its heartbeat)", low=0, high=65535,
    )  # fmt: skip
    autoscale_window_s: int = _autoscale_window()
    session_timeout_s: int = _session_timeout()
    assign: bool = env_bool(
        "MILLRACE_ASSIGN",
        True,
        "this controller may lead the cluster (assign containers to segment store nodes)",
    )
    grpc_port: int = env_int(
        "MILLRACE_GRPC_PORT", GRPC_PORT,
        "the controller's gRPC port for Pravega's own clients (0: no gRPC endpoint)",
        low=0, high=65535,
    )  # fmt: skip
    autoscale_cooldown_s: int = env_int(
        "MILLRACE_AUTOSCALE_COOLDOWN_S", 600, "pause after a scale before the next, seconds",
        low=0, high=86400,
    )  # fmt: skip
    autoscale_mute_s: int = env_int(
        "MILLRACE_AUTOSCALE_MUTE_S", 120, "how long a new segment is left alone, seconds",
        low=0, high=86400,
    )  # fmt: skip

    @classmethod
    def from_env(cls, env: Env | None = None) -> WebSettings:
        """Read ``DATABASE_URL``, ``REDIS_URL`` and the ``MILLRACE_*`` variables of ``env``."""
        return read_settings(cls, env)


def _log_level(env: Env, data_dir: Path) -> str:
    raw = env.get("MILLRACE_LOG_LEVEL", "").strip().upper() or "INFO"
    if raw not in LOG_LEVELS:
        raise _bad("MILLRACE_LOG_LEVEL", raw, f"expected one of {', '.join(LOG_LEVELS)}")
    return raw


def _log_format(env: Env, data_dir: Path) -> str:
    raw = env.get("MILLRACE_LOG_FORMAT", "").strip().lower() or "text"
    if raw not in LOG_FORMATS:
        raise _bad("MILLRACE_LOG_FORMAT", raw, f"expected one of {', '.join(LOG_FORMATS)}")
    return raw


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


@dataclasses.dataclass(frozen=True)
class LogSettings:
    """How every process of a node logs (``millrace.kernel.logs``)."""

    level: str = _declared(
        "INFO",
        Variable(
            "MILLRACE_LOG_LEVEL", "DEBUG, INFO, WARNING or ERROR (health probes and periodic "
            "jobs log at DEBUG)", _log_level, "INFO",
        ),
    )  # fmt: skip
    format: str = _declared(
        "text",
        Variable(
            "MILLRACE_LOG_FORMAT", "text, or json: one JSON object per line, for machines",
            _log_format, "text",
        ),
    )  # fmt: skip
    access_log: bool = env_bool(
        "MILLRACE_ACCESS_LOG", False,
        "log each HTTP request and WebSocket handshake at INFO (off: at DEBUG); credentials in "
        "them are redacted",
    )  # fmt: skip

    @classmethod
    def from_env(cls, env: Env | None = None) -> LogSettings:
        """Read ``MILLRACE_LOG_LEVEL``, ``MILLRACE_LOG_FORMAT`` and ``MILLRACE_ACCESS_LOG`` of
        ``env``."""
        return read_settings(cls, env)


def _file(name: str) -> Callable[[Env], str | None]:
    def parse(env: Env) -> str | None:
        raw = env.get(name, "").strip()
        if not raw:
            return None
        path = Path(raw).expanduser().absolute()
        if not path.is_file():
            raise _bad(name, raw, "no such file")
        return str(path)

    return parse


def _ca_file() -> Any:
    return env_optional(
        "MILLRACE_TLS_CA_FILE", "the CA certificates this process trusts (PEM)",
        _file("MILLRACE_TLS_CA_FILE"), "the system's trust store",
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class TlsSettings:
    """TLS of one process: on its listening ports (the wire port, the HTTP port, the metrics
    port) and on its connections to the others. Pravega's names, in Millrace's spelling."""

    enabled: bool = env_bool(
        "MILLRACE_TLS_ENABLED", False,
        "serve TLS on every port of this process and speak TLS to segment store nodes",
    )  # fmt: skip
    cert_file: str | None = env_optional(
        "MILLRACE_TLS_CERT_FILE", "this process's certificate chain (PEM), re-read when it "
        "changes", _file("MILLRACE_TLS_CERT_FILE"), "none",
    )  # fmt: skip
    key_file: str | None = env_optional(
        "MILLRACE_TLS_KEY_FILE", "the private key of the certificate (PEM), re-read with it",
        _file("MILLRACE_TLS_KEY_FILE"), "none",
    )  # fmt: skip
    ca_file: str | None = _ca_file()
    client_auth: bool = env_bool(
        "MILLRACE_TLS_CLIENT_AUTH", False,
        "the segment store's wire and metrics ports ask every peer for a certificate signed "
        "by the CA (mutual TLS); this process presents its own to the nodes it calls",
    )  # fmt: skip
    verify_hostname: bool = env_bool(
        "MILLRACE_TLS_VERIFY_HOSTNAME", True,
        "a peer's certificate must name the host connected to (Pravega's validateHostName)",
    )  # fmt: skip
    reload_s: int = env_int(
        "MILLRACE_TLS_RELOAD_S", 2, "seconds between checks of the certificate and key files",
        low=1, high=3600,
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.enabled and not (self.cert_file and self.key_file):
            raise ConfigError(
                "MILLRACE_TLS_ENABLED is on: set MILLRACE_TLS_CERT_FILE and MILLRACE_TLS_KEY_FILE"
            )
        if self.client_auth and not self.ca_file:
            raise ConfigError("MILLRACE_TLS_CLIENT_AUTH is on: set MILLRACE_TLS_CA_FILE")

    @classmethod
    def from_env(cls, env: Env | None = None) -> TlsSettings:
        """Read the ``MILLRACE_TLS_*`` variables of ``env``."""
        return read_settings(cls, env)


def _token(env: Env) -> str | None:
    return env.get("MILLRACE_TOKEN", "").strip() or None


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """Where the client's commands (``millrace stream …``) find a node and their credentials."""

    data_dir: Path = _data_dir()  # noqa: RUF009 - a field specifier (it returns a field)
    url: str = env_str(
        "MILLRACE_URL", f"http://127.0.0.1:{HTTP_PORT}", "the node's REST API (its HTTP port)"
    )
    token: str | None = env_optional(
        "MILLRACE_TOKEN", "API token of the commands", _token, "<data dir>/admin-token"
    )
    #: The CA an ``https://`` node is verified with.
    tls_ca: str | None = _ca_file()

    @classmethod
    def from_env(cls, env: Env | None = None) -> ClientSettings:
        """Read ``MILLRACE_URL``, ``MILLRACE_TOKEN``, ``MILLRACE_TLS_CA_FILE`` and
        ``MILLRACE_DATA_DIR`` of ``env``."""
        return read_settings(cls, env)
