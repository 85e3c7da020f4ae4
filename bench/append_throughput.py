"""Durable append throughput and ack latency: Millrace over the wire protocol vs Redis Streams.

Usage::

    .venv/bin/python bench/append_throughput.py                # the full run (about 4 minutes)
    .venv/bin/python bench/append_throughput.py --quick        # a few seconds (CI smoke)
    .venv/bin/python bench/append_throughput.py --json         # JSON on stdout, table on stderr

One invocation runs, side by side on this machine, each measurement ``--repeat`` times
(interleaved, so background load hits both systems alike) and prints the medians:

* Millrace: a segment store node (``millrace segmentstore``: file tier-1 with fdatasync before
  every ack, filesystem tier-2 with the default flush policy, auth off) on a temporary data
  directory, driven by one producer process through the async client (client-side batching into
  AppendBlockEnd blocks, pipelined);
* Redis Streams: ``redis-server --appendonly yes --appendfsync always --save ""`` on a spare
  loopback port, driven by one producer process with redis-py pipelines of 1000 XADD;

for 100-byte and 10 KiB events (events/s, MB/s = 10^6 payload bytes/s, ack latency p50/p99 and
the Millrace/Redis ratios); then the Millrace ack latency at a paced 100,000 events/s of 100 B,
and Millrace throughput with events spread round-robin over 5,000 open segments vs 10.
Every server and producer is a process of its own; all are stopped and the temporary
directories removed however the run ends. ``--profile py-spy|cprofile`` records the node.
See ``docs/BENCHMARKS.md`` for figures and analysis.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
import services  # a sibling module: bench/ is not a package

from tests.tiers.nats_servers import nats_servers
from tests.tiers.s3_server import CREDENTIALS, make_bucket, moto_server
from tests.tiers.webhdfs_server import webhdfs_server

PRODUCER = Path(__file__).resolve().parent / "append_producer.py"
KIB = 1024
#: A producer that has not finished this long after its run was due is killed.
PRODUCER_SLACK_S = 120.0


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    target: str  # "millrace" or "redis"
    event_bytes: int
    segments: int = 1
    rate: int | None = None  # events/s; None = as fast as the system takes them
    #: Events handed to the client per step (Millrace) or per pipeline (Redis).
    step_events: int = 1000
    #: Consecutive events handed to one segment before the next (round-robin granularity).
    burst: int = 1
    #: Client AppendLimits.block_events_max (None: the default).
    block_events_max: int | None = None
    #: How the producer hands a step to the client: ``many`` (one append_many call),
    #: ``pairs`` (one append_many call of one ``(writer, event)`` pair per event, whatever the
    #: number of writers: the headline's shape with 5,000 segments) or ``block`` (one
    #: append_block call per writer per step).
    api: str = "many"
    #: More environment of the node (``--traffic-monitor``: the monitor switched off).
    node_env: tuple[tuple[str, str], ...] = ()

    def spec(self, host: str, port: int, args: argparse.Namespace) -> dict[str, Any]:
        spec = dataclasses.asdict(self)
        del spec["node_env"]
        spec.update(host=host, port=port, duration=args.duration, warmup=args.warmup)
        spec.update(client_limits=dict(_assignment(item) for item in args.client_limits))
        if self.target == "redis":
            spec.update(pipeline=self.step_events)
        return spec


def _assignment(item: str) -> tuple[str, int]:
    """``FIELD=INT`` of ``--client-limits``."""
    from millrace.client.transport.segment_store import AppendLimits

    field, sep, value = item.partition("=")
    field = field.strip()
    known = [f.name for f in dataclasses.fields(AppendLimits)]
    if field not in known:
        raise SystemExit(f"--client-limits: no field {field!r}; the fields: {', '.join(known)}")
    if not sep or not value.strip().lstrip("-").isdigit():
        raise SystemExit(f"--client-limits: {item!r} is not FIELD=INTEGER")
    return field, int(value)


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    many = args.many_segments
    all_ = [
        Scenario("millrace-100B", "millrace", 100),
        Scenario("redis-100B", "redis", 100),
        Scenario("millrace-10KiB", "millrace", 10 * KIB, step_events=25),
        Scenario("redis-10KiB", "redis", 10 * KIB),
        Scenario("millrace-paced-100k", "millrace", 100, rate=args.paced_rate, step_events=5000),
        Scenario("millrace-10-segments", "millrace", 100, segments=10),
        Scenario(f"millrace-{many}-segments", "millrace", 100, segments=many),
    ]
    if args.traffic_monitor:  # the same with the node's traffic monitor off, interleaved
        off = (("MILLRACE_TRAFFIC_MONITOR", "off"),)
        all_ += [
            Scenario("millrace-100B-monitor-off", "millrace", 100, node_env=off),
            Scenario(f"millrace-{many}-segments-monitor-off", "millrace", 100, segments=many,
                     node_env=off),
        ]  # fmt: skip
    if args.diagnostics:
        all_ += [
            Scenario("diag-1-event-blocks", "millrace", 100, block_events_max=1),
            Scenario(f"diag-{many}-segments-burst-100", "millrace", 100, segments=many,
                     step_events=20_000, burst=100),
            Scenario(f"diag-{many}-segments-10KiB", "millrace", 10 * KIB, segments=many,
                     step_events=25),
            # the round-robin of the headline case, but one append_block call per event (each
            # writer gets one event of a step): the cost of a call, a future and an ack per event
            Scenario(f"diag-{many}-segments-call-per-event", "millrace", 100, segments=many,
                     api="block"),
            # the same round-robin over the segments, handed in steps of 4 events per segment:
            # each segment's share of a step is one append_block call (as the event writer's
            # shipping task hands a segment's queued events), not one call per event
            Scenario(f"diag-{many}-segments-calls-of-4", "millrace", 100, segments=many,
                     step_events=4 * many, api="block"),
            # 10 segments handed as the headline hands 5,000: one (writer, event) pair per
            # event. Against the headline, it tells the cost of the hand-off shape (the same
            # here) from the cost of open segments and of small blocks
            Scenario("diag-10-segments-pair-per-event", "millrace", 100, segments=10,
                     api="pairs"),
        ]  # fmt: skip
    if args.tiers:  # the production tiers beside the local ones (servers from run_all)
        urls = args.tier_urls
        s3 = {"bucket": "bench", "prefix": "{run}/", "endpoint_url": urls["s3"]}
        on_s3 = (("MILLRACE_TIER2", "s3"), ("MILLRACE_TIER2_OPTIONS", json.dumps(s3)),
                 *CREDENTIALS.items())  # fmt: skip
        hdfs = {"url": urls["hdfs"], "root": "/bench/{run}"}
        on_hdfs = (("MILLRACE_TIER2", "hdfs"), ("MILLRACE_TIER2_OPTIONS", json.dumps(hdfs)))

        def jetstream(servers: list[str], replicas: int) -> tuple[tuple[str, str], ...]:
            options = {"servers": servers, "replicas": replicas, "stream_prefix": "{run}"}
            return (
                ("MILLRACE_TIER1", "jetstream"),
                ("MILLRACE_TIER1_OPTIONS", json.dumps(options)),
            )

        all_ = [
            Scenario("millrace-10KiB", "millrace", 10 * KIB, step_events=25),
            Scenario("millrace-10KiB-s3", "millrace", 10 * KIB, step_events=25, node_env=on_s3),
            Scenario("millrace-10KiB-hdfs", "millrace", 10 * KIB, step_events=25,
                     node_env=on_hdfs),
            Scenario("millrace-100B", "millrace", 100),
            Scenario("millrace-100B-jetstream", "millrace", 100,
                     node_env=jetstream(urls["nats"], 1)),
            Scenario("millrace-100B-jetstream-r3", "millrace", 100,
                     node_env=jetstream(urls["nats-cluster"], 3)),
            Scenario("redis-100B", "redis", 100),
        ]  # fmt: skip
    if args.only:
        all_ = [s for s in all_ if any(word in s.name for word in args.only)]
    if args.no_redis:
        all_ = [s for s in all_ if s.target != "redis"]
    return all_


# --------------------------------------------------------------------------------------------
# running one measurement


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (its threads included), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _disk_bytes_written(path: Path) -> int | None:
    """Bytes written so far to the block device holding ``path`` (all writers), from /sys."""
    try:
        dev = path.stat().st_dev
        stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat").read_text()
        return int(stat.split()[6]) * 512
    except (OSError, IndexError, ValueError):
        return None


class _Meter:
    """CPU cores used by some processes, and disk MB/s written, between ``open`` and ``close``."""

    def __init__(self, pids: dict[str, int], disk_path: Path) -> None:
        self.pids = pids
        self.disk_path = disk_path
        self.start: dict[str, float | None] = {}
        self.disk_start: int | None = None
        self.t0 = 0.0
        self.figures: dict[str, float] = {}

    def open(self) -> None:
        self.t0 = time.perf_counter()
        self.start = {k: _cpu_seconds(p) for k, p in self.pids.items()}
        self.disk_start = _disk_bytes_written(self.disk_path)

    def close(self) -> None:
        wall = time.perf_counter() - self.t0
        if wall <= 0:
            return
        for key, pid in self.pids.items():
            before, after = self.start.get(key), _cpu_seconds(pid)
            if before is not None and after is not None:
                self.figures[key] = round((after - before) / wall, 2)
        disk_end = _disk_bytes_written(self.disk_path)
        if self.disk_start is not None and disk_end is not None:
            self.figures["disk_write_mb_per_s"] = round(
                (disk_end - self.disk_start) / wall / 1e6, 1
            )


def run_one(
    scenario: Scenario, args: argparse.Namespace, work: Path, on_progress: Any
) -> dict[str, Any]:
    work.mkdir(parents=True)
    if scenario.target == "redis":
        server = services.redis_server(work)
    else:
        out = None
        if args.profile:
            ext = {"py-spy": "txt", "cprofile": "prof", "loop-stalls": "json"}[args.profile]
            out = Path(args.profile_dir).resolve() / f"{scenario.name}-{work.name}.{ext}"
            out.parent.mkdir(parents=True, exist_ok=True)
        env = dict(item.split("=", 1) for item in args.node_env)
        env.update(scenario.node_env)
        env = {k: v.replace("{run}", f"b{work.name}") for k, v in env.items()}  # (per run)
        server = services.millrace_node(work, profile=args.profile, profile_out=out, env=env)
    with server as (host, port, server_pid):
        spec = scenario.spec(host, port, args)
        wrap: list[str] = []
        if args.profile_producer:
            out = Path(args.profile_dir).resolve() / f"{scenario.name}-{work.name}-producer.txt"
            out.parent.mkdir(parents=True, exist_ok=True)
            wrap = [*services.py_spy_command(out), "--"]
        result = _run_producer(spec, server_pid, on_progress, wrap, work)
    result["scenario"] = scenario.name
    return result


def _run_producer(
    spec: dict[str, Any], server_pid: int, on_progress: Any, wrap: list[str], work: Path
) -> dict[str, Any]:
    cmd = [*wrap, sys.executable, str(PRODUCER), json.dumps(spec)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    meter = _Meter({"server_cores": server_pid, "producer_cores": proc.pid}, work)
    deadline = time.monotonic() + spec["warmup"] + spec["duration"] + PRODUCER_SLACK_S
    result: dict[str, Any] | None = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            kind, _, value = line.strip().partition(" ")
            if kind == "progress":
                on_progress(int(value))
            elif kind == "window" and json.loads(value) == "open":
                if wrap:  # the producer runs under py-spy: measure the Python child
                    meter.pids["producer_cores"] = services.child_pid(proc.pid) or proc.pid
                meter.open()
            elif kind == "window":
                meter.close()
            elif kind == "result":
                result = json.loads(value)
            if time.monotonic() > deadline:
                break
        proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if result is None or proc.returncode != 0:
        raise RuntimeError(f"producer for {spec['name']} failed (exit {proc.returncode})")
    return {**result, **meter.figures}


# --------------------------------------------------------------------------------------------
# the whole run


@contextlib.contextmanager
def _progress(total: int, quiet: bool) -> Iterator[Any]:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency; plain lines otherwise
        tqdm = None
    if tqdm is None or quiet:
        yield None
        return
    with tqdm(total=total, unit="run", file=sys.stderr, mininterval=0.5, leave=True) as bar:
        yield bar


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as servers:
        if args.tiers:  # moto's S3 server, one nats-server and a cluster of three
            root = Path(tempfile.mkdtemp(prefix="millrace-bench-tiers-", dir=args.tmp_dir))
            servers.callback(shutil.rmtree, root, ignore_errors=True)
            s3 = servers.enter_context(moto_server())
            make_bucket(s3, "bench")
            (one,) = servers.enter_context(nats_servers(root / "one"))
            three = servers.enter_context(nats_servers(root / "three", 3))
            hdfs = servers.enter_context(webhdfs_server(root / "webhdfs"))
            args.tier_urls = {"s3": s3, "nats": [one.url], "nats-cluster": [n.url for n in three],
                              "hdfs": hdfs.url}  # fmt: skip
        return _run_plan(args)


def _run_plan(args: argparse.Namespace) -> dict[str, Any]:
    plan = [(rep, s) for rep in range(args.repeat) for s in scenarios(args)]
    runs: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="millrace-bench-", dir=args.tmp_dir))
    try:
        with _progress(len(plan), args.no_progress) as bar:
            for i, (rep, scenario) in enumerate(plan):
                label = f"{scenario.name} #{rep + 1}"
                started = time.perf_counter()

                def on_progress(acked: int, label: str = label, started: float = started) -> None:
                    if bar is not None:
                        rate = acked / max(1e-9, time.perf_counter() - started)
                        bar.set_postfix_str(f"{label}: {rate:,.0f} ev/s", refresh=False)

                if bar is not None:
                    bar.set_description(label)
                else:
                    print(f"[{i + 1}/{len(plan)}] {label}", file=sys.stderr, flush=True)
                result = run_one(scenario, args, root / f"run{i}", on_progress)
                result.update(repeat=rep, loadavg_1m=os.getloadavg()[0])
                runs.append(result)
                shutil.rmtree(root / f"run{i}", ignore_errors=True)
                if bar is not None:
                    bar.update(1)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "machine": machine_info(args.tmp_dir, load_before),
        "config": {k: v for k, v in vars(args).items() if k != "func"},
        "runs": runs,
        "medians": medians(runs),
    }


def machine_info(tmp_dir: str | None, load: tuple[float, float, float]) -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_before": [round(x, 2) for x in load],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    with contextlib.suppress(ImportError, AttributeError):
        import redis
        import redis.utils

        info["redis_py"] = redis.__version__
        info["redis_py_hiredis"] = bool(redis.utils.HIREDIS_AVAILABLE)
    with contextlib.suppress(OSError, subprocess.SubprocessError, IndexError):
        version = subprocess.run(
            [services.REDIS_SERVER, "--version"], capture_output=True, text=True, timeout=5
        )
        info["redis_server"] = version.stdout.split()[2].removeprefix("v=")
    with contextlib.suppress(OSError, ValueError, IndexError):
        meminfo = Path("/proc/meminfo").read_text().split("\n")[0]
        info["memory_gib"] = round(int(meminfo.split()[1]) / 1024**2, 1)
    with contextlib.suppress(OSError, subprocess.SubprocessError, IndexError):
        df = subprocess.run(
            ["df", "-h", "--output=source,fstype,size", tmp_dir or tempfile.gettempdir()],
            capture_output=True,
            text=True,
            timeout=5,
        )
        info["disk"] = " ".join(df.stdout.splitlines()[1].split())
    return info


METRICS = ("events_per_s", "mb_per_s", "latency_p50_ms", "latency_p99_ms", "server_cores",
           "producer_cores", "disk_write_mb_per_s", "events_per_block")  # fmt: skip


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_name.setdefault(run["scenario"], []).append(run)
    out: dict[str, dict[str, float]] = {}
    for name, group in by_name.items():
        out[name] = {"runs": len(group)}
        for metric in METRICS:
            values = [r[metric] for r in group if metric in r]
            if values:
                out[name][metric] = statistics.median(values)
    return out


# --------------------------------------------------------------------------------------------
# report


def targets(med: dict[str, dict[str, float]], many: int, rate: int) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured figure and met / not met."""
    rows: list[dict[str, Any]] = []

    def add(name: str, value: float | None, ok: bool | None, shown: str) -> None:
        rows.append({"target": name, "value": value, "met": ok, "measured": shown})

    m100, r100 = med.get("millrace-100B"), med.get("redis-100B")
    if m100:
        ev = m100["events_per_s"]
        ratio = f" = {ev / r100['events_per_s']:.2f}x Redis" if r100 else ""
        add(">= 250,000 ev/s, 100 B durable", ev, ev >= 250_000, f"{ev:,.0f} ev/s{ratio}")
    m10k = med.get("millrace-10KiB")
    if m10k:
        mb = m10k["mb_per_s"]
        add(">= 150 MB/s, 10 KiB with tier-2 flushing", mb, mb >= 150, f"{mb:,.1f} MB/s")
    s3 = med.get("millrace-10KiB-s3")
    if s3 and m10k:
        ratio = s3["events_per_s"] / m10k["events_per_s"]
        shown = f"{ratio:.2f} ({s3['mb_per_s']:,.1f} vs {m10k['mb_per_s']:,.1f} MB/s)"
        add("10 KiB on s3 >= 70% of filesystem", ratio, ratio >= 0.7, shown)
    on_hdfs = med.get("millrace-10KiB-hdfs")
    if on_hdfs and m10k:
        ratio = on_hdfs["events_per_s"] / m10k["events_per_s"]
        shown = f"{ratio:.2f} ({on_hdfs['mb_per_s']:,.1f} vs {m10k['mb_per_s']:,.1f} MB/s)"
        add("10 KiB on hdfs (test double) >= 70% of filesystem", ratio, ratio >= 0.7, shown)
    jetstreams = (("millrace-100B-jetstream", "1 server"),
                  ("millrace-100B-jetstream-r3", "3 servers, replicas 3"))  # fmt: skip
    for name, label in jetstreams:
        found = med.get(name)
        if found and r100:
            times = found["events_per_s"] / r100["events_per_s"]
            shown = f"{times:.1f}x Redis ({found['events_per_s']:,.0f} ev/s, {label})"
            add(f"100 B on jetstream ({label}) >= 2x Redis", times, times >= 2, shown)
    paced = med.get("millrace-paced-100k")
    if paced:
        p99, got = paced["latency_p99_ms"], paced["events_per_s"]
        ok = p99 <= 10 and got >= 0.98 * rate
        add(f"p99 <= 10 ms at {rate:,} ev/s", p99, ok, f"p99 {p99:.1f} ms at {got:,.0f} ev/s")
    few, lots = med.get("millrace-10-segments"), med.get(f"millrace-{many}-segments")
    if few and lots:
        loss = 1 - lots["events_per_s"] / few["events_per_s"]
        change = f"{loss:.0%} loss" if loss >= 0 else f"no loss, {-loss:.0%} faster"
        shown = f"{change} ({lots['events_per_s']:,.0f} vs {few['events_per_s']:,.0f})"
        add(f"{many:,} segments lose <= 10% vs 10", loss, loss <= 0.10, shown)
    return rows


COLUMNS = (  # (heading, metric, width, format)
    ("events/s", "events_per_s", 11, ",.0f"),
    ("MB/s", "mb_per_s", 8, ".1f"),
    ("p50 ms", "latency_p50_ms", 9, ".2f"),
    ("p99 ms", "latency_p99_ms", 9, ".2f"),
    ("srv cpu", "server_cores", 8, ".2f"),
    ("prod cpu", "producer_cores", 9, ".2f"),
    ("disk MB/s", "disk_write_mb_per_s", 10, ".0f"),
    ("ev/block", "events_per_block", 9, ",.0f"),
)
LABEL_WIDTH = 26


def _row(label: str, m: dict[str, float]) -> str:
    cells = [
        f"{m[key]:>{width}{fmt}}" if key in m else f"{'-':>{width}}"
        for _, key, width, fmt in COLUMNS
    ]
    return f"{label:<{LABEL_WIDTH}}" + "".join(cells)


def _ratio_row(label: str, m: dict[str, float], r: dict[str, float]) -> str:
    cells = []
    for _, key, width, _fmt in COLUMNS[:4]:
        ratio = m[key] / r[key] if r.get(key) else float("nan")
        cells.append(f"{ratio:>{width - 1}.2f}x")
    return f"{label:<{LABEL_WIDTH}}" + "".join(cells)


def format_table(report: dict[str, Any]) -> str:
    med, cfg = report["medians"], report["config"]
    many, rate = cfg["many_segments"], cfg["paced_rate"]
    head = f"{'':<{LABEL_WIDTH}}" + "".join(f"{h:>{w}}" for h, _, w, _ in COLUMNS)
    lines = [
        f"Append throughput, median of {cfg['repeat']} run(s) of {cfg['duration']} s "
        f"(after {cfg['warmup']} s warm-up); load avg before {report['machine']['loadavg_before']}",
    ]
    machine = report["machine"]
    if "redis_py" in machine:
        parser = "hiredis" if machine.get("redis_py_hiredis") else "pure-Python reply parser"
        lines.append(
            f"Redis: redis-server {machine.get('redis_server', '?')}, "
            f"redis-py {machine['redis_py']} ({parser}), pipelines of 1000 XADD"
        )
    lines += [head, "-" * len(head)]
    for size in ("100B", "10KiB"):
        m, r = med.get(f"millrace-{size}"), med.get(f"redis-{size}")
        if m:
            lines.append(_row(f"{size} Millrace", m))
        if r:
            lines.append(_row(f"{size} Redis (AOF always)", r))
        if m and r:
            lines.append(_ratio_row(f"{size} Millrace/Redis", m, r))
    for name, label in (
        ("millrace-paced-100k", f"paced {rate:,}/s 100B"),
        ("millrace-10-segments", "10 segments 100B"),
        (f"millrace-{many}-segments", f"{many} segments 100B"),
        ("diag-1-event-blocks", "diag: 1-event blocks 100B"),
        (f"diag-{many}-segments-burst-100", f"diag: {many} seg, bursts 100"),
        (f"diag-{many}-segments-10KiB", f"diag: {many} seg, 10KiB"),
        (f"diag-{many}-segments-calls-of-4", f"diag: {many} seg, calls of 4"),
        (f"diag-{many}-segments-call-per-event", f"diag: {many} seg, call/event"),
        ("diag-10-segments-pair-per-event", "diag: 10 seg, pair/event"),
        ("millrace-10KiB-s3", "10KiB tier-2 s3 (moto)"),
        ("millrace-10KiB-hdfs", "10KiB hdfs (test double)"),
        ("millrace-100B-jetstream", "100B tier-1 jetstream"),
        ("millrace-100B-jetstream-r3", "100B jetstream, 3 x R3"),
    ):
        if name in med:
            lines.append(_row(label, med[name]))
    for on in ("millrace-100B", f"millrace-{many}-segments"):
        off = med.get(f"{on}-monitor-off")
        if off and on in med:
            lines.append(_row(f"{on[9:]}, monitor off", off))
            runs = {name: [r["events_per_s"] for r in report["runs"] if r["scenario"] == name]
                    for name in (on, f"{on}-monitor-off")}  # fmt: skip
            cost = 1 - med[on]["events_per_s"] / off["events_per_s"]
            lines.append(
                f"  traffic monitor cost {on[9:]}: {cost:+.1%} (target <= 3 %) runs on "
                + " / ".join(f"{x:,.0f}" for x in runs[on])
                + "; off "
                + " / ".join(f"{x:,.0f}" for x in runs[f"{on}-monitor-off"])
            )
    rows = report.get("targets", [])
    if rows:
        lines += ["", "Targets (issue 2, section 6):"]
        for row in rows:
            verdict = "MET" if row["met"] else "NOT MET"
            lines.append(f"  {verdict:<8} {row['target']:<42} {row['measured']}")
    lines.append(
        "srv/prod cpu: CPU cores used by the server / producer process in the measured window;"
        "\ndisk MB/s: written to the data directory's block device in it (by anyone);"
        "\nev/block: events per append block the client sent (Millrace)."
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, help="measured seconds per run (default 8)")
    p.add_argument("--warmup", type=float, help="seconds before measuring (default 1.5)")
    p.add_argument("--repeat", type=int, help="runs per configuration, median (default 3)")
    p.add_argument("--quick", action="store_true", help="short run for CI smoke (seconds)")
    p.add_argument("--json", action="store_true", help="JSON on stdout (the table on stderr)")
    p.add_argument("--only", nargs="+", metavar="WORD", help="scenarios whose name has WORD")
    p.add_argument(
        "--diagnostics",
        action="store_true",
        help="also: 1-event blocks on 1 segment (the per-operation ceiling), and the many "
        "segments with bursts of 100 events per segment, and with 10 KiB events",
    )
    p.add_argument("--no-redis", action="store_true", help="skip the Redis runs")
    p.add_argument(
        "--tiers",
        action="store_true",
        help="instead: 10 KiB on tier-2 filesystem vs s3 (moto's S3 server), 100 B on tier-1"
        " file vs jetstream (one nats-server, and three with replicas 3) vs Redis",
    )
    p.add_argument(
        "--traffic-monitor",
        action="store_true",
        help="also run the 100 B and many-segments cases with the node's traffic monitor off",
    )
    p.add_argument("--many-segments", type=int, help="the many-segments case (default 5000)")
    p.add_argument("--paced-rate", type=int, default=100_000, help="paced events/s")
    p.add_argument(
        "--profile", choices=("py-spy", "cprofile", "loop-stalls"), help="profile the node"
    )
    p.add_argument("--profile-producer", action="store_true", help="py-spy the producer")
    p.add_argument("--profile-dir", default="bench-profiles", help="where profiles go")
    p.add_argument(
        "--node-env",
        nargs="+",
        default=[],
        metavar="VAR=VALUE",
        help="extra environment of the node (experiments, e.g. MILLRACE_TIER2_OPTIONS=...)",
    )
    p.add_argument(
        "--client-limits",
        nargs="+",
        default=[],
        metavar="FIELD=INT",
        help="client AppendLimits fields for every Millrace run (e.g. small_block_bytes=8192)",
    )
    p.add_argument("--tmp-dir", help="parent of the temporary data directories")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    quick = args.quick
    defaults = {
        "duration": 1.0 if quick else 8.0,
        "warmup": 0.5 if quick else 1.5,
        "repeat": 1 if quick else 3,
        "many_segments": 200 if quick else 5000,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.no_redis is False and not Path(services.REDIS_SERVER).exists():
        print(f"note: {services.REDIS_SERVER} not found, Redis runs skipped", file=sys.stderr)
        args.no_redis = True
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run_all(args)
    report["targets"] = targets(report["medians"], args.many_segments, args.paced_rate)
    table = format_table(report)
    if args.json:
        print(table, file=sys.stderr)
        print(json.dumps(report, indent=2))
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
