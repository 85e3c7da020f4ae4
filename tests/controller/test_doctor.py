"""``millrace doctor``'s checks of this host (``controller_app.operations.doctor``), against the
test
database: a healthy set is all OK, and each fault is named in its line: a process whose
clock runs ahead, a reader group that stopped, a certificate about to end (a real one, made by
trustme), an old token secret."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

import pytest
import trustme
from django.conf import settings
from django.utils import timezone

from controller_app.models import ProcessHeartbeat, ReaderGroupLag
from controller_app.operations import doctor
from tests.controller.factories import ReaderGroupFactory

pytestmark = pytest.mark.django_db


def _by(findings: list[doctor.Finding], check: str) -> list[doctor.Finding]:
    return [f for f in findings if f.check == check]


def test_this_hosts_checks_are_ok_on_a_healthy_host() -> None:
    findings = list(doctor.checks_here())
    assert {f.check for f in findings} >= {"database", "clock", "broker", "certificate"}
    assert [f for f in findings if f.status != doctor.OK and f.check != "token secret"] == []
    [clock] = _by(findings, "clock")
    assert "the database's" in clock.message


def test_a_moved_clock_and_a_process_ahead_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILLRACE_TEST_CLOCK_OFFSET_S", "120")
    [mine] = doctor.clocks()
    assert mine.status == doctor.FAIL and "120.0 s ahead of the database's" in mine.message
    monkeypatch.delenv("MILLRACE_TEST_CLOCK_OFFSET_S")
    now = timezone.now()
    ProcessHeartbeat.objects.create(role="worker", process="h:1", beat_at=now, started_at=now)
    for process, seconds in (("h:2", 2), ("h:3", 30)):  # (the session timeout: 5 s)
        ahead = now + dt.timedelta(seconds=seconds)
        ProcessHeartbeat.objects.create(role="beat", process=process, beat_at=ahead, started_at=now)
    found = doctor.clocks()
    assert [f.status for f in found] == [doctor.OK, doctor.WARN, doctor.FAIL], found
    assert "beat h:2 renewed 2." in found[1].message and "ahead of" in found[1].message
    assert "beat h:3 renewed 30." in found[2].message


def test_reader_groups_not_ok_are_listed() -> None:
    assert doctor.reader_groups()[0].status == doctor.OK
    group = ReaderGroupFactory(name="g")
    ReaderGroupLag.objects.create(group=group, status="STOP", report={"reason": "no reader"})
    [found] = doctor.reader_groups()
    assert found.status == doctor.WARN
    assert found.message == f"{group.scope.name}/g is STOP: no reader"


def test_a_certificate_near_its_end_and_an_old_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)
    cert, key = tmp_path / "node.pem", tmp_path / "node.key"
    issued = ca.issue_cert("127.0.0.1", not_after=soon)
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    tls = dataclasses.replace(
        settings.MILLRACE_TLS, enabled=True, cert_file=str(cert), key_file=str(key)
    )
    monkeypatch.setattr(settings, "MILLRACE_TLS", tls)
    [found] = doctor.certificate()
    assert found.status == doctor.WARN and "ends in 3 days" in found.message
    keyring = tmp_path / "keyring.json"
    keyring.write_text("{}")
    old = (dt.datetime.now() - dt.timedelta(days=400)).timestamp()
    os.utime(keyring, (old, old))
    node = dataclasses.replace(settings.MILLRACE, auth_enabled=True, token_keyring=keyring)
    monkeypatch.setattr(settings, "MILLRACE", node)
    [secret] = doctor.token_secret()
    assert secret.status == doctor.WARN and "400 days ago" in secret.message
