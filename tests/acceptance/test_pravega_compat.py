"""``millrace.client.pravega_compat`` against the official ``pravega`` client's API, and a program
written for the official client running on Millrace through both names.

The official package (``pravega`` 0.3.8, module ``pravega_client``) is installed with the test
dependencies; nothing connects with it (it speaks gRPC to a Pravega controller): its classes
and methods, with the parameter names of their signatures, are what our module must offer.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import millrace.client.pravega_compat as compat
from tests.acceptance.standalone_node import Standalone, free_ports

official = pytest.importorskip("pravega_client")


def _official_members() -> list[tuple[str, str | None, str | None]]:
    """(class, method or None, the method's text signature) of the official public API."""
    found: list[tuple[str, str | None, str | None]] = []
    for name in dir(official):
        obj = getattr(official, name)
        if name.startswith("_") or not inspect.isclass(obj):
            continue
        found.append((name, None, None))
        for method in dir(obj):
            if method.startswith("_") or method in dir(Exception):
                continue
            found.append((name, method, getattr(getattr(obj, method), "__text_signature__", None)))
    return found


def _names(text_signature: str) -> list[str]:
    inner = text_signature.strip("()")
    names = [p.split("=")[0].strip() for p in inner.split(",") if p.strip()]
    return [n for n in names if n not in ("$self", "/", "*", "*args", "**kwargs")]


#: Official text signatures that do not say what the function takes (checked against the
#: official client's source and its own tests), with the parameters it does take.
SIGNATURES_FIXED = {
    # It repeats create_reader_group's; the function takes a StreamReaderGroupConfig
    # (tests/pravega_reader_test.py calls it with ("rg", scope, rg_config)).
    ("StreamManager", "create_reader_group_with_config"): [
        "reader_group_name", "scope_name", "rg_config",
    ],
    # It repeats update_stream_with_policy's; the function takes (scope_name, stream_name).
    ("StreamManager", "get_stream_tags"): ["scope_name", "stream_name"],
}  # fmt: skip


def test_every_official_class_and_method_is_offered_with_its_parameters() -> None:
    members = _official_members()
    assert len(members) > 50  # the official API as installed, not an empty module
    problems = []
    for cls, method, text_signature in members:
        ours = getattr(compat, cls, None)
        if ours is None:
            problems.append(f"pravega_client.{cls} is missing")
            continue
        if method is None:
            continue
        function = getattr(ours, method, None)
        if function is None:
            problems.append(f"pravega_client.{cls}.{method} is missing")
        elif text_signature:
            wanted = SIGNATURES_FIXED.get((cls, method)) or _names(text_signature)
            got = [p for p in inspect.signature(function).parameters if p != "self"]
            if got[: len(wanted)] != wanted:
                problems.append(f"{cls}.{method}: {got} != {wanted}")
    assert problems == []


def test_the_manager_takes_millrace_urls_and_tokens() -> None:
    with pytest.raises(ValueError, match="Millrace's HTTP URL"):
        compat.StreamManager("tcp://127.0.0.1:9090")
    with pytest.raises(ValueError, match=r"needs an https:// \(or tls://\) URL"):
        compat.StreamManager("http://127.0.0.1:9091", tls_enabled=True)
    environ = dict(os.environ)
    os.environ.pop(compat.TOKEN_VARIABLE, None)
    try:
        with pytest.raises(ValueError, match="MILLRACE_TOKEN"):
            compat.StreamManager("http://127.0.0.1:9091", auth_enabled=True)
    finally:
        os.environ.clear()
        os.environ.update(environ)


PROGRAM = """
import asyncio
import sys

import pravega_client

uri, scope = sys.argv[1], sys.argv[2]
manager = pravega_client.StreamManager(uri, auth_enabled=True)
print(manager.create_scope(scope), manager.create_stream(scope, "st", 1))
policy = pravega_client.StreamScalingPolicy.fixed_scaling_policy(2)
retention = pravega_client.StreamRetentionPolicy.by_time(3_600_000)
print(manager.create_stream_with_policy(scope, "tagged", policy, retention, ["a", "b"]))
print(sorted(manager.get_stream_tags(scope, "tagged")), sorted(manager.list_stream(scope)))
writer = manager.create_writer(scope, "st")
writer.write_event("hello", routing_key="k")
writer.write_event_bytes(b"world", routing_key="k")
writer.flush()
txn_writer = manager.create_transaction_writer(scope, "st", 7)
txn = txn_writer.begin_txn()
txn.write_event("in a transaction", routing_key="k")
print(txn.is_open())
txn.commit()
print(txn.is_open())
group = manager.create_reader_group("rg", scope, "st")
reader = group.create_reader("r1")


async def read(count):
    got = []
    while len(got) < count:
        piece = await reader.get_segment_slice_async()
        for event in piece:
            got.append(event.data())
        reader.release_segment(piece)
    return got


print(asyncio.run(read(3)))
group.reader_offline("r1")
print(group.get_streamcut().get_segment_offset_map())
manager.delete_reader_group("rg", scope)
stream = manager.create_byte_stream(scope, "bytes")
stream.write(b"abcdef")
stream.flush()
stream.seek(2, 0)
buffer = bytearray(3)
print(stream.readinto(buffer), bytes(buffer), stream.tell(), stream.current_tail_offset())
"""

EXPECTED = [
    "True True",
    "True",
    "['a', 'b'] ['st', 'tagged']",
    "True",
    "False",
    "[b'hello', b'world', b'in a transaction']",
    "{0: 50}",
    "3 b'cde' 5 6",
]


@pytest.mark.parametrize("how", ["drop-in module", "import as"])
def test_a_program_for_the_official_client_runs_on_millrace(
    standalone: Standalone, tmp_path: Path, how: str
) -> None:
    """The same program, once with ``pravega_client`` resolved to our module (a one-line
    module ahead on the path: the drop-in way) and once importing ``millrace.client.pravega_compat``
    under that name (the one-import change), given two controllers, the first of them dead."""
    source = textwrap.dedent(PROGRAM)
    uri = standalone.base
    path = [os.getcwd()]
    if how == "drop-in module":
        shim = tmp_path / "shim"
        shim.mkdir()
        (shim / "pravega_client.py").write_text(
            "from millrace.client.pravega_compat import *  # noqa\n"
        )
        path.insert(0, str(shim))
    else:
        source = source.replace(
            "import pravega_client\n", "import millrace.client.pravega_compat as pravega_client\n"
        )
        uri = f"http://127.0.0.1:{free_ports(1)[0]},{standalone.base}"
    program = tmp_path / "program.py"
    program.write_text(source)
    scope = f"p{uuid.uuid4().hex[:10]}"
    done = subprocess.run(
        [sys.executable, str(program), uri, scope],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(path),
            "MILLRACE_TOKEN": standalone.token,
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == EXPECTED
    assert "Traceback" not in done.stderr
