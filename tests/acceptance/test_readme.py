"""The README's first-hour sections, executed as a newcomer types them, in the order written.

A fresh ``millrace standalone`` node (embedded defaults) and a working directory that looks like
the repository to the snippets: ``data`` is the node's data directory and ``.venv`` this
virtual environment. Each shell block runs in ``bash -e``, each Python block as a program,
exactly as printed except for one substitution: the node listens on free ports, so
``127.0.0.1:9091`` in the text becomes its address (and the command-line client is told it
through ``MILLRACE_URL``, as its help says). Every block must succeed, and succeed again when
run a second time: a newcomer runs a snippet again after a typo further down.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.standalone_node import Standalone, running_standalone

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

#: The sections run, in the README's order, and how many shell and Python blocks each has.
SECTIONS = {
    "Streams from the command line": 1,
    "Streams over REST": 1,
    "Writing and reading": 3,
    "Key-value tables": 1,
}


def blocks(markdown: str, heading: str) -> list[tuple[str, str]]:
    """The fenced ``sh`` and ``python`` blocks of the section ``## heading`` (up to the next
    ``## ``), in order, as (language, text)."""
    start = markdown.index(f"\n## {heading}\n")
    end = markdown.find("\n## ", start + 1)
    section = markdown[start : end if end > 0 else len(markdown)]
    return re.findall(r"```(sh|python)\n(.*?)```", section, re.DOTALL)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory, "readme", {})


@pytest.fixture(scope="module")
def workdir(node: Standalone, tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("readme-cwd")
    (where / "data").symlink_to(node.data_dir)
    (where / ".venv").symlink_to(Path(sys.executable).parent.parent)
    return where


def run_block(node: Standalone, workdir: Path, language: str, text: str) -> str:
    address = node.base.removeprefix("http://")
    text = text.replace("127.0.0.1:9091", address)
    text = text.replace('"127.0.0.1", 12345', f'"127.0.0.1", {node.wire_port}')
    # The shell the node was started from (its MILLRACE_ variables, a token secret given
    # there, say), as a user's second terminal would have it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_")}
    env |= {k: v for k, v in node.environ.items() if k.startswith("MILLRACE_")}
    env |= {"MILLRACE_URL": node.base, "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    if language == "sh":
        argv = ["bash", "-e", "-o", "pipefail", "-c", text]
    else:
        argv = [str(workdir / ".venv" / "bin" / "python"), "-c", text]
    done = subprocess.run(
        argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )  # fmt: skip
    assert done.returncode == 0, (
        f"this block failed ({done.returncode}):\n{text}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.mark.parametrize("attempt", ["first", "again"])
def test_the_readme_runs_as_written(node: Standalone, workdir: Path, attempt: str) -> None:
    markdown = (ROOT / "README.md").read_text()
    for heading, count in SECTIONS.items():
        found = blocks(markdown, heading)
        assert len(found) == count, f"{heading}: {len(found)} blocks (a section changed?)"
        for language, text in found:
            run_block(node, workdir, language, text)
