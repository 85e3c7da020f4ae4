"""Controller models: every factory makes a valid row, constraints hold, migrations are current."""

from __future__ import annotations

import io

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import IntegrityError, transaction

from controller_app.choices import EpochTransitionState
from controller_app.models import Transaction
from millrace.kernel.naming import segment_id
from tests.controller import factories as f

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("factory", f.ALL_FACTORIES, ids=lambda c: c.__name__)
def test_factory_makes_a_valid_row(factory: type) -> None:
    obj = factory()
    obj.full_clean()
    assert type(obj).objects.filter(pk=obj.pk).exists()


def test_every_model_has_a_factory() -> None:
    made = {factory._meta.model for factory in f.ALL_FACTORIES}
    assert set(apps.get_app_config("controller_app").get_models()) == made


def test_migrations_are_current() -> None:
    out = io.StringIO()
    call_command("makemigrations", "controller_app", "--check", "--dry-run", stdout=out)


def _violates(factory: type, **fields: object) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        factory(**fields)


@pytest.mark.parametrize(
    ("factory", "fields"),
    [
        (f.SegmentRecordFactory, {"key_start": 0.5, "key_end": 0.5}),
        (f.SegmentRecordFactory, {"key_end": 1.5}),
        (f.SegmentRecordFactory, {"creation_epoch": 3, "sealing_epoch": 3}),
        (f.SegmentRecordFactory, {"sealing_epoch": 1, "sealed_size": -1}),
        (f.EpochFactory, {"epoch": 2, "reference_epoch": 3}),
        (f.TransactionFactory, {"low_bits": -1}),
        (f.StreamFactory, {"min_segments": 0}),
        (f.StreamFactory, {"retention_value": -1}),
        (f.WatermarkFactory, {"low_time": 10, "high_time": 9}),
        (f.EpochTransitionFactory, {"active_epoch": 2, "new_epoch": 2}),
        (f.NodeFactory, {"port": 70000}),
        (f.KeyValueTableFactory, {"partitions": 0}),
        (f.KeyValueTableFactory, {"primary_key_length": 0}),
        (f.KeyValueTableFactory, {"secondary_key_length": -1}),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "-".join(map(str, v)),
)
def test_check_constraints(factory: type, fields: dict[str, object]) -> None:
    _violates(factory, **fields)


def test_unique_records() -> None:
    stream = f.StreamFactory()
    f.EpochFactory(stream=stream, epoch=0)
    _violates(f.EpochFactory, stream=stream, epoch=0)
    f.SegmentRecordFactory(stream=stream, creation_epoch=1, number=4)
    _violates(f.SegmentRecordFactory, stream=stream, creation_epoch=1, number=4)
    f.SegmentRecordFactory(stream=stream, creation_epoch=2, number=4)  # a rolled duplicate
    _violates(f.StreamFactory, scope=stream.scope, name=stream.name)
    table = f.KeyValueTableFactory()
    _violates(f.KeyValueTableFactory, scope=table.scope, name=table.name)


def test_one_pending_epoch_transition_per_stream() -> None:
    stream = f.StreamFactory()
    f.EpochTransitionFactory(stream=stream, state=EpochTransitionState.COMPLETED)
    f.EpochTransitionFactory(stream=stream, state=EpochTransitionState.REQUESTED)
    _violates(f.EpochTransitionFactory, stream=stream, state=EpochTransitionState.STARTED)
    f.EpochTransitionFactory(stream=stream, state=EpochTransitionState.REJECTED)


def test_commit_order_unique_per_stream() -> None:
    stream = f.StreamFactory()
    f.TransactionFactory(stream=stream, commit_order=1)
    f.TransactionFactory(stream=stream, commit_order=None)
    f.TransactionFactory(stream=stream, commit_order=None)
    _violates(f.TransactionFactory, stream=stream, commit_order=1)


def test_segment_record_id_and_transaction_id() -> None:
    record = f.SegmentRecordFactory(creation_epoch=3, number=7)
    assert record.segment_id == segment_id(3, 7) == (3 << 32) | 7
    txn: Transaction = f.TransactionFactory(epoch=2, high_bits=(2 << 32) | 5, low_bits=9)
    assert txn.txn_id == (((2 << 32) | 5) << 64) | 9
    assert txn.hex == "0000000200000005" + "0000000000000009"


def test_json_round_trip_keeps_floats_exact() -> None:
    third = 1 / 3
    epoch = f.EpochFactory(segment_count=3)
    epoch.refresh_from_db()
    starts = [s.key_start for s in epoch.segment_list()]
    assert starts == [0.0, third, 2 * third]
    assert epoch.segment_list()[-1].key_end == 1.0


@pytest.mark.django_db(transaction=True)
def test_tables_made_before_placements_keep_theirs_and_new_ones_place_as_pravega() -> None:
    """Migration 0013: a table that existed gets ``millrace-1`` (its keys stay where they were
    written); a table made after it gets ``pravega``."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    app = "controller_app"
    executor = MigrationExecutor(connection)
    executor.migrate([(app, "0012_audit_result_unchanged")])
    old = executor.loader.project_state([(app, "0012_audit_result_unchanged")]).apps
    scope = old.get_model(app, "Scope").objects.create(name="before")
    old.get_model(app, "KeyValueTable").objects.create(
        scope=scope, name="t", state="ACTIVE", partitions=4, primary_key_length=8
    )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes(app))
    from controller_app.models import KeyValueTable

    before = KeyValueTable.objects.get(name="t")
    assert before.placement == "millrace-1" and before.config.placement == "millrace-1"
    after = KeyValueTable.objects.create(scope_id=before.scope_id, name="u", partitions=2,
                                         primary_key_length=8)  # fmt: skip
    assert after.config.placement == "pravega"
