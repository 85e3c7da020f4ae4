"""How the processes of a node log: one configuration for all of them.

Responsibility: ``configure(LogSettings)`` sets up the root logger of a process (the segment
store, the controller, a Celery worker or beat, the standalone supervisor) at
``MILLRACE_LOG_LEVEL``, as text lines or, with ``MILLRACE_LOG_FORMAT=json``, one JSON object
per line (``time``, ``level``, ``logger``, ``message``, ``process``, and ``exception`` when
there is one). What repeats every second or every tick is logged at DEBUG, so that a node's
output at INFO shows what a person needs (start-up, warnings, errors, each restart):

* health probes answered OK (the supervisor asks ``/health/liveness`` every second);
* Celery beat sending a periodic job, and a worker receiving and finishing a task (the
  sweeper and the rounds run every few seconds); a task that fails is still an error.

No Django here: the segment store node uses it too.
"""

from __future__ import annotations

import copy
import json
import logging
import logging.config
import time
from typing import Any

from millrace.kernel.config import LogSettings

__all__ = [
    "JsonFormatter",
    "QuietProbes",
    "QuietTicks",
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
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def _demote(record: logging.LogRecord) -> bool:
    """Make ``record`` a DEBUG one; whether its logger still wants it."""
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


class QuietProbes(logging.Filter):
    """Health probes answered OK are DEBUG records (uvicorn's access log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        probe = len(args) >= 5 and str(args[2]).startswith(("/health", "/v1/health"))
        if probe and isinstance(args[4], int) and args[4] < 400:
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
        "filters": {"quiet_ticks": {"()": QuietTicks}},
        "formatters": {"default": _formatter(settings)},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "filters": ["quiet_ticks"],
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": settings.level, "handlers": ["default"]},
        # django-axes logs each failed sign-in at INFO: the audit log has them already.
        "loggers": {"axes": {"level": "WARNING"}},
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
    config.setdefault("filters", {})["quiet_probes"] = {"()": QuietProbes}
    config["loggers"]["uvicorn.access"]["filters"] = ["quiet_probes"]
    if settings.format == "json":
        for name in config["formatters"]:
            config["formatters"][name] = {"()": JsonFormatter}
    for logger in config["loggers"].values():
        if "level" in logger:
            logger["level"] = settings.level
    return config
