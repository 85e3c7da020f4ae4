"""The schema registry as Confluent's clients call it: ``confluent-kafka``'s
``SchemaRegistryClient`` and serializers and ``python-schema-registry-client``, unchanged, against
a controller served in this process (Django's live server) at ``<url>/registry``, with Basic
credentials; events written and read back through Millrace's own writer and reader."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from django.contrib.auth import get_user_model

from controller_app.access.roles import grant
from controller_app.access.tokens import token_for
from controller_app.models import AuditEntry
from millrace.client.controller import ControllerError
from millrace.client.manager import StreamManager
from tests.controller.conftest import NodeProcess

PASSWORD = "a-long-enough-password-7"


def _user(role: str) -> str:
    name = f"{role}{uuid.uuid4().hex[:6]}"
    user = get_user_model().objects.create_user(name, password=PASSWORD)
    grant(user, role)  # type: ignore[arg-type]
    return name


@pytest.fixture
def registry_url(live_server: Any) -> str:
    return f"{live_server.url}/registry"


def _client(url: str, role: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url, "basic.auth.user.info": f"{_user(role)}:{PASSWORD}"})


@pytest.fixture
def operator(registry_url: str) -> SchemaRegistryClient:
    return _client(registry_url, "operator")


@pytest.fixture
def admin(registry_url: str) -> SchemaRegistryClient:
    return _client(registry_url, "admin")


def _record(name: str, *fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


V1 = _record("Order", {"name": "id", "type": "long"})
V2 = _record(
    "Order", {"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""}
)
V3_NO_DEFAULT = _record(
    "Order", {"name": "id", "type": "long"}, {"name": "qty", "type": "int"}
)  # (a field without a default: old data cannot be read with it)


def _subject() -> str:
    return f"s{uuid.uuid4().hex[:8]}.orders-value"


def _code(exc: pytest.ExceptionInfo[SchemaRegistryError]) -> int:
    return int(exc.value.error_code)


def test_register_evolve_and_refuse_under_backward(operator: SchemaRegistryClient) -> None:
    subject = _subject()
    first = operator.register_schema(subject, Schema(V1, "AVRO"))
    assert operator.register_schema(subject, Schema(V1, "AVRO")) == first  # no new version
    second = operator.register_schema(subject, Schema(V2, "AVRO"))
    assert second != first
    with pytest.raises(SchemaRegistryError) as refused:
        operator.register_schema(subject, Schema(V3_NO_DEFAULT, "AVRO"))
    assert refused.value.http_status_code == 409 and "qty" in refused.value.error_message
    assert operator.get_versions(subject) == [1, 2]
    latest = operator.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(operator.get_schema(first).schema_str) == json.loads(V1)
    found = operator.lookup_schema(subject, Schema(V2, "AVRO"))
    assert (found.version, found.schema_id) == (2, second)
    assert operator.test_compatibility(subject, Schema(V2, "AVRO")) is True
    assert operator.test_compatibility(subject, Schema(V3_NO_DEFAULT, "AVRO")) is False
    assert subject in operator.get_subjects()


@pytest.mark.parametrize(
    ("level", "accepted", "refused"),
    [
        # reader = new: a field with a default may be added, not one without
        ("BACKWARD", V2, V3_NO_DEFAULT),
        # reader = old: the new schema may add any field, not drop one the old needs
        ("FORWARD", V3_NO_DEFAULT, _record("Order", {"name": "other", "type": "long"})),
        ("FULL", V2, V3_NO_DEFAULT),
        ("NONE", _record("Order", {"name": "id", "type": "string"}), None),
    ],
)
def test_each_level_accepts_and_refuses(
    operator: SchemaRegistryClient,
    admin: SchemaRegistryClient,
    level: str,
    accepted: str,
    refused: str | None,
) -> None:
    subject = _subject()
    operator.register_schema(subject, Schema(V1, "AVRO"))
    assert admin.set_compatibility(subject, level) == {"compatibility": level}
    assert admin.get_compatibility(subject) == level
    operator.register_schema(subject, Schema(accepted, "AVRO"))
    if refused is not None:
        with pytest.raises(SchemaRegistryError) as exc:
            operator.register_schema(subject, Schema(refused, "AVRO"))
        assert exc.value.http_status_code == 409


def test_transitive_levels_check_every_version(
    operator: SchemaRegistryClient, admin: SchemaRegistryClient
) -> None:
    subject = _subject()
    admin.set_compatibility(subject, "NONE")
    a, b = {"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}
    operator.register_schema(subject, Schema(_record("R", a), "AVRO"))
    operator.register_schema(subject, Schema(_record("R", b), "AVRO"))
    a_text = {"name": "a", "type": "string", "default": ""}
    back_to_a = Schema(_record("R", a_text, b), "AVRO")  # (reads v2's data; v1's a is an int)
    admin.set_compatibility(subject, "BACKWARD")
    assert operator.test_compatibility(subject, back_to_a) is True  # (the latest only)
    admin.set_compatibility(subject, "BACKWARD_TRANSITIVE")
    assert operator.test_compatibility_all_versions(subject, back_to_a) is False
    with pytest.raises(SchemaRegistryError) as exc:
        operator.register_schema(subject, back_to_a)
    assert exc.value.http_status_code == 409


def test_deletes_as_confluent_does_them(
    operator: SchemaRegistryClient, admin: SchemaRegistryClient
) -> None:
    subject = _subject()
    first = operator.register_schema(subject, Schema(V1, "AVRO"))
    operator.register_schema(subject, Schema(V2, "AVRO"))
    with pytest.raises(SchemaRegistryError) as exc:  # permanent before soft
        admin.delete_version(subject, 1, permanent=True)
    assert _code(exc) == 40407
    assert admin.delete_version(subject, 1) == 1
    with pytest.raises(SchemaRegistryError) as exc:
        admin.delete_version(subject, 1)
    assert _code(exc) == 40406
    assert operator.get_versions(subject) == [2]
    assert json.loads(operator.get_schema(first).schema_str) == json.loads(V1)  # ids live on
    with pytest.raises(SchemaRegistryError) as exc:  # the subject's permanent delete first
        admin.delete_subject(subject, permanent=True)
    assert _code(exc) == 40405
    assert admin.delete_subject(subject) == [2]
    with pytest.raises(SchemaRegistryError) as exc:
        admin.delete_subject(subject)
    assert _code(exc) == 40404
    assert subject not in operator.get_subjects()
    assert subject in operator.get_subjects(deleted=True)
    operator.clear_caches()  # (else the client answers from its cache, asking nothing)
    again = operator.register_schema(subject, Schema(V1, "AVRO"))  # the same id, a new version
    assert again == first and operator.get_latest_version(subject).version == 3
    admin.delete_subject(subject)
    assert admin.delete_subject(subject, permanent=True) == [1, 2, 3]
    with pytest.raises(SchemaRegistryError) as exc:
        operator.get_schema(first)
    assert _code(exc) == 40403
    with pytest.raises(SchemaRegistryError) as exc:
        operator.get_versions(subject)
    assert _code(exc) == 40401


def test_references_roles_read_only_and_audit(
    registry_url: str, operator: SchemaRegistryClient, admin: SchemaRegistryClient
) -> None:
    base = _subject()
    money = _record("demo.Money", {"name": "cents", "type": "long"})
    operator.register_schema(base, Schema(money, "AVRO"))
    user = _subject()
    with_ref = Schema(
        _record("demo.Order", {"name": "price", "type": "demo.Money"}),
        "AVRO",
        [SchemaReference("demo.Money", base, 1)],
    )
    order_id = operator.register_schema(user, with_ref)
    assert operator.get_schema(order_id).references[0].subject == base
    with pytest.raises(SchemaRegistryError) as exc:  # still referenced
        admin.delete_subject(base)
    assert _code(exc) == 42206

    viewer = _client(registry_url, "viewer")
    assert viewer.get_versions(base) == [1]
    with pytest.raises(SchemaRegistryError) as exc:
        viewer.register_schema(_subject(), Schema(V1, "AVRO"))
    assert exc.value.http_status_code == 403
    with pytest.raises(SchemaRegistryError) as exc:
        operator.delete_subject(user)
    assert exc.value.http_status_code == 403
    anonymous = httpx.get(f"{registry_url}/subjects")
    assert anonymous.status_code == 401 and anonymous.json()["error_code"] == 401

    admin.update_mode(user, "READONLY")
    with pytest.raises(SchemaRegistryError) as exc:
        operator.register_schema(user, Schema(V1, "AVRO"))
    assert _code(exc) == 42205
    admin.delete_mode(user)
    rows = AuditEntry.objects.filter(action__startswith="schema.", object__startswith=user)
    assert {r.action for r in rows} >= {"schema.register", "schema.mode", "schema.mode-delete"}


def test_bad_input_gets_confluents_errors(registry_url: str, admin: SchemaRegistryClient) -> None:
    subject = _subject()
    with pytest.raises(SchemaRegistryError) as exc:
        admin.register_schema(subject, Schema('{"type": "record"}', "AVRO"))
    assert _code(exc) == 42201
    with pytest.raises(SchemaRegistryError) as exc:
        admin.register_schema(subject, Schema("message M { int32 a = 1 }", "PROTOBUF"))
    assert _code(exc) == 42201 and "Expected" in exc.value.error_message
    with pytest.raises(SchemaRegistryError) as exc:
        admin.set_compatibility(subject, "SIDEWAYS")
    assert _code(exc) == 42203
    name = _user("admin")
    for path, body, code in [
        (f"subjects/{subject}/versions/zero", None, 42202),
        (f"subjects/{subject}/versions", "not json", 400),
        (f"subjects/{subject}/versions", {"schema": 12}, 42201),
        (f"subjects/{subject}/versions", {"schema": "{}", "schemaType": "XML"}, 42201),
    ]:
        method = "GET" if body is None else "POST"
        answer = httpx.request(
            method,
            f"{registry_url}/{path}",
            content=body if isinstance(body, str) else None,
            json=body if isinstance(body, dict) else None,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
            auth=(name, PASSWORD),
        )
        assert answer.json()["error_code"] == code, (path, answer.text)
    assert httpx.get(f"{registry_url}/schemas/types", auth=(name, PASSWORD)).json() == [
        "AVRO",
        "JSON",
        "PROTOBUF",
    ]


def test_python_schema_registry_client(registry_url: str) -> None:
    from schema_registry.client import SchemaRegistryClient as Other
    from schema_registry.client import schema as other_schema

    name = _user("operator")
    client = Other(url=registry_url.replace("://", f"://{name}:{PASSWORD}@"))
    subject = _subject()
    schema_id = client.register(subject, other_schema.AvroSchema(json.loads(V1)))
    assert client.get_by_id(schema_id).raw_schema == json.loads(V1)
    assert client.get_versions(subject) == [1]
    assert client.test_compatibility(subject, other_schema.AvroSchema(json.loads(V2)))
    assert (
        client.check_version(subject, other_schema.AvroSchema(json.loads(V1))).schema_id
        == schema_id
    )


# -- through Millrace's writer and reader ---------------------------------------------------------


@pytest.fixture
def manager(live_server: Any, registered_node: NodeProcess) -> Iterator[StreamManager]:
    user = get_user_model().objects.create_user(f"w{uuid.uuid4().hex[:8]}")
    grant(user, "operator")
    with StreamManager(live_server.url, token=token_for(user)) as made:
        yield made


def _round_trip(
    manager: StreamManager, serialize: Any, deserialize: Any, values: list[Any]
) -> list[Any]:
    scope = f"sr{uuid.uuid4().hex[:8]}"
    manager.create_scope(scope)
    manager.create_stream(scope, "orders")
    context = SerializationContext(f"{scope}.orders", MessageField.VALUE)
    with manager.create_writer(scope, "orders") as writer:
        for value in values:
            writer.write_event(serialize(value, context))
        writer.flush()
    reader = manager.create_reader(scope, "orders")
    read = [reader.read_next(timeout=5) for _ in values]
    assert all(r is not None and r.data[:1] == b"\x00" for r in read)  # Confluent's wire format
    return [deserialize(r.data, context) for r in read if r is not None]


def test_avro_and_json_serializers_through_a_stream(
    operator: SchemaRegistryClient, manager: StreamManager
) -> None:
    orders = [{"id": 1, "note": "first"}, {"id": 2, "note": ""}]
    got = _round_trip(manager, AvroSerializer(operator, V2), AvroDeserializer(operator), orders)
    assert got == orders
    schema = json.dumps(
        {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    )
    got = _round_trip(
        manager,
        JSONSerializer(schema, operator),
        JSONDeserializer(None, schema_registry_client=operator),
        [{"id": 7}],
    )
    assert got == [{"id": 7}]


def test_protobuf_serializer_with_a_generated_class(
    operator: SchemaRegistryClient, manager: StreamManager, tmp_path: Path
) -> None:
    proto = tmp_path / "order.proto"
    proto.write_text(
        'syntax = "proto3"; package srtest; import "google/protobuf/timestamp.proto";\n'
        "message Order { int64 id = 1; string note = 2; google.protobuf.Timestamp at = 3; }\n"
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{tmp_path}",
            f"--python_out={tmp_path}",
            str(proto),
        ],
        check=True,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        order_pb2 = importlib.import_module("order_pb2")
    finally:
        sys.path.remove(str(tmp_path))
    message = order_pb2.Order(id=9, note="nine")
    serializer = ProtobufSerializer(order_pb2.Order, operator, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(order_pb2.Order, {"use.deprecated.format": False})
    got = _round_trip(manager, serializer, deserializer, [message])
    assert got == [message]


def test_the_cli(live_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from millrace.ops.cli import main

    user = get_user_model().objects.create_user(f"cli{uuid.uuid4().hex[:6]}")
    grant(user, "admin")
    remote = ["--url", live_server.url, "--token", token_for(user)]
    subject = _subject()
    (tmp_path / "v1.avsc").write_text(V1)
    (tmp_path / "v3.avsc").write_text(V3_NO_DEFAULT)
    (tmp_path / "note.txt").write_text(V1)

    def run(*argv: str) -> tuple[int, str]:
        code = main(["schema", *argv, *remote])
        return code, capsys.readouterr().out.strip()

    code, made = run("register", subject, str(tmp_path / "v1.avsc"))
    assert code == 0 and made.isdigit()
    assert run("list", "--prefix", subject[:5]) == (0, subject)
    code, shown = run("show", subject)
    assert f"{subject} version 1: schema {made} (AVRO)" in shown
    with pytest.raises(SystemExit) as refused:
        run("check", subject, str(tmp_path / "v3.avsc"))
    assert refused.value.code == 1 and "qty" in capsys.readouterr().out
    assert run("config", subject) == (0, f"{subject}: BACKWARD")
    assert run("config", subject, "--level", "none") == (0, f"{subject}: NONE")
    assert run("check", subject, str(tmp_path / "v3.avsc")) == (0, "compatible")
    assert main(["schema", "register", subject, str(tmp_path / "note.txt"), *remote]) != 0
    assert "--type" in capsys.readouterr().err
    assert main(["schema", "delete", subject, "--permanent", *remote]) != 0
    assert "40405" in capsys.readouterr().err
    assert run("delete", subject) == (0, f"deleted {subject} version(s) 1")


def test_a_remembered_basic_credential_ends_with_its_password_or_its_user(
    registry_url: str,
) -> None:
    """Basic credentials are remembered once verified (Confluent's clients send them with every
    request); a new password, or the user disabled, ends that at once."""
    name = _user("viewer")
    old = (name, PASSWORD)
    for _ in range(2):  # verified, then remembered
        assert httpx.get(f"{registry_url}/subjects", auth=old).status_code == 200
    user = get_user_model().objects.get(username=name)
    user.set_password("another-long-password-8")
    user.save()
    assert httpx.get(f"{registry_url}/subjects", auth=old).status_code == 401
    new = (name, "another-long-password-8")
    assert httpx.get(f"{registry_url}/subjects", auth=new).status_code == 200
    user.is_active = False
    user.save()
    assert httpx.get(f"{registry_url}/subjects", auth=new).status_code == 401


def test_the_sdks_management_calls_reach_the_registry_and_the_scopes(
    manager: StreamManager,
) -> None:
    """``StreamManager.admin`` (``millrace.client.admin.AdminCalls``): the calls the command
    line and the Spark bridge make, as a program makes them, answered as the REST API does."""
    scope = f"ad{uuid.uuid4().hex[:8]}"
    manager.create_scope(scope)
    manager.create_stream(scope, "orders")
    subject = f"{scope}.orders-value"
    made = manager.admin(lambda a: a.register_schema(subject, {"schema": V2}))
    by_id = manager.admin(lambda a: a.schema_by_id(made["id"]))
    latest = manager.admin(lambda a: a.schema_version(subject, "latest"))
    assert json.loads(by_id["schema"]) == json.loads(latest["schema"]) == json.loads(V2)
    assert latest["id"] == made["id"]
    binding = manager.admin(lambda a: a.stream_schema(scope, "orders"))
    assert binding["subject"] == subject and binding["enforcement"] == "none"
    segments = manager.admin(lambda a: a.segments(scope, "orders"))
    assert [s["segmentId"] for s in segments] == [0]
    with pytest.raises(ControllerError) as refused:  # (an operator may not set quotas)
        manager.admin(lambda a: a.scope_quota(scope, {"streams": 3}))
    assert refused.value.status == 403
