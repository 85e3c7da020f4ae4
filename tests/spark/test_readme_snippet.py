"""The README's Spark snippet, run as the README shows it: ``.venv/bin/python`` (this test's
interpreter), no ``PYSPARK_PYTHON``, and a ``python3`` first on the ``PATH`` that has no
Millrace (as a user's system Python). Only the node's address differs (a free port)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone

README = Path(__file__).resolve().parents[2] / "README.md"


def spark_snippet() -> str:
    spark_section = README.read_text().split("\n## Spark\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", spark_section, re.DOTALL)
    assert found, "README's Spark section has no Python snippet"
    return found.group(1)


def python_without_millrace(tmp_path: Path) -> Path:
    """A directory whose ``python3`` has no Millrace (nor anything else): a bare virtual
    environment of this machine's base Python, as a user's system Python would be."""
    base = getattr(sys, "_base_executable", sys.executable)
    bare = tmp_path / "bare"
    subprocess.run([base, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    check = subprocess.run([str(bare / "bin" / "python"), "-c", "import millrace"], cwd=tmp_path)
    assert check.returncode != 0, "the bare Python imports Millrace"
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "python3").symlink_to(bare / "bin" / "python")
    return folder


@pytest.mark.slow
def test_the_readme_spark_snippet_runs_as_shown(node: Standalone, tmp_path: Path) -> None:
    manager = StreamManager(node.base, token=node.token)
    manager.create_scope("demo")
    manager.create_stream("demo", "orders", initial_segments=2)
    manager.create_stream("demo", "orders-copy", initial_segments=1)
    with manager.create_writer("demo", "orders") as writer:
        for i in range(50):
            writer.write_event(f"order {i}", routing_key=f"customer-{i % 5}")
    manager.close()
    code = spark_snippet().replace("http://127.0.0.1:9091", node.base)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "MILLRACE_"))}
    env["PATH"] = f"{python_without_millrace(tmp_path)}:{env['PATH']}"
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=node.data_dir.parent, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "50"
