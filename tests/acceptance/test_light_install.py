"""The base install is the client: ``pip install millrace`` writes and reads with nothing else.

A fresh virtual environment gets Millrace with its base dependencies only (no extra), and a
client program in it writes events to a running node and reads them back, through the README's
``StreamManager``, then runs the command line's client commands. The program reports every
module it loaded: none of Django, Celery, PySpark, pandas, boto3, nats-py, hdfs or lmdb, and
none of those can even be imported there (the base list is enough by itself).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.standalone_node import Standalone, running_standalone

REPOSITORY = Path(__file__).resolve().parents[2]

#: What is not part of the source tree.
NOT_SOURCE = (".git", ".venv", "data", "build", "*.egg-info", "__pycache__", ".ruff_cache",
              ".mypy_cache", ".pytest_cache", ".import_linter_cache", ".hypothesis")  # fmt: skip

#: What the client must never load: the server's, the Spark bridge's and the tiers' libraries.
HEAVY = ("django", "rest_framework", "channels", "celery", "kombu", "pyspark", "pandas",
         "pyarrow", "boto3", "nats", "hdfs", "lmdb", "uvicorn")  # fmt: skip

PROGRAM = textwrap.dedent(
    """
    import json, sys
    from millrace.client.manager import StreamManager

    base, token = sys.argv[1], sys.argv[2]
    manager = StreamManager(base, token=token)
    manager.create_scope("light")
    manager.create_stream("light", "orders", initial_segments=2)
    writer = manager.create_writer("light", "orders")
    for i in range(100):
        writer.write_event(f"order {i}", routing_key=f"customer-{i % 7}")
    writer.flush()
    reader = manager.create_reader("light", "orders")
    read = []
    while len(read) < 100:
        event = reader.read_next(timeout=30)
        assert event is not None, f"only {len(read)} events came back"
        read.append(event.data.decode())
    manager.close()
    loaded = sorted({name.split(".")[0] for name in sys.modules})
    print(json.dumps({"read": sorted(read), "loaded": loaded}))
    """
)


@pytest.fixture(scope="module")
def light_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding Millrace and its base dependencies, nothing more."""
    scratch = tmp_path_factory.mktemp("light")
    source = scratch / "source"  # a copy: building writes build/ and *.egg-info into the tree
    shutil.copytree(REPOSITORY, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         str(source)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return python


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory, "light-node", {})


def _light_env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}


@pytest.mark.slow
def test_the_base_install_has_none_of_the_extras(light_python: Path) -> None:
    for module in HEAVY:
        done = subprocess.run(
            [str(light_python), "-c", f"import {module}"],
            capture_output=True, text=True, env=_light_env(), cwd="/",
        )  # fmt: skip
        assert done.returncode != 0, f"{module} is installed by the base install"


@pytest.mark.slow
def test_a_client_writes_and_reads_with_the_base_install(
    light_python: Path, node: Standalone
) -> None:
    done = subprocess.run(
        [str(light_python), "-c", PROGRAM, node.base, node.token],
        capture_output=True, text=True, timeout=300, env=_light_env(), cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["read"] == sorted(f"order {i}" for i in range(100))
    assert not set(report["loaded"]) & set(HEAVY), report["loaded"]


@pytest.mark.slow
def test_the_client_commands_work_with_the_base_install(
    light_python: Path, node: Standalone
) -> None:
    millrace = light_python.with_name("millrace")
    env = {**_light_env(), "MILLRACE_URL": node.base, "MILLRACE_TOKEN": node.token}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(millrace), *args], capture_output=True, text=True, timeout=120, env=env, cwd="/"
        )

    assert run("--help").returncode == 0
    assert run("scope", "create", "cli-light").returncode == 0
    assert run("stream", "create", "cli-light/st").returncode == 0
    appended = run("stream", "append", "cli-light/st", "one", "two")
    assert appended.returncode == 0, appended.stderr
    read = run("stream", "read", "cli-light/st", "--limit", "2")
    assert read.stdout.split() == ["one", "two"], read.stderr
    server = run("segmentstore")  # the server is an extra: a clear message names it
    assert server.returncode == 1
    assert "pip install 'millrace[server]'" in server.stderr
    assert "Traceback" not in server.stderr
    for job in (["ingest", "x.parquet", "--stream", "cli-light/st"], ["export", "cli-light/st",
                "--to", "/tmp/none"]):  # fmt: skip
        spark = run(*job)  # Spark is the spark extra: named, no traceback
        assert spark.returncode == 1 and "pip install 'millrace[spark]'" in spark.stderr
        assert "Traceback" not in spark.stderr
