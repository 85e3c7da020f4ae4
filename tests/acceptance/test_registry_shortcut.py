"""The schema registry's lookup by id answered in front of Django
(``controller_app.api.registry_shortcut``, ADR 0015), on a ``millrace standalone`` node as
programs call it (a token or Basic credentials, no cookie): the same answer as Django's; a
credential is taken there only after Django allowed it, never once it is refused (a bad
token, a user disabled or a token rotated from the command line, in another process, is
refused at once); a schema deleted for good, a query string and a cookie go to Django."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from typing import Any

from tests.acceptance.standalone_node import Standalone, request

#: A header Django's middleware adds to every answer (clickjacking), which the shortcut's
#: answers do not carry: which of the two answered.
DJANGO_HEADER = "x-frame-options"


def _get(node: Standalone, path: str, authorization: str) -> tuple[int, dict[str, str], bytes]:
    asked = urllib.request.Request(node.base + path, headers={"Authorization": authorization})
    try:
        with urllib.request.urlopen(asked, timeout=30) as answer:
            return answer.status, _lower(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, _lower(exc.headers), exc.read()


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _cli(node: Standalone, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_")}
    env["MILLRACE_DATA_DIR"] = str(node.data_dir)
    done = subprocess.run([sys.executable, "-m", "millrace.ops.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def _register(node: Standalone) -> tuple[str, int]:
    subject = f"short-{uuid.uuid4().hex[:8]}"
    # (a schema of its own: the same text under another subject would share its id)
    schema = {"type": "record", "name": subject.replace("-", "_"),
              "fields": [{"name": "n", "type": "long"}]}  # fmt: skip
    path = f"/registry/subjects/{subject}/versions"
    status, answer = request(node.base, "POST", path, node.token, {"schema": json.dumps(schema)})
    assert status == 200, answer
    return subject, int(answer["id"])


def test_a_lookup_by_id_is_answered_in_front_of_django_once_django_allowed_the_caller(
    standalone: Standalone,
) -> None:
    _, schema_id = _register(standalone)
    path = f"/registry/schemas/ids/{schema_id}"
    token = f"Token {standalone.token}"
    first = _get(standalone, path, token)
    second = _get(standalone, path, token)
    assert first[0] == second[0] == 200
    assert DJANGO_HEADER in first[1] and DJANGO_HEADER not in second[1]
    assert first[2] == second[2]
    assert first[1]["content-type"] == second[1]["content-type"]
    assert json.loads(json.loads(second[2])["schema"])["type"] == "record"
    # a Bearer token is another credential: Django judges it first
    assert DJANGO_HEADER in _get(standalone, path, f"Bearer {standalone.token}")[1]
    # a query string, and an unknown credential, are always Django's
    assert DJANGO_HEADER in _get(standalone, path + "?format=resolved", token)[1]
    for _ in range(2):
        status, headers, _ = _get(standalone, path, "Token not-a-token")
        assert status == 401 and DJANGO_HEADER in headers


def test_a_credential_changed_from_the_command_line_is_refused_at_once(
    standalone: Standalone,
) -> None:
    """The command line runs in a process of its own; its change bumps the credentials'
    generation in the metadata database, which the shortcut reads with every answer."""
    _, schema_id = _register(standalone)
    path = f"/registry/schemas/ids/{schema_id}"
    name = f"vic{uuid.uuid4().hex[:4]}"
    token = _cli(standalone, "user", "create", name, "--role", "viewer").stdout.split()[-1]
    password = _cli(standalone, "user", "password", name).stdout.strip().rsplit(" ", 1)[-1]
    basic = "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()
    for credential in (f"Token {token}", basic):
        assert _get(standalone, path, credential)[0] == 200
        status, headers, _ = _get(standalone, path, credential)
        assert status == 200 and DJANGO_HEADER not in headers
    _cli(standalone, "user", "disable", name)
    for credential in (f"Token {token}", basic):
        status, headers, _ = _get(standalone, path, credential)
        assert status == 401 and DJANGO_HEADER in headers
    _cli(standalone, "user", "enable", name)
    assert _get(standalone, path, f"Token {token}")[0] == 200
    assert DJANGO_HEADER not in _get(standalone, path, f"Token {token}")[1]
    _cli(standalone, "user", "delete", name)
    assert _get(standalone, path, f"Token {token}")[0] == 401


def test_a_schema_deleted_for_good_is_not_found(standalone: Standalone) -> None:
    subject, schema_id = _register(standalone)
    path = f"/registry/schemas/ids/{schema_id}"
    token = f"Token {standalone.token}"
    for _ in range(2):
        assert _get(standalone, path, token)[0] == 200
    base = f"/registry/subjects/{subject}"
    assert request(standalone.base, "DELETE", base, standalone.token)[0] == 200
    assert _get(standalone, path, token)[0] == 200  # (a soft delete keeps the id, as Confluent)
    assert request(standalone.base, "DELETE", base + "?permanent=true", standalone.token)[0] == 200
    status, headers, body = _get(standalone, path, token)
    assert status == 404, (headers, body)
    assert json.loads(body)["error_code"] == 40403
    assert DJANGO_HEADER in headers


def test_a_confluent_client_reads_through_it(standalone: Standalone) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    _, schema_id = _register(standalone)
    client = SchemaRegistryClient({
        "url": f"{standalone.base}/registry", "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.token": standalone.token, "bearer.auth.logical.cluster": "millrace",
    })  # fmt: skip
    for _ in range(3):
        client.clear_caches()
        assert client.get_schema(schema_id).schema_type == "AVRO"
