"""GET /stream delivery latency: how long an event takes from the client's call to a live tail's reader, with the
collector idle and under ingest load, in alternating windows of one run.

A probe process records an instant every 20 ms carrying its wall-clock time (its streamer sends every 10 ms); a
live tail selects them (``/stream?process=probe``) and notes, for each, when it arrived. Windows alternate between
idle (the probe alone) and loaded (two processes recording spans as fast as they can, and the collector ingesting
them); each probe event counts in the window it was sent in. Reported per kind of window: events received, p50,
p99 and max latency, and the loaded/idle ratio of the p50s. The latency includes the client's batching (10 ms) and
the tail's polling (every 200 ms), which are the same in both kinds of window.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence

from _common import collector, median, recorder, stop_process, table

PROBE = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="probe", batch_interval_s=0.01)
while True:
    tl.instant("probe", sent_ns=time.time_ns())
    time.sleep(0.02)
"""
LOAD = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="load")
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    for _ in range(1000):
        with tl.scope("work"):
            pass
tl.flush(30)
"""


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def bench(window_s: float, rounds: int) -> int:
    with collector("--capacity", "512MiB") as running:
        arrivals: list[tuple[int, int]] = []  # (sent ns, arrived ns)
        tail = urllib.request.urlopen(f"http://{running.http}/stream?process=probe", timeout=60)
        tail.readline()  # it has begun

        def read() -> None:
            for line in tail:
                if line.startswith(b"data: "):
                    arrived = time.time_ns()
                    document = json.loads(line[6:])
                    if "args" in document:  # an event; not the "end" (or "cleared") notice of a named SSE event
                        arrivals.append((document["args"]["sent_ns"], arrived))

        threading.Thread(target=read, daemon=True).start()
        probe = subprocess.Popen([sys.executable, "-c", PROBE, running.tcp])
        windows: list[tuple[str, int, int]] = []
        received_before = int(running.healthz()["received_events"])  # type: ignore[call-overload]
        loaded_s = 0.0
        try:
            time.sleep(1.0)  # the probe connects
            for _ in range(rounds):
                for kind in ("idle", "loaded"):
                    start = time.time_ns()
                    if kind == "loaded":
                        loads = [
                            subprocess.Popen([sys.executable, "-c", LOAD, running.tcp, str(window_s)]) for _ in range(2)
                        ]
                        for load in loads:
                            load.wait(timeout=window_s + 60)
                        loaded_s += window_s
                    else:
                        time.sleep(window_s)
                    windows.append((kind, start, time.time_ns()))
            time.sleep(1.0)  # the last probes arrive
        finally:
            stop_process(probe)
        received = int(running.healthz()["received_events"]) - received_before  # type: ignore[call-overload]
    latencies: dict[str, list[float]] = {"idle": [], "loaded": []}
    for sent, arrived in arrivals:
        for kind, start, end in windows:
            if start <= sent < end:
                latencies[kind].append((arrived - sent) / 1e6)
    rows = []
    for kind, values in latencies.items():
        if not values:
            rows.append([kind, 0, "-", "-", "-"])
            continue
        rows.append([kind, len(values), median(values), percentile(values, 0.99), max(values)])
    print(table(["window", "events", "p50 ms", "p99 ms", "max ms"], rows, title="probe latency, call to tail reader"))
    if latencies["idle"] and latencies["loaded"]:
        ratio = median(latencies["loaded"]) / median(latencies["idle"])
        print(f"loaded / idle p50: {ratio:.2f}x; ingest while loaded: about {received / loaded_s / 1e6:.2f}M events/s")
    expected = sum(end - start for _, start, end in windows) / 20e6
    print(f"probe events received: {sum(len(v) for v in latencies.values())} of about {expected:.0f} sent")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window-s", type=float, default=5.0, help="seconds per window (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="idle + loaded windows (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="1 s windows, 1 round: a smoke test")
    args = parser.parse_args()
    print(f"recorder: {recorder()}")
    return bench(1.0, 1) if args.quick else bench(args.window_s, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
