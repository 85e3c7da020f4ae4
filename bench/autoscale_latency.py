"""How soon a hot segment is split after its rate crosses the target (issue 14, section 6).

Target: within two decision windows (``MILLRACE_AUTOSCALE_WINDOW_S``) of crossing.

One ``millrace standalone`` node (embedded defaults) runs with a window of ``--window``
seconds (default 10: the default 120 s would make a run last minutes; the rounds scale with the
window), a cooldown of 1 s and a mute of 1 s. Per run, a new stream scaled by event rate (target
1,000 events/s, scale factor 2) is written at ``--rate`` events/s (default 5,000) of 100 B by
the README's blocking writer in a thread; the REST API's per-stream metrics
(``GET .../metrics``, the traffic monitor's decision-window average) are polled every 0.2 s.
Crossing = the first poll with the segment above 1,000 events/s; split = the first poll with
two segments or more. Printed per run: both times from the start of the load, and the split's
delay after the crossing in windows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from services import rest_call as _call  # a sibling module: bench/ is not a package
from services import standalone_node

TARGET = 1000


def _load(base: str, token: str, scope: str, rate: int, stop: threading.Event) -> None:
    from millrace.client.manager import StreamManager

    payload = bytes(100)
    with StreamManager(base, token=token) as manager, manager.create_writer(scope, "s") as writer:
        sent, started = 0, time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate)
            while sent < due:
                writer.write_event(payload, f"k{sent % 64}")
                sent += 1
            time.sleep(0.005)


def one_run(base: str, token: str, run: int, rate: int, timeout: float) -> dict[str, float]:
    scope = f"hot{run}"
    _call(base, token, "POST", "/v1/scopes", {"scopeName": scope})
    policy = {"type": "BY_RATE_IN_EVENTS_PER_SEC", "targetRate": TARGET, "scaleFactor": 2,
              "minSegments": 1}  # fmt: skip
    _call(base, token, "POST", f"/v1/scopes/{scope}/streams",
          {"streamName": "s", "scalingPolicy": policy})  # fmt: skip
    time.sleep(1.5)  # past the cooldown and the mute: the crossing is what the clock measures
    stop = threading.Event()
    writer = threading.Thread(target=_load, args=(base, token, scope, rate, stop))
    started = time.monotonic()
    writer.start()
    crossed = split = None
    try:
        while split is None and time.monotonic() - started < timeout:
            found = _call(base, token, "GET", f"/v1/scopes/{scope}/streams/s/metrics")
            now = time.monotonic() - started
            if crossed is None and any(s["eventsPerSecond"] > TARGET for s in found["segments"]):
                crossed = now
            if len(found["segments"]) >= 2:
                split = now
            time.sleep(0.2)
    finally:
        stop.set()
        writer.join()
    if crossed is None or split is None:
        raise RuntimeError(f"run {run}: crossed at {crossed}, split at {split} (timeout)")
    return {"crossed_s": crossed, "split_s": split, "delay_s": max(0.0, split - crossed)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=int, default=10, help="decision window, seconds")
    parser.add_argument("--rate", type=int, default=5000, help="events/s written")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    env = {"MILLRACE_AUTOSCALE_WINDOW_S": str(args.window), "MILLRACE_AUTOSCALE_COOLDOWN_S": "1",
           "MILLRACE_AUTOSCALE_MUTE_S": "1"}  # fmt: skip
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="millrace-bench-") as work,
        standalone_node(Path(work), env) as (base, token, _wire),
    ):
        for run in range(args.repeat):
            result = one_run(base, token, run, args.rate, timeout=10 * args.window)
            runs.append(result)
            print(f"  run {run + 1}: crossed {result['crossed_s']:.1f} s, split "
                  f"{result['split_s']:.1f} s after the load started: "
                  f"{result['delay_s'] / args.window:.2f} windows", file=sys.stderr)  # fmt: skip
    worst = max(r["delay_s"] for r in runs) / args.window
    median = statistics.median(r["delay_s"] for r in runs) / args.window
    print(f"window {args.window} s, {args.rate:,} events/s against a target of {TARGET:,}: "
          f"split {median:.2f} windows after crossing (median), {worst:.2f} at worst; "
          f"target <= 2 windows: {'MET' if worst <= 2 else 'NOT MET'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
