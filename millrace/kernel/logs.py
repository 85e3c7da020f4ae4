"""How the processes of a node log: one configuration for all of them.

Responsibility: ``configure(LogSettings)`` sets up the root logger of a process (the segment
store, the controller, a Celery worker or beat, the standalone supervisor) at
``MILLRACE_LOG_LEVEL``, as text lines or, with ``MILLRACE_LOG_FORMAT=json``, one JSON object
per line (``time``, ``level``, ``logger``, ``message``, ``process``, and ``exception`` when
there is one). What repeats every second or every tick is logged at DEBUG, so that a node's
output at INFO shows what a person needs (start-up, warnings, errors, each restart):

* health probes answered OK (the supervisor asks ``/health/liveness`` every second);
* Celery beat sending a periodic job, and a worker receiving and finishing a task (the
  sweeper and the rounds run every few seconds); a task that fails is still an error;
* each HTTP request and WebSocket handshake (uvicorn's access lines), unless
  ``MILLRACE_ACCESS_LOG`` asks for them at INFO; a 4xx answer is the client's mistake, not the
  node's, so Django's ``django.request`` says only 5xx (as errors).

No credential reaches a log line: ``Redact`` (on every handler) replaces the value of a
``token=``, ``password=``, ``secret=`` or ``api_key=`` (a WebSocket URL's token, say) and the
credential after ``Token``, ``Bearer`` or ``Basic``, in messages and in tracebacks.

No Django here: the segment store node uses it too.
"""

from __future__ import annotations

import copy
import json
import logging
import logging.config
import re
import time
from typing import Any

from millrace.kernel.config import LogSettings

__all__ = [
    "JsonFormatter",
    "QuietProbes",
    "QuietTicks",
    "Redact",
    "configure",
    "dict_config",
    "uvicorn_config",
]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        if record.exc_info:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


#: A credential in a query string or a form (``token=…``), and one after an auth scheme.
_SECRET_PARAMETER = re.compile(
    r"(\b(?:token|access_token|password|secret|api_key|apikey)=)[^&\s\"'<>]+", re.IGNORECASE
)
_SECRET_AFTER_SCHEME = re.compile(r"(\b(?:Token|Bearer|Basic) )[A-Za-z0-9._~+/=-]{8,}")
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with every credential it holds replaced by ``[redacted]``."""
    if "=" in text:
        text = _SECRET_PARAMETER.sub(r"\1" + REDACTED, text)
    return _SECRET_AFTER_SCHEME.sub(r"\1" + REDACTED, text)


class Redact(logging.Filter):
    """No credential in a record: its message and traceback pass through ``redact``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def _demote(record: logging.LogRecord) -> bool:
    """Make ``record`` a DEBUG one; whether its logger still wants it."""
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


class QuietProbes(logging.Filter):
    """uvicorn's access lines are DEBUG records (all of them, or with ``access_log`` only
    health probes answered OK)."""

    def __init__(self, access_log: bool = False) -> None:
        super().__init__()
        self.access_log = access_log

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        if not self.access_log:
            return _demote(record)
        args = record.args if isinstance(record.args, tuple) else ()
        probe = len(args) >= 5 and str(args[2]).startswith(("/health", "/v1/health"))
        if probe and isinstance(args[4], int) and args[4] < 400:
            return _demote(record)
        return True


#: uvicorn's WebSocket lines (``uvicorn.error`` at INFO): a handshake and its connection.
_WEBSOCKET_LINES = ('%s - "WebSocket %s"', "connection open", "connection closed")


class QuietHandshakes(logging.Filter):
    """uvicorn's per-WebSocket lines on ``uvicorn.error`` are access lines: DEBUG records
    unless ``access_log``."""

    def __init__(self, access_log: bool = False) -> None:
        super().__init__()
        self.access_log = access_log

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            not self.access_log
            and record.levelno == logging.INFO
            and str(record.msg).startswith(_WEBSOCKET_LINES)
        ):
            return _demote(record)
        return True


#: Celery's records of routine task traffic, by logger: beat sending a job, a worker
#: receiving one and one finishing well (their messages start so).
_ROUTINE = {
    "celery.beat": ("Scheduler: Sending due task",),
    "celery.worker.strategy": ("Task ",),
    "celery.app.trace": ("Task ",),
}


class QuietTicks(logging.Filter):
    """Celery's routine records (see ``_ROUTINE``) at INFO become DEBUG ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        starts = _ROUTINE.get(record.name)
        if starts and record.levelno == logging.INFO and str(record.msg).startswith(starts):
            return _demote(record)
        return True


def _formatter(settings: LogSettings) -> dict[str, Any]:
    if settings.format == "json":
        return {"()": JsonFormatter}
    return {"format": TEXT_FORMAT}


def dict_config(settings: LogSettings) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of a process: the root logger at ``settings.level``,
    in its format, with the routine records demoted (see the module's docstring). Django's
    ``LOGGING`` is this too, so that setting Django up keeps it."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"quiet_ticks": {"()": QuietTicks}, "redact": {"()": Redact}},
        "formatters": {"default": _formatter(settings)},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "filters": ["quiet_ticks", "redact"],
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": settings.level, "handlers": ["default"]},
        "loggers": {
            # django-axes logs each failed sign-in at INFO: the audit log has them already.
            "axes": {"level": "WARNING"},
            # 4xx answers are WARNINGs there: the client's mistakes, answered to the client.
            "django.request": {"level": "ERROR"},
        },
    }


def configure(settings: LogSettings) -> None:
    """Set up this process's logging (``dict_config``); warnings are logged too."""
    logging.config.dictConfig(dict_config(settings))
    logging.captureWarnings(True)


def uvicorn_config(settings: LogSettings) -> dict[str, Any]:
    """uvicorn's logging configuration: its own loggers in the node's format, with
    ``QuietProbes`` on the access log."""
    from uvicorn.config import LOGGING_CONFIG  # the server extra; only the controller calls it

    config = copy.deepcopy(LOGGING_CONFIG)
    filters = config.setdefault("filters", {})
    filters["quiet_probes"] = {"()": QuietProbes, "access_log": settings.access_log}
    filters["quiet_handshakes"] = {"()": QuietHandshakes, "access_log": settings.access_log}
    filters["redact"] = {"()": Redact}
    config["loggers"]["uvicorn.access"]["filters"] = ["quiet_probes"]
    config["loggers"]["uvicorn.error"]["filters"] = ["quiet_handshakes"]
    for handler in config["handlers"].values():
        handler["filters"] = [*handler.get("filters", []), "redact"]
    if settings.format == "json":
        for name in config["formatters"]:
            config["formatters"][name] = {"()": JsonFormatter}
    for logger in config["loggers"].values():
        if "level" in logger:
            logger["level"] = settings.level
    return config
