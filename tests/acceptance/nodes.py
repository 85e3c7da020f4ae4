"""Segment store nodes as real processes: start, kill -9, stop/continue, read their stderr.

Responsibility: run ``millrace segmentstore`` (``python -m millrace.ops.cli segmentstore``) in its
own process group on a free port of 127.0.0.1 with ``MILLRACE_AUTH=off``, learn its port from the
"listening on" line it prints, and make sure it is gone when the test ends (``NodeFactory.close``
kills every process group it started). Nothing here knows about the workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from pathlib import Path

__all__ = ["NodeFactory", "NodeProcess", "NodeStartError"]

#: How long a node may take to print its "listening" line (recovery included).
START_TIMEOUT_SECONDS = 60.0
_LISTENING = re.compile(rb"listening on 127\.0\.0\.1:(\d+) ")
_REPOSITORY = Path(__file__).resolve().parents[2]


class NodeStartError(Exception):
    """The node exited (or never said it was listening); ``stderr`` holds what it printed."""

    def __init__(self, message: str, *, returncode: int | None, stderr: str) -> None:
        super().__init__(f"{message} (exit status {returncode}); stderr:\n{stderr[-4000:]}")
        self.returncode = returncode
        self.stderr = stderr


class NodeProcess:
    """One ``millrace segmentstore`` process (its own process group)."""

    def __init__(self, process: asyncio.subprocess.Process, stderr_path: Path, name: str) -> None:
        self.process = process
        self.stderr_path = stderr_path
        self.name = name
        self.port = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def wait_ready(self, timeout: float = START_TIMEOUT_SECONDS) -> int:
        """Wait for the "listening" line; return the port. Raises NodeStartError on exit."""
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    line = await self.process.stdout.readline()
                    if not line:
                        returncode = await self.process.wait()
                        raise NodeStartError(
                            f"{self.name} exited before listening",
                            returncode=returncode,
                            stderr=self.stderr(),
                        )
                    match = _LISTENING.search(line)
                    if match:
                        self.port = int(match.group(1))
                        return self.port
        except TimeoutError:
            raise NodeStartError(
                f"{self.name} not listening after {timeout} s",
                returncode=None,
                stderr=self.stderr(),
            ) from None

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the node's whole process group (no-op once it has exited)."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    async def kill(self) -> int:
        """``kill -9`` the process group and reap the node; returns its exit status."""
        self.signal(signal.SIGKILL)  # stopped (SIGSTOP) processes die of it too
        return await self.process.wait()

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (a clean stop); SIGKILL if it takes longer than ``timeout``."""
        self.signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            return await self.kill()


class NodeFactory:
    """Starts nodes for one test and kills whatever is left of them at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.nodes: list[NodeProcess] = []

    async def spawn(
        self,
        data_dir: Path,
        *,
        unsafe: str = "",
        tier1: str = "",
        tier1_options: str = "",
        containers: int = 2,
    ) -> NodeProcess:
        """Start a node on ``data_dir`` without waiting for it (see ``NodeProcess.wait_ready``).

        ``unsafe``: MILLRACE_TEST_UNSAFE (test-only protection switches); ``tier1``:
        MILLRACE_TIER1 (default ``file``); ``tier1_options``: MILLRACE_TIER1_OPTIONS (JSON).
        """
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("MILLRACE_") and key not in ("DATABASE_URL", "REDIS_URL")
        }
        # (no metrics and no Kafka port: several nodes run at once, and a taken port stops one)
        env |= {
            "MILLRACE_AUTH": "off",
            "PYTHONUNBUFFERED": "1",
            "MILLRACE_SEGMENTSTORE_METRICS_PORT": "0",
            "MILLRACE_KAFKA_PORT": "0",
        }
        if unsafe:
            env["MILLRACE_TEST_UNSAFE"] = unsafe
        if tier1:
            env["MILLRACE_TIER1"] = tier1
        if tier1_options:
            env["MILLRACE_TIER1_OPTIONS"] = tier1_options
        name = f"node-{len(self.nodes) + 1}"
        stderr_path = self.workdir / f"{name}.stderr"
        with open(stderr_path, "wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "millrace.ops.cli", "segmentstore",
                "--data-dir", str(data_dir), "--port", "0", "--containers", str(containers),
                env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr, cwd=_REPOSITORY,
                start_new_session=True,
            )  # fmt: skip
        node = NodeProcess(process, stderr_path, name)
        self.nodes.append(node)
        return node

    async def start(self, data_dir: Path, **kwargs: object) -> NodeProcess:
        """Start a node and wait until it listens."""
        node = await self.spawn(data_dir, **kwargs)  # type: ignore[arg-type]
        await node.wait_ready()
        return node

    def kill_all(self) -> None:
        """SIGKILL every node's process group now (synchronous: safe in any finalizer)."""
        for node in self.nodes:
            node.signal(signal.SIGKILL)

    async def close(self) -> None:
        """Kill every node still running (process groups) and reap them."""
        self.kill_all()
        for node in self.nodes:
            if node.alive:
                await node.kill()
