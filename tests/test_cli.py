"""The ``millrace`` command: help, version, exit statuses, clear errors and delegation."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from millrace.kernel.claims import TokenVerifier
from millrace.kernel.config import ConfigError, SegmentStoreSettings
from millrace.kernel.logs import QuietProbes, Redact, redact
from millrace.ops import cli

MILLRACE = Path(sys.executable).with_name("millrace")  # the installed console script


def run_millrace(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {"PATH": os.environ["PATH"], "MILLRACE_DATA_DIR": str(data_dir)} | env
    return subprocess.run(
        [str(MILLRACE), *args], env=full_env, capture_output=True, text=True, timeout=120
    )


# -- whole command, in a subprocess --------------------------------------------------------


def test_help_lists_every_command(data_dir: Path) -> None:
    done = run_millrace("--help", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    for command in (
        "standalone", "controller", "worker", "beat", "token", "segmentstore", "mint-token",
        "migrate", "version",
    ):  # fmt: skip
        assert command in done.stdout


@pytest.mark.parametrize("command", ["standalone", "migrate", "version"])
def test_subcommand_help(data_dir: Path, command: str) -> None:
    done = run_millrace(command, "--help", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: millrace {command}")


def test_version(data_dir: Path) -> None:
    done = run_millrace("version", data_dir=data_dir)
    assert done.returncode == 0
    assert done.stdout.startswith("millrace 0.1.0 ")


def test_bad_configuration_exits_2_with_one_line(data_dir: Path) -> None:
    done = run_millrace("standalone", data_dir=data_dir, MILLRACE_SEGMENTSTORE_PORT="abc")
    assert done.returncode == 2
    assert done.stderr == (
        "millrace: configuration error: MILLRACE_SEGMENTSTORE_PORT='abc': not an integer\n"
    )
    assert not (data_dir / "millrace.sqlite3").exists()  # nothing was started


def test_bad_database_url_exits_2_without_traceback(data_dir: Path) -> None:
    done = run_millrace("migrate", data_dir=data_dir, DATABASE_URL="nosuchdb://x/y")
    assert done.returncode == 2
    assert "DATABASE_URL='nosuchdb://x/y'" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1


def test_migrate_creates_the_sqlite_database(tmp_path: Path) -> None:
    target = tmp_path / "fresh"  # does not exist yet: --data-dir creates it
    done = run_millrace("migrate", "--data-dir", str(target), "-v", "0", data_dir=tmp_path / "x")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(target / "millrace.sqlite3") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert {"django_migrations", "auth_user"} <= tables
    again = run_millrace("migrate", "--data-dir", str(target), data_dir=tmp_path / "x")
    assert again.returncode == 0, again.stderr
    assert "No migrations to apply." in again.stdout


def test_unreachable_database_is_a_clear_failure(data_dir: Path, free_port: int) -> None:
    url = f"postgres://postgres@127.0.0.1:{free_port}/none"
    done = run_millrace("migrate", data_dir=data_dir, DATABASE_URL=url)
    assert done.returncode == 1
    assert done.stderr.startswith("millrace migrate: error: the metadata database failed:")
    assert "Traceback" not in done.stderr


# -- argument handling and delegation, in this process -------------------------------------


@pytest.fixture
def env_data_dir(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """MILLRACE_DATA_DIR set for this test only (the CLI's --data-dir changes it)."""
    monkeypatch.setenv("MILLRACE_DATA_DIR", str(data_dir))
    return data_dir


@pytest.fixture
def fake_node(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Replace ``segment_app.server.node`` with a stub whose ``serve`` records the settings."""
    calls: list[Any] = []
    module = types.ModuleType("segment_app.server.node")
    module.serve = lambda settings, *_: calls.append(settings) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "segment_app.server.node", module)
    return calls


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nosuch"],
        ["version", "extra"],
        ["migrate", "-v", "9"],
        ["standalone", "--http-port", "0"],
        ["standalone", "--segmentstore-port", "70000"],
        ["controller", "--http-port", "http"],
        ["token"],
        ["token", "create"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(argv)
    assert caught.value.code == 2
    assert "usage: millrace" in capsys.readouterr().err


def test_segmentstore_options_go_over_the_environment(
    env_data_dir: Path, fake_node: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MILLRACE_SEGMENTSTORE_HOST", "127.0.0.2")
    monkeypatch.setenv("MILLRACE_CONTAINERS", "3")
    assert cli.main(["segmentstore", "--port", "5", "--containers", "8"]) == 0
    [settings] = fake_node
    assert (settings.host, settings.port, settings.container_count) == ("127.0.0.2", 5, 8)


def test_data_dir_option_reaches_the_environment(
    env_data_dir: Path, fake_node: list, tmp_path: Path
) -> None:
    assert cli.main(["--data-dir", str(tmp_path / "elsewhere"), "segmentstore"]) == 0
    assert os.environ["MILLRACE_DATA_DIR"] == str(tmp_path / "elsewhere")
    assert fake_node[0].data_dir == tmp_path / "elsewhere"


def test_log_level_option_reaches_the_environment(
    env_data_dir: Path, fake_node: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MILLRACE_LOG_LEVEL", raising=False)
    assert cli.main(["segmentstore", "--log-level", "debug"]) == 0
    assert os.environ.pop("MILLRACE_LOG_LEVEL") == "DEBUG"


def test_configuration_error_inside_a_command_exits_2(
    env_data_dir: Path, fake_node: list, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    def failing(
        settings: Any,
        log: Any,
        membership: Any,
        tls: Any,
        policies: Any,
        quotas: Any,
        kafka: Any,
    ) -> None:
        raise ConfigError("MILLRACE_TIER1='x': unknown tier-1 backend")

    monkeypatch.setattr(sys.modules["segment_app.server.node"], "serve", failing)
    assert cli.main(["segmentstore"]) == 2
    err = capsys.readouterr().err
    assert err == "millrace: configuration error: MILLRACE_TIER1='x': unknown tier-1 backend\n"


def test_missing_component_is_a_clear_failure(
    env_data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "segment_app.server.node", None)  # import now fails
    assert cli.main(["segmentstore"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("millrace segmentstore: error: the segment store is not installed")
    assert "pip install 'millrace[server]'" in err


def test_exit_status_of_the_command_is_returned(
    env_data_dir: Path, fake_node: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        sys.modules["segment_app.server.node"],
        "serve",
        lambda settings, log, membership, tls, policies, quotas, kafka: 3,
    )
    assert cli.main(["segmentstore"]) == 3


def test_mint_token_signs_with_the_nodes_secret(
    env_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["mint-token", "sc/st/", "--access", "READ_UPDATE"]) == 0
    token = capsys.readouterr().out.strip()
    secret = SegmentStoreSettings.from_env().token_secret  # persisted in the data directory
    TokenVerifier(secret).check(token, "sc/st/0.#epoch.0", "READ_UPDATE")
    assert cli.main(["mint-token", "*", "--ttl", "-1", "--secret", "x" * 40]) == 2
    assert "ttl" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["segmentstore"], ["MILLRACE_SEGMENTSTORE_PORT", "MILLRACE_TIER1", "MILLRACE_LOG_LEVEL"]),
        (["controller"], ["DATABASE_URL", "REDIS_URL", "MILLRACE_LOG_FORMAT"]),
        (["standalone"], ["MILLRACE_CONTAINERS", "DATABASE_URL", "MILLRACE_DISK_FULL_PERCENT"]),
        (["mint-token"], ["MILLRACE_TOKEN_SECRET"]),
        (["stream", "append"], ["MILLRACE_URL", "MILLRACE_TOKEN"]),
        (["worker"], ["REDIS_URL"]),
    ],
)
def test_help_lists_the_environment_variables(
    argv: list[str], names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    out = capsys.readouterr().out
    assert "environment variables:" in out
    for name in names:
        assert f"  {name}" in out


def test_token_create_prints_a_working_token(data_dir: Path) -> None:
    first = run_millrace("token", "create", "carol", data_dir=data_dir)
    assert first.returncode == 0, first.stderr
    token = first.stdout.strip()
    assert len(token) == 40
    again = run_millrace("token", "create", "carol", data_dir=data_dir)
    assert again.stdout.strip() == token  # the same user keeps its token
    rotated = run_millrace("token", "create", "carol", "--rotate", data_dir=data_dir)
    assert rotated.stdout.strip() not in ("", token)
    database = sqlite3.connect(data_dir / "millrace.sqlite3")
    keys = database.execute(
        "SELECT key FROM authtoken_token JOIN auth_user ON auth_user.id = user_id"
        " WHERE username = 'carol'"
    ).fetchall()
    assert keys == [(rotated.stdout.strip(),)]


def test_user_create_makes_a_user_with_its_role_and_audits_it(data_dir: Path) -> None:
    done = run_millrace("user", "create", "vera", "--role", "viewer", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines[-1]) == 40  # the API token, alone on the last line
    assert "viewer" in lines[0] and "password" in lines[0]
    database = sqlite3.connect(data_dir / "millrace.sqlite3")
    groups = database.execute(
        "SELECT auth_group.name FROM auth_group"
        " JOIN auth_user_groups ON auth_group.id = group_id"
        " JOIN auth_user ON auth_user.id = user_id WHERE username = 'vera'"
    ).fetchall()
    assert groups == [("viewer",)]
    audit = database.execute(
        "SELECT action, object, source, result FROM controller_app_auditentry"
    ).fetchall()
    assert audit == [("user.create", "vera", "cli", "ok")]
    again = run_millrace("user", "create", "vera", "--role", "viewer", data_dir=data_dir)
    assert again.returncode == 2 and "exists already" in again.stderr
    bad = run_millrace("user", "create", "walt", "--role", "boss", data_dir=data_dir)
    assert bad.returncode == 2 and "invalid choice: 'boss'" in bad.stderr


def test_the_cli_waits_through_a_service_that_is_away(tmp_path: Path) -> None:
    """A controller whose database or broker is away answers 503 with ``Retry-After``: the
    CLI asks again (the Python client's patience), as a user would want, and then prints the
    answer. A loopback HTTP server plays the controller: two 503s, then the scopes."""
    import http.server
    import json
    import threading

    answers = [(503, {"code": "database-unavailable", "message": "away"})] * 2
    answers.append((200, {"scopes": [{"scopeName": "kept"}]}))
    agents: list[str] = []

    class Controller(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            agents.append(self.headers.get("User-Agent", ""))
            status, body = answers.pop(0)
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            if status == 503:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Controller)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "millrace.ops.cli", "scope", "list", "--token", "t",
             "--url", f"http://127.0.0.1:{server.server_port}"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert "kept" in done.stdout
    assert len(agents) == 3 and set(agents) == {"millrace-cli"}  # the audit log's source: CLI


def test_health_probes_answered_ok_are_not_logged_at_info() -> None:
    """The supervisor's liveness probe every second once filled the controller's output; with
    the access log on (MILLRACE_ACCESS_LOG), a probe that fails, and every other request, is
    still logged; with it off (the default), no request is at INFO."""
    import logging

    def record(path: str, status: int) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                                 '%s - "%s %s HTTP/%s" %d',
                                 ("127.0.0.1:1", "GET", path, "1.1", status), None)  # fmt: skip

    logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    assert not QuietProbes().filter(record("/v1/scopes", 200))  # the access log is off
    quiet = QuietProbes(access_log=True)
    assert not quiet.filter(record("/health/liveness", 200))
    assert not quiet.filter(record("/v1/health/readiness", 200))
    assert quiet.filter(record("/health", 503))  # a probe that fails: shown
    assert quiet.filter(record("/v1/scopes", 200))
    logging.getLogger("uvicorn.access").setLevel(logging.DEBUG)
    shown = record("/health/liveness", 200)
    assert quiet.filter(shown) and shown.levelname == "DEBUG"
    logging.getLogger("uvicorn.access").setLevel(logging.NOTSET)


def test_no_credential_reaches_a_log_line() -> None:
    """A WebSocket URL's token, a form's password, an Authorization header, and a traceback
    quoting one: all ``[redacted]``; the rest of the line stays."""
    import logging

    secret = "57a2892d0c1f4e7b9a3d"
    lines = {
        '%s - "WebSocket %s" [accepted]': ("127.0.0.1:5", f"/ws/s/t/?from=head&token={secret}"),
        "sign-in %s": (f"user=admin&password={secret}&next=/",),
        "sent %s": (f"Authorization: Token {secret}",),
        "bearer %s": (f"Bearer {secret}",),
    }  # fmt: skip
    for message, args in lines.items():
        record = logging.LogRecord("x", logging.INFO, __file__, 1, message, args, None)
        assert Redact().filter(record)
        assert secret not in record.getMessage() and "[redacted]" in record.getMessage()
    assert "from=head&token=[redacted]" in redact(f"?from=head&token={secret}")
    try:
        raise ValueError(f"bad url ?token={secret}")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    Redact().filter(record)
    assert secret not in logging.Formatter().format(record)


def test_the_local_cluster_plans_ports_that_never_collide() -> None:
    """With the defaults, controller-1's gRPC port once was controller-0's HTTP port (9090 + 1
    = 9091): every run failed with "Address already in use". Each role now counts up past the
    ports another role took."""
    from millrace.kernel.config import GRPC_PORT, HTTP_PORT
    from millrace.ops.local_cluster import plan_ports

    ports = plan_ports(HTTP_PORT, GRPC_PORT, 12345, nodes=3, controllers=2, metrics_port=9093,
                       kafka_port=9092)  # fmt: skip
    assert (ports.kafka, ports.http, ports.grpc, ports.wire, ports.metrics) == (
        [9092, 9093, 9094],
        [9091, 9095],
        [9090, 9096],
        [12345, 12346, 12347],
        [9097, 9098, 9099],
    )
    crowded = plan_ports(9000, 9000, 9001, nodes=2, controllers=3, metrics_port=9002,
                         kafka_port=9001)  # fmt: skip
    every = crowded.http + crowded.grpc + crowded.wire + crowded.metrics + crowded.kafka
    assert len(set(every)) == len(every) == 12
    assert plan_ports(9091, 0, 12345, nodes=1, controllers=2).grpc == [0, 0]  # no gRPC


def test_a_node_advertises_an_address_clients_can_use(tmp_path: Path) -> None:
    """Bound to every interface, a standalone tells clients the machine's name (not
    127.0.0.1, which another host cannot use); with TLS, a name the certificate holds, and on
    loopback ``localhost`` when the certificate names it (Pravega's Rust client verifies
    names, never IP addresses)."""
    import socket

    import trustme

    from millrace.kernel.config import TlsSettings
    from millrace.ops.standalone import advertised_host

    plain = TlsSettings.from_env({})
    assert advertised_host("0.0.0.0", plain) in (socket.getfqdn(), socket.gethostname())
    assert not advertised_host("0.0.0.0", plain).startswith(("localhost", "127."))
    assert advertised_host("127.0.0.1", plain) == "127.0.0.1"
    assert advertised_host("10.1.2.3", plain) == "10.1.2.3"

    def with_cert(*names: str) -> TlsSettings:
        leaf = trustme.CA().issue_cert(*names)
        cert, key = tmp_path / f"{names[0]}.pem", tmp_path / f"{names[0]}.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return TlsSettings.from_env({
            "MILLRACE_TLS_ENABLED": "1", "MILLRACE_TLS_CERT_FILE": str(cert),
            "MILLRACE_TLS_KEY_FILE": str(key),
        })  # fmt: skip

    assert advertised_host("127.0.0.1", with_cert("localhost", "127.0.0.1")) == "localhost"
    assert advertised_host("127.0.0.1", with_cert("127.0.0.1")) == "127.0.0.1"
    assert advertised_host("0.0.0.0", with_cert("node-a.example", "localhost")) == "node-a.example"


def test_the_spark_jobs_declare_their_arguments_once(data_dir: Path) -> None:
    """``millrace ingest``/``export`` take the jobs' own declarations, and hand a job back
    exactly what was given (``job_argv``): the job parses it to the same values."""
    from spark_bridge.jobs import export, ingest
    from spark_bridge.jobs.common import job_argv

    connection = ["--controller", "http://127.0.0.1:9091", "--token", "t"]
    for job, given in (
        (ingest, ["a.json", "b.json", "--stream", "s/t", "--format", "json", "--create",
                  "--segments", "3", "--key-column", "k"]),
        (export, ["s/t", "--to", "out", "--from", "0:5", "--overwrite"]),
    ):  # fmt: skip
        args = job.parser().parse_args([*given, *connection])
        again = job.parser().parse_args([*job_argv(job.add_arguments, args), *connection])
        assert vars(again) == vars(args)
    done = run_millrace("export", "s/t", "--to", "out", "--spark-submit", "--token", "t",
                        data_dir=data_dir)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "export.py s/t --to out --controller" in done.stdout


def test_acl_grants_lists_checks_and_revokes(data_dir: Path, tmp_path: Path) -> None:
    assert run_millrace("user", "create", "tess", "--role", "viewer",
                        data_dir=data_dir).returncode == 0  # fmt: skip
    done = run_millrace("acl", "grant", "group:team-a", "READ_UPDATE", "prn::/scope:team-a*",
                        data_dir=data_dir)  # fmt: skip
    assert done.returncode == 0 and "allow group:team-a READ_UPDATE" in done.stdout, done.stderr
    assert run_millrace("acl", "join", "team-a", "tess", data_dir=data_dir).returncode == 0
    listed = json.loads(run_millrace("acl", "list", "--principal", "user:tess", "--json",
                                     data_dir=data_dir).stdout)  # fmt: skip
    assert [(g["principal"], g["resource"]) for g in listed] == [
        ("group:team-a", "prn::/scope:team-a*")
    ]
    yes = run_millrace("acl", "check", "tess", "READ_UPDATE", "prn::/scope:team-a1/stream:s",
                       data_dir=data_dir)  # fmt: skip
    assert yes.returncode == 0 and yes.stdout.startswith("allowed: grant #"), yes.stdout
    no = run_millrace("acl", "check", "tess", "READ", "prn::/scope:team-b/stream:s",
                      data_dir=data_dir)  # fmt: skip
    assert no.returncode == 1 and no.stdout.startswith("refused: no grant covers it")
    bad = run_millrace("acl", "grant", "user:tess", "READ", "prn::/bucket:x", data_dir=data_dir)
    assert bad.returncode == 2 and "is not a resource string" in bad.stderr
    revoked = run_millrace("acl", "revoke", "group:team-a", "prn::/scope:team-a*",
                           data_dir=data_dir)  # fmt: skip
    assert revoked.stdout.strip() == "1 removed"
    audit = (
        sqlite3.connect(data_dir / "millrace.sqlite3")
        .execute(
            "SELECT action FROM controller_app_auditentry WHERE action LIKE 'acl.%' ORDER BY id"
        )
        .fetchall()
    )
    assert audit == [("acl.grant",), ("acl.join",), ("acl.revoke",)]
