"""The suite's own clock (a pytest plugin, loaded by tests/conftest.py).

Each test's time is its setup, call and teardown together, as pytest reports them (a module's
shared fixture is paid in the setup of its first test). At the end of a run it prints the time
per folder of tests/ (summed over tests: with two workers the wall clock is about half) and
fails the run when one test took more than ``MILLRACE_TEST_MAX_SECONDS`` (180 by default; 0
turns the check off), so that a slow test is noticed when it is written. Under pytest-xdist the
reports reach the controlling process, which is where this runs."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

MAX_SECONDS_DEFAULT = 180.0


def _limit() -> float:
    raw = os.environ.get("MILLRACE_TEST_MAX_SECONDS", "")
    if not raw:
        return MAX_SECONDS_DEFAULT
    try:
        return float(raw)
    except ValueError:
        raise pytest.UsageError(
            f"MILLRACE_TEST_MAX_SECONDS={raw!r} is not a number of seconds"
        ) from None


class SuiteClock:
    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.per_test: dict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.per_test[report.nodeid] += report.duration

    def folder_of(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        parts = path.split("/")
        return "/".join(parts[:2]) if len(parts) > 2 else parts[0]

    def too_slow(self) -> list[tuple[str, float]]:
        if self.limit <= 0:
            return []
        slow = [(node, t) for node, t in self.per_test.items() if t > self.limit]
        return sorted(slow, key=lambda item: -item[1])

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:  # type: ignore[no-untyped-def]
        if not self.per_test:
            return
        folders: dict[str, list[float]] = defaultdict(list)
        for node, seconds in self.per_test.items():
            folders[self.folder_of(node)].append(seconds)
        terminalreporter.section("time per folder (setup + call + teardown, summed)")
        total = 0.0
        for folder, times in sorted(folders.items(), key=lambda item: -sum(item[1])):
            total += sum(times)
            terminalreporter.write_line(f"{sum(times):9.1f} s  {len(times):5d} tests  {folder}")
        terminalreporter.write_line(f"{total:9.1f} s  {len(self.per_test):5d} tests  in all")
        slow = self.too_slow()
        if slow:
            terminalreporter.section(f"tests over {self.limit:.0f} s", red=True)
            for node, seconds in slow:
                terminalreporter.write_line(f"{seconds:9.1f} s  {node}", red=True)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.too_slow() and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def install(config: pytest.Config) -> None:
    # Only in the controlling process (or a run without workers): a worker's reports are
    # forwarded to it.
    if hasattr(config, "workerinput"):
        return
    config.pluginmanager.register(SuiteClock(_limit()), "millrace-suite-clock")
