"""A pytest plugin for runs on Redis with several xdist workers (``.ci/run``'s second pass:
``-p tests.worker_services``): each worker gets a Redis database of its own (1, 2, ...: the
number in ``REDIS_URL`` replaced), so that one worker's channel layer and Celery broker never
carry the other's messages, as each has a metadata database of its own (pytest-django's
``_gw<n>`` suffix) and a data directory of its own (``scripts/dev.sh``). It must act before
pytest-django reads the settings, hence a plugin given with ``-p``, not the conftest."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: Any, parser: Any, args: Any) -> Generator[None]:
    worker, url = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("REDIS_URL", "")
    if worker.startswith("gw") and url:
        base, _, _ = url.rstrip("/").rpartition("/")
        os.environ["REDIS_URL"] = f"{base}/{1 + int(worker[2:])}"
    return (yield)
