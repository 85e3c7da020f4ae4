"""Streams bound to schema subjects, their appends held to them, on a ``millrace standalone``
node: Confluent's serializers (unchanged) produce what a stream in ``header`` or ``validate``
mode takes; bytes that are not refused on every face (Millrace's Python client and its
transactions, ``pravega_compat``, the REST API, Pravega's own client) with an error naming the
event and why (Pravega's own client excepted: its writer ignores the error and waits), and
the same bad events are stored when the enforcement is off (the guard is what refuses them)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import websockets
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

import millrace.client.pravega_compat as compat
from millrace.client.errors import SchemaRefusedError
from millrace.client.manager import StreamManager
from tests.acceptance.standalone_node import Standalone, request
from tests.acceptance.test_pravega_client import run_program

ID = {"name": "id", "type": "long"}
NOTE = {"name": "note", "type": "string", "default": ""}
ORDER_V1 = json.dumps({"type": "record", "name": "Order", "fields": [ID]})
ORDER_V2 = json.dumps({"type": "record", "name": "Order", "fields": [ID, NOTE]})
NOT_FRAMED = b"plain bytes, no schema header"
#: (``segment_app.server.schema_guard.MAX_AGE_SECONDS``)
POLICY_MAX_AGE_SECONDS = 1.0


@pytest.fixture
def registry(standalone: Standalone) -> SchemaRegistryClient:
    password = (standalone.data_dir / "admin-password").read_text().strip()
    return SchemaRegistryClient(
        {"url": f"{standalone.base}/registry", "basic.auth.user.info": f"admin:{password}"}
    )


@pytest.fixture
def bound(standalone: Standalone) -> Iterator[tuple[StreamManager, str]]:
    """A new scope with stream ``st`` (one segment) created in ``header`` mode."""
    scope = f"e{uuid.uuid4().hex[:10]}"
    manager = StreamManager(standalone.base, token=standalone.token)
    try:
        manager.create_scope(scope)
        body = {
            "streamName": "st",
            "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1},
            "schema": {"enforcement": "header"},
        }
        path = f"/v1/scopes/{scope}/streams"
        status, answer = request(standalone.base, "POST", path, standalone.token, body)
        assert status == 201, answer
        yield manager, scope
    finally:
        manager.close()


def _serializer(registry: SchemaRegistryClient, schema: str) -> AvroSerializer:
    return AvroSerializer(registry, schema)


def _context(scope: str) -> SerializationContext:
    """What a Confluent producer names the stream's values by (the topic name strategy)."""
    return SerializationContext(f"{scope}.st", MessageField.VALUE)


def _set(node: Standalone, scope: str, **binding: str) -> dict[str, Any]:
    """Change the binding, and wait until every node holds appends to it (a node reads it
    again when what it read is 1 s old)."""
    status, answer = request(node.base, "PUT", f"/v1/scopes/{scope}/streams/st/schema",
                             node.token, binding)  # fmt: skip
    assert status == 200, answer
    time.sleep(POLICY_MAX_AGE_SECONDS)
    return dict(answer)


def _stored(node: Standalone, scope: str) -> list[bytes]:
    status, answer = request(node.base, "GET", f"/v1/scopes/{scope}/streams/st/events?limit=1000",
                             node.token)  # fmt: skip
    assert status == 200, answer
    return [base64.b64decode(e["dataBase64"]) for e in answer["events"]]


def test_a_stream_is_bound_to_its_subject(
    standalone: Standalone, bound: tuple[StreamManager, str]
) -> None:
    _, scope = bound
    status, answer = request(standalone.base, "GET", f"/v1/scopes/{scope}/streams/st/schema",
                             standalone.token)  # fmt: skip
    assert status == 200
    assert answer == {"subject": f"{scope}.st-value", "defaultSubject": True,
                      "enforcement": "header"}  # fmt: skip
    assert _set(standalone, scope, subject="orders-value", enforcement="validate") == {
        "subject": "orders-value", "defaultSubject": False, "enforcement": "validate"}  # fmt: skip
    status, refused = request(standalone.base, "PUT", f"/v1/scopes/{scope}/streams/st/schema",
                              standalone.token, {"enforcement": "strict"})  # fmt: skip
    assert status == 400 and "enforcement" in json.dumps(refused)


def test_header_mode_takes_confluent_bytes_and_refuses_others_on_the_python_client(
    standalone: Standalone, registry: SchemaRegistryClient, bound: tuple[StreamManager, str]
) -> None:
    manager, scope = bound
    with manager.create_writer(scope, "st") as writer:
        # The serializer registers v1 under <scope>.st-value now, after the writer was set up,
        # and appends with its id at once: the node learns of it then.
        first = _serializer(registry, ORDER_V1)({"id": 1}, _context(scope))
        writer.write_event(first, routing_key="k")
        writer.flush()
        writer.write_event(NOT_FRAMED, routing_key="k")
        with pytest.raises(SchemaRefusedError) as refused:
            writer.flush()
        message = str(refused.value)
        assert "does not start with a schema header" in message
        assert f"subject '{scope}.st-value'" in message and NOT_FRAMED[:8].hex(" ") in message
        unknown = b"\x00" + (987_654).to_bytes(4, "big") + b"\x02"
        writer.write_event(unknown, routing_key="k")
        with pytest.raises(SchemaRefusedError, match="schema id 987654 is not registered"):
            writer.flush()
        # the writer goes on: the next good event is taken
        second = _serializer(registry, ORDER_V2)({"id": 2, "note": "x"}, _context(scope))
        writer.write_event(second, routing_key="k")
        writer.flush()
    assert _stored(standalone, scope) == [first, second]


def test_validate_mode_decodes_each_event_with_its_schema(
    standalone: Standalone, registry: SchemaRegistryClient, bound: tuple[StreamManager, str]
) -> None:
    manager, scope = bound
    _set(standalone, scope, enforcement="validate")
    good = _serializer(registry, ORDER_V1)({"id": 7}, _context(scope))
    schema_id = int.from_bytes(good[1:5], "big")
    truncated = good[:5]  # the header of a registered schema, and no value after it
    with manager.create_writer(scope, "st") as writer:
        writer.write_event(good, routing_key="k")
        writer.flush()
        writer.write_event(truncated, routing_key="k")
        with pytest.raises(SchemaRefusedError, match=f"does not decode with schema {schema_id}"):
            writer.flush()
    _set(standalone, scope, enforcement="header")  # the header alone is then enough
    with manager.create_writer(scope, "st") as writer:
        writer.write_event(truncated, routing_key="k")
        writer.flush()
    assert _stored(standalone, scope) == [good, truncated]


def _order_pb2(tmp_path: Any) -> Any:
    """A class generated by protoc (grpc_tools) from ``order.proto``."""
    import importlib

    proto = tmp_path / "order.proto"
    proto.write_text(
        'syntax = "proto3"; package enf;\nmessage Order { int64 id = 1; string note = 2; }\n'
    )
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}",
                    f"--python_out={tmp_path}", str(proto)], check=True)  # fmt: skip
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module("order_pb2")
    finally:
        sys.path.remove(str(tmp_path))


def test_validate_mode_holds_json_schema_and_protobuf_events_to_their_schemas(
    standalone: Standalone, registry: SchemaRegistryClient, bound: tuple[StreamManager, str],
    tmp_path: Any,
) -> None:  # fmt: skip
    """Confluent's ``JSONSerializer`` and ``ProtobufSerializer`` (a generated class) produce
    what a stream in ``validate`` mode takes; a body of the right id that its schema refuses
    (JSON of another shape, bytes that are not the message) is refused naming why."""
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    manager, scope = bound
    _set(standalone, scope, enforcement="validate")
    shape = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    json_good = JSONSerializer(json.dumps(shape), registry)({"id": 3}, _context(scope))
    json_bad = json_good[:5] + b'{"id": "three"}'
    order_pb2 = _order_pb2(tmp_path)
    proto = ProtobufSerializer(order_pb2.Order, registry, {"use.deprecated.format": False})
    in_proto = SerializationContext(f"{scope}.proto", MessageField.VALUE)  # its own subject
    proto_good = proto(order_pb2.Order(id=4, note="four"), in_proto)
    proto_bad = proto_good[:5] + b"\x00\xff\xff\xff"
    for good, bad, why in ((json_good, json_bad, "does not match its JSON schema"),
                           (proto_good, proto_bad, "not Protobuf of its schema")):  # fmt: skip
        if good is proto_good:
            _set(standalone, scope, subject=f"{scope}.proto-value")
        with manager.create_writer(scope, "st") as writer:
            writer.write_event(good, routing_key="k")
            writer.flush()
            writer.write_event(bad, routing_key="k")
            with pytest.raises(SchemaRefusedError, match=why):
                writer.flush()
    assert _stored(standalone, scope) == [json_good, proto_good]


def test_every_face_refuses_and_stores_when_enforcement_is_off(
    standalone: Standalone, registry: SchemaRegistryClient, bound: tuple[StreamManager, str]
) -> None:
    """Transactions, ``pravega_compat`` and REST appends are held to the subject too; with the
    enforcement off, the same bytes are stored (so the guard is what refused them)."""
    manager, scope = bound
    good = _serializer(registry, ORDER_V1)({"id": 3}, _context(scope))
    for enforcement in ("header", "none"):
        _set(standalone, scope, enforcement=enforcement)
        outcomes = _faces(standalone, manager, scope, good)
        if enforcement == "header":
            assert all(o.startswith("refused") for o in outcomes.values()), outcomes
            assert "does not start with a schema header" in outcomes["rest"], outcomes
        else:
            assert set(outcomes.values()) == {"stored"}, outcomes
    stored = _stored(standalone, scope)
    assert stored.count(good) == 2 * 3 and stored.count(NOT_FRAMED) == 3, stored


def _faces(node: Standalone, manager: StreamManager, scope: str, good: bytes) -> dict[str, str]:
    """Each face writes a good event and a bad one; what became of the bad one."""
    outcomes = {}
    with manager.create_transaction_writer(scope, "st") as txns:
        txn = txns.begin_txn()
        txn.write_event(good, routing_key="t")
        try:
            txn.write_event(NOT_FRAMED, routing_key="t")
            txn.commit()
            outcomes["transaction"] = "stored"
        except Exception as exc:
            outcomes["transaction"] = f"refused: {exc}"
            txn.abort()
            with txns.begin_txn() as again:  # the good event alone commits
                again.write_event(good, routing_key="t")
    compat_manager = compat.StreamManager(node.base, auth_enabled=True, token=node.token)
    writer = compat_manager.create_writer(scope, "st")
    writer.write_event_bytes(good, "c")
    writer.flush()
    try:
        writer.write_event_bytes(NOT_FRAMED, "c")
        writer.flush()
        outcomes["pravega_compat"] = "stored"
    except Exception as exc:
        outcomes["pravega_compat"] = f"refused: {exc}"
    path = f"/v1/scopes/{scope}/streams/st/events"
    status, answer = request(node.base, "POST", path, node.token, _events(good))
    assert status == 201, answer
    status, answer = request(node.base, "POST", path, node.token, _events(NOT_FRAMED))
    if status == 201:
        outcomes["rest"] = "stored"
    else:
        assert (status, answer["code"]) == (400, "schema-refused"), answer
        outcomes["rest"] = f"refused: {answer['message']}"
    return outcomes


def _events(data: bytes) -> dict[str, Any]:
    return {"events": [{"dataBase64": base64.b64encode(data).decode()}]}


def test_the_cli_sets_and_shows_the_binding(
    standalone: Standalone, bound: tuple[StreamManager, str]
) -> None:
    _, scope = bound
    env = os.environ | {"MILLRACE_URL": standalone.base, "MILLRACE_TOKEN": standalone.token}
    done = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "stream", "schema", f"{scope}/st",
         "--enforcement", "validate", "--subject", "orders-value"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "orders-value" in done.stdout and "validate" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "stream", "schema", f"{scope}/st",
         "--enforcement", "strict"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "strict" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "stream", "create", f"{scope}/other",
         "--enforcement", "header"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    status, answer = request(standalone.base, "GET", f"/v1/scopes/{scope}/streams/other/schema",
                             standalone.token)  # fmt: skip
    assert (status, answer["enforcement"]) == (200, "header"), answer


def test_pravegas_own_client_is_refused_too(
    standalone: Standalone, registry: SchemaRegistryClient, bound: tuple[StreamManager, str]
) -> None:
    """Pravega's official client (Rust inside) over the wire protocol: its unframed event is
    not stored under ``header`` (its writer ignores the refusal: the write waits), and is
    with the enforcement off."""
    _, scope = bound
    good = _serializer(registry, ORDER_V1)({"id": 5}, _context(scope))
    schema_id = str(int.from_bytes(good[1:5], "big"))
    found = run_program(standalone, "typed", scope, schema_id, "5")
    assert found == {"second_write_returned": False}
    framed = b"\x00" + int(schema_id).to_bytes(4, "big") + b"\x02"
    assert _stored(standalone, scope) == [framed]
    _set(standalone, scope, enforcement="none")
    found = run_program(standalone, "typed", scope, schema_id, "30")
    assert found == {"second_write_returned": True}
    assert _stored(standalone, scope) == [framed, framed, b"not framed"]


def test_events_are_decoded_by_their_schemas_over_rest_websockets_and_the_cli(
    standalone: Standalone, registry: SchemaRegistryClient, bound: tuple[StreamManager, str]
) -> None:
    """``decode=json`` on a REST read and a WebSocket tail, and ``stream read --decode``:
    each event as its schema id and value, versions mixed; one with no header says so."""
    manager, scope = bound
    first = _serializer(registry, ORDER_V1)({"id": 1}, _context(scope))
    second = _serializer(registry, ORDER_V2)({"id": 2, "note": "hi"}, _context(scope))
    with manager.create_writer(scope, "st") as writer:
        for event in (first, second):
            writer.write_event(event, routing_key="k")
    ids = [int.from_bytes(e[1:5], "big") for e in (first, second)]
    expected = [{"schemaId": ids[0], "value": {"id": 1}},
                {"schemaId": ids[1], "value": {"id": 2, "note": "hi"}}]  # fmt: skip
    path = f"/v1/scopes/{scope}/streams/st/events?decode=json"
    status, answer = request(standalone.base, "GET", path, standalone.token)
    assert status == 200, answer
    assert [{k: e[k] for k in ("schemaId", "value")} for e in answer["events"]] == expected
    status, refused = request(standalone.base, "GET", f"{path[:-4]}xml", standalone.token)
    assert (status, refused["code"]) == (400, "invalid-argument"), refused

    async def tail() -> list[dict[str, Any]]:
        uri = standalone.base.replace("http", "ws", 1)
        uri += f"/ws/streams/{scope}/st?from=head&decode=json&token={standalone.token}"
        async with websockets.connect(uri) as ws:
            found: list[dict[str, Any]] = []
            while len(found) < 2:
                message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                found += message.get("events", [])
            return found

    decoded = asyncio.run(tail())
    assert [{k: e[k] for k in ("schemaId", "value")} for e in decoded] == expected
    env = os.environ | {"MILLRACE_URL": standalone.base, "MILLRACE_TOKEN": standalone.token}
    done = subprocess.run(
        [sys.executable, "-m", "millrace.ops.cli", "stream", "read", f"{scope}/st", "--decode",
         "--limit", "2"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [e["value"] for e in expected]
    _set(standalone, scope, enforcement="none")
    with manager.create_writer(scope, "st") as writer:
        writer.write_event(NOT_FRAMED, routing_key="k")
    status, answer = request(standalone.base, "GET", path, standalone.token)
    assert answer["events"][-1]["decodeError"].startswith("no schema header"), answer


def test_pravega_compat_takes_a_serializer_as_pravegas_clients_do(
    standalone: Standalone, registry: SchemaRegistryClient, bound: tuple[StreamManager, str]
) -> None:
    """A writer, a transaction writer and a reader group made with ``serializer=`` (Confluent's
    Avro serializer and deserializer, adapted): values in, values out, and the stream in
    ``validate`` mode takes them."""
    _, scope = bound
    _set(standalone, scope, enforcement="validate")
    serializer = compat.ConfluentSerializer(
        AvroSerializer(registry, ORDER_V2), AvroDeserializer(registry), scope, "st"
    )
    manager = compat.StreamManager(standalone.base, auth_enabled=True, token=standalone.token)
    writer = manager.create_writer(scope, "st", serializer=serializer)
    writer.write_event({"id": 1, "note": "plain"}, "k")
    writer.flush()
    txns = manager.create_transaction_writer(scope, "st", 1, serializer=serializer)
    txn = txns.begin_txn()
    txn.write_event({"id": 2, "note": "in a transaction"}, "k")
    txn.commit()
    group = manager.create_reader_group("typed", scope, "st", serializer=serializer)
    reader = group.create_reader("r1")

    async def read_two() -> list[Any]:
        values: list[Any] = []
        while len(values) < 2:
            piece = await asyncio.wait_for(reader.get_segment_slice_async(), 30)
            values += [event.value() for event in piece]
            reader.release_segment(piece)
        return values

    assert asyncio.run(read_two()) == [{"id": 1, "note": "plain"},
                                       {"id": 2, "note": "in a transaction"}]  # fmt: skip
    reader.reader_offline()
