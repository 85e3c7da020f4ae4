"""The embedded broker: messages are never seen half-written, across processes.

A producer process and this process's consumer share one queue folder; the consumer polls as
fast as it can while the producer writes: every message must arrive whole, exactly once. And
deterministically: while a message is being written, a reader listing the folder sees no
message file; kombu's own filesystem transport shows an empty one at that moment (which a
polling worker can take, fail to decode and stop on), proof that the check can fail.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection

MESSAGES = 2000


def _options(folder: Path) -> dict:
    return {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(folder / "control"),
    }


def _produce(folder: str, transport: str, name: str) -> None:
    with Connection("filesystem://", transport=transport,
                    transport_options=_options(Path(folder))) as conn:  # fmt: skip
        queue = conn.SimpleQueue(name)
        for i in range(MESSAGES):
            queue.put({"n": i, "pad": "x" * 2000})


def _drain(folder: Path, transport: str) -> tuple[list[int], list[str]]:
    name = f"q{uuid.uuid4().hex}"
    producer = multiprocessing.get_context("spawn").Process(
        target=_produce, args=(str(folder), transport, name)
    )
    received: list[int] = []
    errors: list[str] = []
    with Connection("filesystem://", transport=transport,
                    transport_options=_options(folder)) as conn:  # fmt: skip
        queue = conn.SimpleQueue(name)
        producer.start()
        deadline = time.monotonic() + 60
        while len(received) < MESSAGES and time.monotonic() < deadline:
            try:
                message = queue.get(block=False)
            except Empty:
                if not producer.is_alive() and len(received) + len(errors) >= MESSAGES:
                    break
                continue
            except ValueError as exc:  # undecodable (half-written) message
                errors.append(str(exc))
                continue
            received.append(message.payload["n"])
            message.ack()
    producer.join(30)
    return received, errors


def test_every_message_arrives_whole_and_once(tmp_path: Path) -> None:
    received, errors = _drain(tmp_path, "millrace.project.broker:FileSystemTransport")
    assert errors == []
    assert sorted(received) == list(range(MESSAGES))


def _visible_during_put(folder: Path, transport: str, monkeypatch: pytest.MonkeyPatch) -> list:
    """What a reader listing the folder sees while a message is being written."""
    import os

    from kombu.transport import filesystem

    from millrace.project import broker

    seen: list[tuple[str, int]] = []

    def look() -> None:
        for name in os.listdir(folder):
            if name.endswith(".msg"):
                seen.append((name, (folder / name).stat().st_size))

    real_lock, real_replace = filesystem.lock, os.replace

    def spying_lock(f, flags):  # kombu's _put: after creating the file, before writing it
        look()
        return real_lock(f, flags)

    def spying_replace(src, dst):  # ours: after writing the .part file, before renaming it
        look()
        return real_replace(src, dst)

    monkeypatch.setattr(filesystem, "lock", spying_lock)
    monkeypatch.setattr(broker.os, "replace", spying_replace)
    with Connection("filesystem://", transport=transport,
                    transport_options=_options(folder)) as conn:  # fmt: skip
        conn.SimpleQueue(f"q{uuid.uuid4().hex}").put({"n": 1})  # a queue no other test declared
    return seen


def test_a_message_is_invisible_until_written(tmp_path: Path, monkeypatch) -> None:
    assert (
        _visible_during_put(tmp_path, "millrace.project.broker:FileSystemTransport", monkeypatch)
        == []
    )


def test_kombus_own_transport_shows_an_empty_message_file(tmp_path: Path, monkeypatch) -> None:
    """Proof the first test can fail: kombu's transport exposes the file before writing it."""
    seen = _visible_during_put(tmp_path, "filesystem", monkeypatch)
    assert [size for _, size in seen] == [0]
