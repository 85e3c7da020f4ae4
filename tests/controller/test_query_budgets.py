"""Every selector runs the same queries on a 100,000-epoch stream as on a 2-epoch one.

Both streams churn the same way (the upper half splits, then merges back, at every epoch; the
lower half never scales, so one segment of epoch 0 stays in every cut), record a retention cut
every 1% of their history and are truncated just before their tail. Each selector gets a query
budget; its query count must be the same on both streams and within budget. On SQLite the plan
of every query is checked too: index searches only, no table scan and no sort of a range
(that is what "bounded rows" means to the database).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controller_app import selectors as sel
from controller_app.models import Scope, Stream
from tests.controller import factories as f
from tests.controller.history import START_TIME, STEP_MS, History, churn

#: The module's tests on one worker: its 100,000-epoch stream is built once, not per worker.
pytestmark = pytest.mark.xdist_group("query-budgets")

LONG = 100_000
SHORT = 2
CONTAINERS = 4
HISTORY_TABLES = ("controller_app_epoch", "controller_app_segmentrecord")


@dataclass
class Built:
    stream: Stream
    history: History

    @property
    def n(self) -> int:
        return len(self.history.epochs)

    def sealed_at(self, epoch: int) -> int:
        """A segment sealed when ``epoch`` began."""
        return next(sid for sid, r in self.history.records.items() if r.sealing_epoch == epoch)

    def tail_cut(self) -> dict[int, int]:
        return self.history.cut(20)

    def mid_time(self) -> int:
        return START_TIME + (self.n // 2) * STEP_MS + STEP_MS // 2

    def truncation_cut(self) -> dict[int, int]:
        return {int(k): v for k, v in self.history.truncations[-1].stream_cut.items()}

    def last_record_cut(self) -> dict[int, int]:
        return {int(k): v for k, v in self.history.stream_cuts[-1].stream_cut.items()}


def _build(scope: Scope, epochs: int) -> Built:
    stream = f.StreamFactory(scope=scope, name=f"churn-{epochs}")
    history = churn(History(stream), epochs, every=max(1, epochs // 100), truncate_at=epochs - 2)
    history.save()
    return Built(sel.get_stream(scope.name, stream.name), history)


@pytest.fixture(scope="module")
def streams(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Built]]:
    with django_db_blocker.unblock():
        scope = f.ScopeFactory(name="budgets")
        built = {"short": _build(scope, SHORT), "long": _build(scope, LONG)}
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
    yield built
    with django_db_blocker.unblock():
        for b in built.values():
            b.stream.delete()
        scope.delete()


Case = Callable[[Built], Any]

CASES: dict[str, tuple[int, Case]] = {
    "get_stream": (1, lambda b: sel.get_stream("budgets", b.stream.name)),
    "current_segments": (1, lambda b: sel.current_segments(b.stream)),
    "head_segments": (1, lambda b: sel.head_segments(b.stream)),
    "epoch_at_time": (1, lambda b: sel.epoch_at_time(b.stream, b.mid_time())),
    "segments_at_time(mid)": (2, lambda b: sel.segments_at_time(b.stream, b.mid_time())),
    "segments_at_time(0)": (2, lambda b: sel.segments_at_time(b.stream, 0)),
    "successors(recent)": (2, lambda b: sel.successors(b.stream, b.sealed_at(b.n - 1))),
    "successors(oldest)": (2, lambda b: sel.successors(b.stream, b.sealed_at(1))),
    "successors(open)": (1, lambda b: sel.successors(b.stream, b.history.current[0].id)),
    "predecessors": (1, lambda b: sel.predecessors(b.stream, b.history.current[-1].id)),
    "validate_stream_cut": (1, lambda b: sel.validate_stream_cut(b.stream, b.tail_cut())),
    "compare_stream_cuts": (
        1,
        lambda b: sel.compare_stream_cuts(b.stream, b.truncation_cut(), b.tail_cut()),
    ),
    "segments_between(head, tail)": (5, lambda b: sel.segments_between(b.stream)),
    "segments_between(record, tail cut)": (
        3,
        lambda b: sel.segments_between(b.stream, b.last_record_cut(), b.tail_cut()),
    ),
    "size_till_stream_cut": (5, lambda b: sel.size_till_stream_cut(b.stream, b.tail_cut())),
    "scaling_events": (
        1,
        lambda b: sel.scaling_events(b.stream, b.mid_time(), b.mid_time() + 5 * STEP_MS),
    ),
    "segment_uri": (
        2,
        lambda b: sel.segment_uri(b.stream, b.history.current[-1].id),
    ),
    "latest_truncation": (1, lambda b: sel.latest_truncation(b.stream)),
}


def _run(case: Case, built: Built) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as ctx:
        result = case(built)
    return result, [q["sql"] for q in ctx.captured_queries]


def _register_containers() -> None:
    node = f.NodeFactory()
    for number in range(CONTAINERS):
        f.ContainerAssignmentFactory(container__number=number, node=node)


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(CASES))
def test_query_budget_is_the_same_for_100k_epochs(name: str, streams: dict[str, Built]) -> None:
    _register_containers()
    budget, case = CASES[name]
    _, short = _run(case, streams["short"])
    _, long = _run(case, streams["long"])
    assert len(long) == len(short) <= budget, "\n".join(long)


def _plan(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            return [row[-1] for row in cursor.fetchall()]
        cursor.execute(f"EXPLAIN {sql}")
        return [row[0] for row in cursor.fetchall()]


def _unbounded(line: str) -> bool:
    """A plan step that may read rows in proportion to a table (or sort them)."""
    if connection.vendor == "sqlite":
        # The host store's container table is as long as the cluster's container count.
        scan = line.startswith("SCAN controller_app_") and "controller_app_container " not in line
        # A history table searched by stream alone reads the stream's whole history.
        whole_stream = any(f"SEARCH {t} " in line for t in HISTORY_TABLES) and line.endswith(
            "(stream_id=?)"
        )
        return scan or whole_stream or "TEMP B-TREE" in line
    return "Seq Scan" in line and any(table in line for table in HISTORY_TABLES)


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(CASES))
def test_every_query_uses_an_index(name: str, streams: dict[str, Built]) -> None:
    _register_containers()
    _, queries = _run(CASES[name][1], streams["long"])
    for sql in queries:
        plan = _plan(sql)
        assert not any(_unbounded(line) for line in plan), f"{sql}\n" + "\n".join(plan)


@pytest.mark.django_db
def test_answers_on_the_long_stream(streams: dict[str, Built]) -> None:
    """The bounded queries still give the right answers at epoch 100,000."""
    b = streams["long"]
    h = b.history
    tail = b.tail_cut()
    assert sel.size_till_stream_cut(b.stream, tail) == h.size_at_current(tail)
    assert [s.id for s in sel.current_segments(b.stream)] == [s.id for s in h.current]
    assert sel.epoch_at_time(b.stream, b.mid_time()).epoch == b.n // 2
    recent = b.sealed_at(b.n - 1)
    successors = sel.successors(b.stream, recent)
    assert {s.id for s in successors} == {s.id for s in h.current[1:]}
    between = sel.segments_between(b.stream, b.last_record_cut(), tail)
    recorded = h.stream_cuts[-1].span_high_epoch
    expected = {s.id for s in h.epochs[recorded].segment_list()}
    expected |= {sid for sid, r in h.records.items() if r.segment.creation_epoch > recorded}
    assert [s.id for s in between] == sorted(expected)
    assert len(between) == 1501  # the open segment, 1 alive at the record, 999 epochs' new ones
    events = sel.scaling_events(b.stream, b.mid_time(), b.mid_time() + 5 * STEP_MS)
    assert [e.epoch for e in events] == list(range(b.n // 2, b.n // 2 + 6))
    assert all(e.splits + e.merges == 1 for e in events)
