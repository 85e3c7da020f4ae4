"""Layering: the engine never imports the server; the client never imports the engine or Django."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

from tests.fixtures.source_tree import parse

ROOT = pathlib.Path(__file__).resolve().parents[2]


def imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_engine_does_not_import_the_server() -> None:
    for path in (ROOT / "segment_app" / "engine").rglob("*.py"):
        bad = {m for m in imported_modules(path) if m.startswith("segment_app.server")}
        assert not bad, f"{path} imports {bad}"


def test_client_loads_neither_engine_nor_django() -> None:
    code = (
        "import sys, millrace.client.transport.segment_store\n"
        "print(sorted(m for m in sys.modules if m.startswith("
        "('segment_app.engine', 'django', 'celery', 'tiers'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
