"""The processes of the end-to-end reader-group run, started by ``test_end_to_end.py``:

    python -m tests.acceptance.e2e_roles writer BASE TOKEN SCOPE ID COUNT RATE OUT
    python -m tests.acceptance.e2e_roles txn    BASE TOKEN SCOPE OUT STOPFILE
    python -m tests.acceptance.e2e_roles reader BASE TOKEN SCOPE GROUP ID OUT

A writer writes COUNT events ``w<ID>k<j>:<seq>`` over its own 8 routing keys at about RATE
events/s (fewer if the file OUT.stop appears), flushes, and writes its per-key counts to OUT
(progress to OUT.progress meanwhile).
The transaction writer runs transactions of 10 events ``T<n>:<i>`` until STOPFILE exists,
committing two of three and aborting the third, and logs each outcome to OUT (``C n``,
``A n``, or ``F n`` when the call failed and the outcome is unknown). A reader joins the
group and logs every event it hands out, one unbuffered line each
(``<ns time> <segment> <offset> <data>``), until the group's streams are sealed and read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from millrace.client.manager import StreamManager
from millrace.client.reader_group import TruncatedDataError

KEYS_PER_WRITER = 8
TXN_EVENTS = 10
ROOT = Path(__file__).resolve().parents[2]


def spawn(where: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    """Start ``python -m tests.acceptance.e2e_roles *args`` (a role and its arguments) with its
    output in ``<where>/<name>.stderr``: how the acceptance tests start these processes."""
    log = open(where / f"{name}.stderr", "wb")  # noqa: SIM115 - kept by the process
    return subprocess.Popen(
        [sys.executable, "-m", "tests.acceptance.e2e_roles", *args],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def dump_on_sigusr1(manager: StreamManager, *inspected: Any) -> None:
    """On SIGUSR1 print the stacks of the client's asyncio tasks and the state of
    ``inspected`` (the async objects behind the blocking facades) to stderr: what a test that
    finds this process stuck shows of it."""
    loop = manager._loop.loop

    def dump() -> None:
        print(f"--- SIGUSR1 dump at {time.time():.3f} ---", file=sys.stderr)
        for thing in inspected:
            print(f"{type(thing).__name__}: {_state(thing)}", file=sys.stderr)
        for task in asyncio.all_tasks(loop):
            task.print_stack(file=sys.stderr)
        sys.stderr.flush()

    signal.signal(signal.SIGUSR1, lambda *_: loop.call_soon_threadsafe(dump))


def _state(thing: Any) -> str:
    fields = {k: v for k, v in vars(thing).items() if not k.startswith("__")}
    writers = fields.pop("_writers", None)
    lines = [repr({k: v for k, v in fields.items() if isinstance(v, int | float | str | bool)})]
    for segment_id, w in (writers or {}).items():
        lines.append(
            f"  segment {segment_id}: pending={len(w.pending)} unsent={len(w.unsent)} "
            f"shipping={w.shipping} sealed={w.sealed} reconnecting={w.reconnecting} "
            f"next_number={w.next_number} client_lost={w.client.connection.lost!r}"
        )
    return "\n".join(lines)


def writer(base: str, token: str, scope: str, wid: str, count: int, rate: float, out: str) -> None:
    manager = StreamManager(base, token)
    writer = manager.create_writer(scope, "st")
    dump_on_sigusr1(manager, writer._writer)
    counts = dict.fromkeys((f"w{wid}k{j}" for j in range(KEYS_PER_WRITER)), 0)
    keys = list(counts)
    progress = Path(out + ".progress")
    started = time.monotonic()
    for i in range(count):
        key = keys[i % KEYS_PER_WRITER]
        writer.write_event(f"{key}:{counts[key]}", key)
        counts[key] += 1
        if i % 1000 == 999:
            progress.write_text(str(i + 1))
            if Path(out + ".stop").exists():
                count = i + 1
                break
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    writer.flush()
    progress.write_text(str(count))
    Path(out).write_text(json.dumps(counts))
    writer.close()
    manager.close()


def txn(base: str, token: str, scope: str, out: str, stopfile: str) -> None:
    manager = StreamManager(base, token)
    writer = manager.create_transaction_writer(scope, "st")
    dump_on_sigusr1(manager)
    log = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    n = 0
    while not Path(stopfile).exists():
        try:
            txn = writer.begin_txn(lease_ms=60_000)
        except Exception as exc:
            print(f"{time.strftime('%H:%M:%S')} begin failed: {exc!r}", file=sys.stderr, flush=True)
            time.sleep(0.2)
            continue
        try:
            for i in range(TXN_EVENTS):
                txn.write_event(f"T{n}:{i}", f"t{i}")
            if n % 3 == 2:
                txn.abort()
                outcome = "A"
            else:
                txn.commit()
                outcome = "C"
        except Exception as exc:
            print(f"{time.strftime('%H:%M:%S')} {n} failed: {exc!r}", file=sys.stderr, flush=True)
            outcome = "F"
            with contextlib.suppress(Exception):  # best effort: do not leave it open
                txn.abort()
        os.write(log, f"{outcome} {n}\n".encode())
        n += 1
        time.sleep(0.05)
    os.close(log)
    writer.close()
    manager.close()


def reader(base: str, token: str, scope: str, group: str, rid: str, out: str) -> None:
    manager = StreamManager(base, token)
    reader = manager.reader_group(scope, group).create_reader(rid)
    dump_on_sigusr1(manager)
    log = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    while True:
        try:
            event = reader.read_next(timeout=5)
        except TruncatedDataError as exc:
            os.write(log, f"# {exc}\n".encode())
            continue
        if event is None:
            if reader.finished:
                break
            continue
        if event.is_checkpoint:
            continue
        line = f"{time.time_ns()} {event.segment} {event.offset} {event.data.decode()}\n"
        os.write(log, line.encode())
    os.close(log)
    reader.close()
    manager.close()


def main(argv: list[str]) -> None:
    role, *args = argv
    if role == "writer":
        base, token, scope, wid, count, rate, out = args
        writer(base, token, scope, wid, int(count), float(rate), out)
    elif role == "txn":
        txn(*args)
    elif role == "reader":
        reader(*args)
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
