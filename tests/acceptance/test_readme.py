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

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.executed_docs import (
    blocks,
    node_ports,
    node_terminal,
    repository_like,
    run_block,
)
from tests.acceptance.standalone_node import Standalone, running_standalone

pytestmark = pytest.mark.slow

#: The sections run, in the README's order, and how many shell and Python blocks each has.
SECTIONS = {
    "Streams from the command line": 1,
    "Streams over REST": 1,
    "Writing and reading": 3,
    "Key-value tables": 1,
    "Schemas": 3,
    "Kafka's clients": 1,
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory, "readme", {})


@pytest.fixture(scope="module")
def workdir(node: Standalone, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repository_like(tmp_path_factory.mktemp("readme-cwd"), node.data_dir)


@pytest.mark.parametrize("attempt", ["first", "again"])
def test_the_readme_runs_as_written(node: Standalone, workdir: Path, attempt: str) -> None:
    for heading, count in SECTIONS.items():
        found = blocks("README.md", heading)
        assert len(found) == count, f"{heading}: {len(found)} blocks (a section changed?)"
        for language, text in found:
            ports = node_ports(node) | {"127.0.0.1:9092": f"127.0.0.1:{node.kafka_port}"}
            run_block(workdir, language, text, node_terminal(node), ports)
