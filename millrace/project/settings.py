"""Django settings of a Millrace node, built from environment variables with embedded defaults.

Responsibility: translate ``millrace.kernel.config.WebSettings`` (read once, here) into Django, DRF,
Channels and Celery settings. Embedded defaults need no system service: SQLite under the data
directory, the in-memory channel layer and kombu's filesystem broker (shared by every process
that uses the same data directory). ``DATABASE_URL`` switches to PostgreSQL (or any database
dj-database-url knows) and ``REDIS_URL`` switches the channel layer and the broker to Redis.
See README.md for the variables.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

import dj_database_url
from csp import constants as csp

from controller_app import task_names
from millrace.kernel import logs
from millrace.kernel.config import (
    ConfigError,
    LogSettings,
    TlsSettings,
    WebSettings,
    mask_url_password,
)


def database_config(database_url: str | None, data_dir: Path) -> dict[str, Any]:
    """The ``default`` database: ``database_url`` if given, else SQLite in ``data_dir``."""
    if database_url is None:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(data_dir / "millrace.sqlite3"),
            # IMMEDIATE: writers take the lock up front instead of failing on upgrade; WAL lets
            # readers run beside the one writer (ASGI app, Celery worker and beat share it).
            # mmap_size=0: the database file is read and written, never memory-mapped, so a
            # full disk is an error ("database or disk is full": database-unavailable), never
            # a SIGBUS (the WAL index SQLite maps is allocated byte by byte before it is used).
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA mmap_size=0;",
            },
        }
    try:
        return dict(dj_database_url.parse(database_url, conn_health_checks=True))
    except ValueError as exc:  # dj-database-url's UnknownSchemeError is a ValueError too
        why = str(exc).split(". ")[0]  # its first sentence; the rest lists every scheme
        raise ConfigError(f"DATABASE_URL={mask_url_password(database_url)!r}: {why}") from None


#: Redis connections of the channel layer and the broker. The socket timeout must be well
#: above the channel layer's blocking pop (channels_redis waits 5 s per BZPOPMIN): redis-py's
#: default of 5 s is the same, so every idle WebSocket tail dropped with a TimeoutError after
#: 5 s. The health check pings a connection idle for that long before using it again (a
#: connection cut while Redis was away is replaced, not failed on).
REDIS_SOCKET_TIMEOUT_SECONDS = 30.0
REDIS_CONNECT_TIMEOUT_SECONDS = 5.0
REDIS_HEALTH_CHECK_SECONDS = 10


def redis_options() -> dict[str, Any]:
    """redis-py's connection options, for the channel layer and the broker alike."""
    return {
        "socket_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_SECONDS,
        "socket_keepalive": True,
        "health_check_interval": REDIS_HEALTH_CHECK_SECONDS,
        "retry_on_timeout": True,
    }


def channel_layers(redis_url: str | None) -> dict[str, Any]:
    """Redis channel layer when ``redis_url`` is given (needed across processes), else in-memory."""
    if redis_url is None:
        return {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": redis_url, **redis_options()}]},
        }
    }


def celery_broker(redis_url: str | None, data_dir: Path) -> tuple[str, dict[str, Any]]:
    """Broker URL and transport options: Redis if given, else kombu's filesystem transport.

    The filesystem transport keeps messages as files under ``<data_dir>/celery/`` (its folders
    are created here, as kombu requires), so a worker, beat and the ASGI app started as separate
    processes on one host share one queue.
    """
    if redis_url is not None:
        # A task sent while Redis is away fails after about 2 s (three tries), so that the
        # request that sent it answers 503 broker-unavailable instead of hanging.
        return redis_url, {
            **redis_options(),
            "max_retries": 3,
            "interval_start": 0,
            "interval_step": 0.5,
            "interval_max": 1,
        }
    folder = data_dir / "celery"
    for name in ("queue", "control"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    # (a host in the URL: kombu warns "No hostname was supplied" on every start without one)
    return "filesystem://localhost/", {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
        # Kombu polls the folder (default every 1 s): a workflow waited for by a REST call
        # would take a second for nothing. A 50 ms poll of one folder costs next to no CPU.
        "polling_interval": 0.05,
    }


MILLRACE = WebSettings.from_env()
#: TLS of this process: its HTTP port (uvicorn's) and its connections to segment store nodes.
MILLRACE_TLS = TlsSettings.from_env()
BASE_DIR = Path(__file__).resolve().parents[2]  # the repository: millrace/project/settings.py

SECRET_KEY = MILLRACE.secret_key
DEBUG = MILLRACE.debug
ALLOWED_HOSTS = list(MILLRACE.allowed_hosts)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served by the node (offline, and the CSP's 'self')
    "django_prometheus",
    "channels",
    "django_htmx",
    "axes",
    "controller_app",
    "admin_ui",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The console's static files (admin_ui/static, vendored packages), served by the node.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "controller_app.audit.AuditMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last: it answers a sign-in refused for too many failures (controller_app/access/signin.py).
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "millrace.project.urls"
WSGI_APPLICATION = "millrace.project.wsgi.application"
ASGI_APPLICATION = "millrace.project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_config(MILLRACE.database_url, MILLRACE.data_dir)}
if MILLRACE.database_url is None:
    # pytest-django's SQLite test database is a file, not memory, so that the worker and node
    # processes a test starts can share it; such a process is told its name by the TEST-ONLY
    # variable MILLRACE_TEST_SQLITE_NAME (tests/controller/conftest.py).
    DATABASES["default"]["TEST"] = {"NAME": str(MILLRACE.data_dir / "test-millrace.sqlite3")}
    if os.environ.get("MILLRACE_TEST_SQLITE_NAME"):
        DATABASES["default"]["NAME"] = os.environ["MILLRACE_TEST_SQLITE_NAME"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The largest request body: one event of the largest size (8 MiB) in base64 fits, with room;
# a larger body answers 413 naming this limit.
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024 * 1024

# Django's own, then the passwords of an imported Pravega password file (re-hashed with the
# first at the user's first sign-in; controller_app.access.acl).
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
    "controller_app.access.acl.PravegaPasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Served straight from the apps' static folders: no collectstatic step before a node starts,
# and no STATIC_ROOT (WhiteNoise warned "No directory at: <data dir>/static/" on every start).
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
# -- the open network ------------------------------------------------------------------------
# Sign-ins (the console's form, the Django admin's, REST Basic) are limited per user and
# address by django-axes: MILLRACE_SIGNIN_FAILURES_MAX failures, then refused (429, saying
# until when) for MILLRACE_SIGNIN_LOCKOUT_S; each failure and lockout is in the audit log.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = "no-signin-limit" not in MILLRACE.unsafe  # (TEST-ONLY switch)
AXES_FAILURE_LIMIT = MILLRACE.signin_failures_max
AXES_COOLOFF_TIME = datetime.timedelta(seconds=MILLRACE.signin_lockout_s)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "controller_app.access.signin.locked_out"
AXES_VERBOSE = False
# Behind TLS (MILLRACE_TLS_ENABLED): cookies only over HTTPS, and browsers told to keep to it.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = MILLRACE_TLS.enabled
SECURE_HSTS_SECONDS = 365 * 86400 if MILLRACE_TLS.enabled else 0
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Only the node's own scripts and styles run (htmx, uPlot and Pico are vendored); no inline
# script or style, no other origin, no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [csp.SELF],
        "script-src": [csp.SELF],
        "style-src": [csp.SELF],
        "img-src": [csp.SELF, "data:"],
        "connect-src": [csp.SELF],
        "font-src": [csp.SELF],
        "object-src": [csp.NONE],
        "base-uri": [csp.NONE],
        "form-action": [csp.SELF],
        "frame-ancestors": [csp.NONE],
    }
}
# The console signs in with Django's authentication form.
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # First: its "WWW-Authenticate: Token" makes a missing credential a 401, not a 403.
        "controller_app.api.authentication.BearerOrTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "controller_app.api.authentication.LimitedBasicAuthentication",
    ],
    # The caller's role (viewer, operator, admin) must allow the call; all may when auth is off.
    "DEFAULT_PERMISSION_CLASSES": ["controller_app.api.permissions.RolePermission"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's parser with the body size limit (413) and deep nesting a 400 (api/fields.py).
    "DEFAULT_PARSER_CLASSES": ["controller_app.api.fields.JSONParser"],
    "EXCEPTION_HANDLER": "controller_app.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Millrace REST API",
    "DESCRIPTION": "Pravega's controller admin API under /v1/, and Millrace's additions.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controller_app.api.errors.add_error_responses",
    ],
}

CHANNEL_LAYERS = channel_layers(MILLRACE.redis_url)

CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = celery_broker(
    MILLRACE.redis_url, MILLRACE.data_dir
)
if MILLRACE.redis_url is None:
    # kombu's filesystem transport with atomic message files (millrace/project/broker.py).
    CELERY_BROKER_TRANSPORT = "millrace.project.broker:FileSystemTransport"
# A worker whose broker goes away reconnects for as long as it takes (never exits for it).
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 3,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}
# Workflows keep their state in the database; nobody waits on a task result.
CELERY_TASK_IGNORE_RESULT = True
# Tasks may run twice (every workflow step checks the state it expects), never zero times.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE_FILENAME = str(MILLRACE.data_dir / "celerybeat-schedule")
# Beat records a heartbeat from its tick (controller_app/operations/heartbeats.py).
CELERY_BEAT_SCHEDULER = "controller_app.beat:HeartbeatScheduler"
CELERY_TASK_ROUTES = task_names.ROUTES
CELERY_BEAT_SCHEDULE = {
    # Every 15 s: a workflow whose task the broker did not take (Redis away) runs soon after
    # the broker is back, even when nobody repeats the request.
    "sweep": {"task": task_names.SWEEP, "schedule": 15.0},
    "transaction-timeouts": {"task": task_names.TRANSACTION_TIMEOUTS, "schedule": 10.0},
    "completed-transaction-cleanup": {
        "task": task_names.COMPLETED_TRANSACTION_CLEANUP,
        "schedule": 3600.0,
    },
    "retention": {"task": task_names.RETENTION, "schedule": float(MILLRACE.retention_period_s)},
    "watermarks": {
        "task": task_names.WATERMARKS,
        "schedule": float(MILLRACE.watermark_period_s),
    },
    # Reader groups' lag, measured and judged (controller_app/lag.py).
    "readergroup-lag": {
        "task": task_names.READER_GROUP_LAG,
        "schedule": float(MILLRACE.lag_period_s),
        # (a round no worker took within its period is dropped: the next one measures)
        "options": {"expires": float(MILLRACE.lag_period_s)},
    },
    # Scopes' stored bytes against their quotas (controller_app/quotas.py).
    "quotas": {
        "task": task_names.QUOTAS,
        "schedule": float(MILLRACE.quota_period_s),
        "options": {"expires": float(MILLRACE.quota_period_s)},
    },
    # The canary: an event written to and read from every node
    # (controller_app/operations/canary.py).
    **(
        {
            "canary": {
                "task": task_names.CANARY,
                "schedule": float(MILLRACE.canary_period_s),
                "options": {"expires": float(MILLRACE.canary_period_s)},
            }
        }
        if MILLRACE.canary_period_s
        else {}
    ),
    # Auto-scaling decides four times per rate window (a hot segment splits within about
    # one window and a quarter of crossing its target).
    "autoscale": {
        "task": task_names.AUTOSCALE,
        "schedule": max(1.0, MILLRACE.autoscale_window_s / 4),
    },
}
CELERY_TIMEZONE = TIME_ZONE

# Every process of a node logs alike (MILLRACE_LOG_LEVEL, MILLRACE_LOG_FORMAT).
LOGGING = logs.dict_config(LogSettings.from_env())
