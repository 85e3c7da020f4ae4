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
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "UNSAFE_TEST_FLAGS",
    "ConfigError",
    "SegmentStoreSettings",
    "WebSettings",
    "parse_bool",
    "parse_data_dir",
    "parse_unsafe_flags",
    "persisted_secret",
]

Env = Mapping[str, str]

DEFAULT_DATA_DIR = "./data"
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


def _secret(env: Env, name: str, data_dir: Path, filename: str) -> str:
    return env.get(name, "").strip() or persisted_secret(data_dir, filename)


@dataclasses.dataclass(frozen=True)
class SegmentStoreSettings:
    """Everything a segment store node needs to start (``millrace segmentstore``)."""

    #: Root of all local state (tier-1 files, tier-2 chunks, secrets): MILLRACE_DATA_DIR.
    data_dir: Path
    #: Address the wire-protocol server listens on: MILLRACE_SEGMENTSTORE_HOST.
    host: str = "127.0.0.1"
    #: TCP port of the wire-protocol server (Pravega's 12345; 0 = any free port).
    port: int = 12345
    #: Number of segment containers (shards); fixed for the life of a cluster: MILLRACE_CONTAINERS.
    container_count: int = 4
    #: tier-1 (durable data log) backend: entry-point name of ``millrace.tier1`` or dotted path.
    tier1: str = "file"
    #: Keyword options for the tier-1 backend (MILLRACE_TIER1_OPTIONS, a JSON object).
    tier1_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: tier-2 (chunk storage) backend: entry-point name of ``millrace.tier2`` or dotted path.
    tier2: str = "filesystem"
    #: Keyword options for the tier-2 backend (MILLRACE_TIER2_OPTIONS, a JSON object).
    tier2_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Whether requests must carry a valid delegation token (MILLRACE_AUTH, default on).
    auth_enabled: bool = True
    #: Key that signs and verifies delegation tokens (MILLRACE_TOKEN_SECRET, else persisted).
    token_secret: str = dataclasses.field(default="", repr=False)
    #: A segment's data goes to tier-2 once this old (MILLRACE_TIER2_FLUSH_DELAY_MS, Pravega's
    #: flushThresholdMillis) or this large (MILLRACE_TIER2_FLUSH_BYTES, flushThresholdBytes).
    tier2_flush_delay_ms: int = 10_000
    tier2_flush_bytes: int = 4 * 1024 * 1024
    #: Bytes of segment data each container's cache holds (MILLRACE_CACHE_BYTES); data not yet
    #: in tier-2 cannot be evicted, and appends are held back while it fills the cache.
    cache_bytes: int = 512 * 1024 * 1024
    #: Bytes of segment data each container keeps in its on-disk cache (LMDB, under
    #: ``<data dir>/cache/``; MILLRACE_CACHE_DISK_BYTES; 0: none). Data evicted from memory
    #: goes there, data not yet in tier-2 too, so the tier-1 backlog may grow past memory.
    cache_disk_bytes: int = 0
    #: Appends held back that long (the cache full of data waiting for tier-2) are refused
    #: with a retriable error (MILLRACE_BACKLOG_REFUSE_MS).
    backlog_refuse_ms: int = 10_000
    #: Appends are refused (retriable) while the data directory's filesystem is this full, in
    #: percent of its size (MILLRACE_DISK_FULL_PERCENT; 100: never): tier-1, the metadata
    #: database and the status files keep room, and nothing hits ENOSPC.
    disk_full_percent: int = 95
    #: TEST-ONLY protections switched off (MILLRACE_TEST_UNSAFE); never set in production.
    unsafe: frozenset[str] = frozenset()
    #: Port of the node's metrics endpoint (MILLRACE_SEGMENTSTORE_METRICS_PORT; 0: none).
    metrics_port: int = 9092
    #: The traffic monitor's decision window (MILLRACE_AUTOSCALE_WINDOW_S, seconds).
    autoscale_window_s: int = 120
    #: Whether the traffic monitor counts appends (MILLRACE_TRAFFIC_MONITOR, default on).
    traffic_monitor: bool = True

    @classmethod
    def from_env(cls, env: Env | None = None) -> SegmentStoreSettings:
        """Read the ``MILLRACE_*`` variables of ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env
        data_dir = parse_data_dir(env)
        return cls(
            data_dir=data_dir,
            host=env.get("MILLRACE_SEGMENTSTORE_HOST", "").strip() or cls.host,
            port=parse_int(env, "MILLRACE_SEGMENTSTORE_PORT", cls.port, low=0, high=65535),
            container_count=parse_int(
                env, "MILLRACE_CONTAINERS", cls.container_count, low=1, high=65536
            ),
            tier1=parse_tier(env, "MILLRACE_TIER1", cls.tier1, 1),
            tier1_options=parse_json_object(env, "MILLRACE_TIER1_OPTIONS"),
            tier2=parse_tier(env, "MILLRACE_TIER2", cls.tier2, 2),
            tier2_options=parse_json_object(env, "MILLRACE_TIER2_OPTIONS"),
            auth_enabled=parse_bool(env, "MILLRACE_AUTH", True),
            token_secret=_secret(env, "MILLRACE_TOKEN_SECRET", data_dir, "token-secret"),
            tier2_flush_delay_ms=parse_int(
                env,
                "MILLRACE_TIER2_FLUSH_DELAY_MS",
                cls.tier2_flush_delay_ms,
                low=10,
                high=3_600_000,
            ),
            tier2_flush_bytes=parse_int(
                env,
                "MILLRACE_TIER2_FLUSH_BYTES",
                cls.tier2_flush_bytes,
                low=4096,
                high=1024**3,
            ),
            cache_bytes=parse_int(
                env, "MILLRACE_CACHE_BYTES", cls.cache_bytes, low=16 * 1024**2, high=1024**4
            ),
            cache_disk_bytes=parse_int(
                env, "MILLRACE_CACHE_DISK_BYTES", cls.cache_disk_bytes, low=0, high=1024**5
            ),
            backlog_refuse_ms=parse_int(
                env, "MILLRACE_BACKLOG_REFUSE_MS", cls.backlog_refuse_ms, low=100, high=3_600_000
            ),
            disk_full_percent=parse_int(
                env, "MILLRACE_DISK_FULL_PERCENT", cls.disk_full_percent, low=50, high=100
            ),
            unsafe=parse_unsafe_flags(env),
            metrics_port=parse_int(
                env, "MILLRACE_SEGMENTSTORE_METRICS_PORT", cls.metrics_port, low=0, high=65535
            ),
            autoscale_window_s=_autoscale_window(env),
            traffic_monitor=parse_bool(env, "MILLRACE_TRAFFIC_MONITOR", True),
        )


def _autoscale_window(env: Env) -> int:
    """MILLRACE_AUTOSCALE_WINDOW_S: the rate window auto-scaling decides by (both roles)."""
    return parse_int(env, "MILLRACE_AUTOSCALE_WINDOW_S", 120, low=1, high=86400)


@dataclasses.dataclass(frozen=True)
class WebSettings:
    """What the Django side of a node (ASGI app, Celery, management commands) is built from."""

    #: Root of all local state (SQLite file, embedded broker folders, secrets): MILLRACE_DATA_DIR.
    data_dir: Path
    #: Metadata database URL (DATABASE_URL); None = SQLite file ``<data_dir>/millrace.sqlite3``.
    database_url: str | None = None
    #: Redis URL for the channel layer and the Celery broker (REDIS_URL); None = embedded ones.
    redis_url: str | None = None
    #: Django's SECRET_KEY (MILLRACE_SECRET_KEY, else generated and persisted in the data dir).
    secret_key: str = dataclasses.field(default="", repr=False)
    #: Whether REST endpoints require an authenticated user (MILLRACE_AUTH, default on).
    auth_enabled: bool = True
    #: Secret the delegation tokens this node mints are signed with (MILLRACE_TOKEN_SECRET, else
    #: generated once into the data directory): the segment stores check them with the same one.
    token_secret: str = dataclasses.field(default="", repr=False)
    #: Lifetime of the segment store delegation tokens this node issues
    #: (MILLRACE_TOKEN_TTL_SECONDS; Pravega's delegation token TTL is 600 s as well). Clients
    #: ask for a new one when theirs expires.
    token_ttl_seconds: int = 600
    #: Django debug mode (MILLRACE_DEBUG, default off); never on in production.
    debug: bool = False
    #: Host names the HTTP server answers to (MILLRACE_ALLOWED_HOSTS, comma-separated).
    allowed_hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "[::1]")
    #: TEST-ONLY protections switched off (MILLRACE_TEST_UNSAFE); see ``UNSAFE_TEST_FLAGS``.
    unsafe: frozenset[str] = frozenset()
    #: Seconds between retention rounds (MILLRACE_RETENTION_PERIOD_S): each collects a stream
    #: cut of every stream with a retention policy and truncates where the policy allows.
    retention_period_s: int = 300
    #: Seconds between watermark rounds (MILLRACE_WATERMARK_PERIOD_S).
    watermark_period_s: int = 10
    #: Auto-scaling: the rate window decisions use (MILLRACE_AUTOSCALE_WINDOW_S), the pause
    #: after a scale before the next (MILLRACE_AUTOSCALE_COOLDOWN_S), and how long a new
    #: segment is left alone (MILLRACE_AUTOSCALE_MUTE_S); seconds.
    autoscale_window_s: int = 120
    autoscale_cooldown_s: int = 600
    autoscale_mute_s: int = 120

    @classmethod
    def from_env(cls, env: Env | None = None) -> WebSettings:
        """Read ``DATABASE_URL``, ``REDIS_URL`` and the ``MILLRACE_*`` variables of ``env``."""
        env = os.environ if env is None else env
        data_dir = parse_data_dir(env)
        hosts = env.get("MILLRACE_ALLOWED_HOSTS", "").strip()
        return cls(
            data_dir=data_dir,
            database_url=env.get("DATABASE_URL", "").strip() or None,
            redis_url=parse_redis_url(env),
            secret_key=_secret(env, "MILLRACE_SECRET_KEY", data_dir, "django-secret-key"),
            auth_enabled=parse_bool(env, "MILLRACE_AUTH", True),
            token_secret=_secret(env, "MILLRACE_TOKEN_SECRET", data_dir, "token-secret"),
            token_ttl_seconds=parse_int(
                env, "MILLRACE_TOKEN_TTL_SECONDS", cls.token_ttl_seconds, low=2, high=7 * 86400
            ),
            debug=parse_bool(env, "MILLRACE_DEBUG", False),
            unsafe=parse_unsafe_flags(env),
            retention_period_s=parse_int(
                env, "MILLRACE_RETENTION_PERIOD_S", cls.retention_period_s, low=1, high=7 * 86400
            ),
            watermark_period_s=parse_int(
                env, "MILLRACE_WATERMARK_PERIOD_S", cls.watermark_period_s, low=1, high=86400
            ),
            autoscale_window_s=_autoscale_window(env),
            autoscale_cooldown_s=parse_int(
                env, "MILLRACE_AUTOSCALE_COOLDOWN_S", cls.autoscale_cooldown_s, low=0, high=86400
            ),
            autoscale_mute_s=parse_int(
                env, "MILLRACE_AUTOSCALE_MUTE_S", cls.autoscale_mute_s, low=0, high=86400
            ),
            allowed_hosts=tuple(h.strip() for h in hosts.split(",") if h.strip())
            or cls.allowed_hosts,
        )
