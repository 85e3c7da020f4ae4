"""Documentation executed as a newcomer types it: the fenced ``sh`` and ``python`` blocks of a
Markdown file, run in the order written, in a working directory that looks like the repository
to them (``.venv`` is this virtual environment; ``data`` the node's data directory, where a
test links one).

Each shell block runs in ``bash -e -o pipefail``, each Python block as a program, each saved to
a file beside the working directory first. The only
changes to the text are a test's ``substitutions`` (the free ports it runs a node on in place of
the documented ones, say), each named where it is used.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.acceptance.standalone_node import Standalone

__all__ = [
    "ROOT", "blocks", "node_ports", "node_terminal", "repository_like", "run_block",
    "start_block", "user_env",
]  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]


def blocks(path: Path | str, heading: str | None = None) -> list[tuple[str, str]]:
    """The fenced ``sh`` and ``python`` blocks of the file (``path`` relative to the
    repository), or of its section ``## heading`` (up to the next ``## ``), in order, as
    (language, text)."""
    markdown = (ROOT / path).read_text()
    if heading is not None:
        start = markdown.index(f"\n## {heading}\n")
        end = markdown.find("\n## ", start + 1)
        markdown = markdown[start : end if end > 0 else len(markdown)]
    return re.findall(r"```(sh|python)\n(.*?)```", markdown, re.DOTALL)


def repository_like(where: Path, data_dir: Path | None = None) -> Path:
    """``where`` with ``.venv`` (this virtual environment) and, given one, ``data`` (a node's
    data directory) in it."""
    where.mkdir(parents=True, exist_ok=True)
    (where / ".venv").symlink_to(Path(sys.executable).parent.parent)
    if data_dir is not None:
        (where / "data").symlink_to(data_dir)
    return where


def user_env(extra: dict[str, str]) -> dict[str, str]:
    """A user's terminal: this environment less every ``MILLRACE_`` variable and the services'
    URLs, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MILLRACE_") and k not in ("DATABASE_URL", "REDIS_URL")}  # fmt: skip
    return env | {"PYTHONUNBUFFERED": "1"} | extra


def node_terminal(node: Standalone) -> dict[str, str]:
    """The shell ``node`` was started from (its MILLRACE_ variables, a token secret given
    there, say), as a user's second terminal would have it, and the command-line client told
    the node's address through ``MILLRACE_URL``, as its help says."""
    env = user_env({k: v for k, v in node.environ.items() if k.startswith("MILLRACE_")})
    return env | {"MILLRACE_URL": node.base}


def node_ports(node: Standalone) -> dict[str, str]:
    """``node``'s free ports in place of the documented ones."""
    return {"127.0.0.1:9091": node.base.removeprefix("http://"),
            '"127.0.0.1", 12345': f'"127.0.0.1", {node.wire_port}'}  # fmt: skip


def _substituted(text: str, substitutions: dict[str, str]) -> str:
    for documented, here in substitutions.items():
        text = text.replace(documented, here)
    return text


def _argv(where: Path, language: str, text: str) -> list[str]:
    """The block saved beside ``where`` and the command running it (from a file, as a
    terminal would: a ``pgrep -f`` in the block must not find the shell running it)."""
    suffix = ".sh" if language == "sh" else ".py"
    with tempfile.NamedTemporaryFile(
        "w", dir=where.parent, prefix="block-", suffix=suffix, delete=False
    ) as saved:
        saved.write(text)
    if language == "sh":
        return ["bash", "-e", "-o", "pipefail", saved.name]
    return [str(where / ".venv" / "bin" / "python"), saved.name]


def run_block(
    where: Path, language: str, text: str, env: dict[str, str],
    substitutions: dict[str, str] | None = None, timeout: float = 300,
) -> str:  # fmt: skip
    """Run one block in ``where``; its standard output. It must succeed (the assertion shows
    the block and the tail of both outputs)."""
    text = _substituted(text, substitutions or {})
    done = subprocess.run(_argv(where, language, text), cwd=where, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    assert done.returncode == 0, (
        f"this block failed ({done.returncode}):\n{text}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-3000:]}"
    )
    return done.stdout


def start_block(
    where: Path, language: str, text: str, env: dict[str, str], output: Path,
    substitutions: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start a block that runs until stopped (one that ends by starting a node), its output to
    ``output``, in a session of its own (stop it with ``os.killpg``)."""
    text = _substituted(text, substitutions or {})
    with open(output, "wb") as out:
        return subprocess.Popen(_argv(where, language, text), cwd=where, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
