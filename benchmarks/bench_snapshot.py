"""GET /snapshot against a real collector holding N spans: speed, first byte, event-loop stalls, selective filters.

A client subprocess records ``--n`` spans (one arg each) in a process named "bulk", then, after a pause, 1,000 more in
a process named "needle". Interleaved rounds then time, each in the same run:

  chrome               the whole store as Chrome JSON: events/s, MB, time to the first byte
  native               the whole store as a snapshot file
  perfetto             the whole store as a Perfetto protobuf trace (and its size as a ratio of Chrome JSON's)
  pid=needle           Chrome JSON of the needle process alone (0.1% of the events, or less)
  since=needle         Chrome JSON of the time window holding the needle's events alone
  4 x chrome           four whole-store snapshots at once (wall time of the slowest)

While each runs, a thread polls /healthz back to back: its longest answer is the longest the event loop stalled
(as seen from outside, plus one HTTP round trip); the same polling with no snapshot running is the baseline.
Selective filters are reported as a ratio of their time to the whole snapshot's, next to the share of events they
select.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from _common import Collector, collector, interleave, median, recorder, table, verdict

RECORD = """
import os, sys, time, ringtrace.client
n = int(sys.argv[2])
tl = ringtrace.client.connect(sys.argv[1], process_name="bulk", max_queue_bytes=512 * 1024 * 1024)
for i in range(n):
    with tl.scope("work", i=i):
        pass
assert tl.flush(120), "bulk not delivered"
print(os.getpid(), flush=True)
"""
NEEDLE = """
import os, sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="needle")
since = time.time_ns()
for i in range(1000):
    tl.instant("needle", i=i)
assert tl.flush(30), "needle not delivered"
print(os.getpid(), since, flush=True)
"""


class LoopProbe:
    """Polls /healthz back to back on a thread; ``longest_s`` is the slowest answer since ``start``."""

    def __init__(self, http: str) -> None:
        self.url = f"http://{http}/healthz"
        self.longest_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.longest_s = 0.0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        return self.longest_s

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=30) as response:
                response.read()
            self.longest_s = max(self.longest_s, time.perf_counter() - started)


def fetch(url: str) -> tuple[float, float, int]:
    """(seconds to the first byte, seconds in all, bytes) of one GET."""
    started = time.perf_counter()
    size = 0
    first = 0.0
    with urllib.request.urlopen(url, timeout=600) as response:
        while chunk := response.read(1 << 20):
            if not size:
                first = time.perf_counter() - started
            size += len(chunk)
    return first, time.perf_counter() - started, size


def bench(n: int, rounds: int) -> int:
    with collector("--capacity", "1GiB") as running:
        bulk = subprocess.run([sys.executable, "-c", RECORD, running.tcp, str(n)], capture_output=True, text=True)
        assert bulk.returncode == 0, bulk.stderr
        time.sleep(0.2)
        needle = subprocess.run([sys.executable, "-c", NEEDLE, running.tcp], capture_output=True, text=True)
        assert needle.returncode == 0, needle.stderr
        needle_pid, since = needle.stdout.split()
        stored = running.stored_events()
        print(f"stored: {stored:,} events ({n:,} bulk spans, 1,000 needle instants)")
        return measure(running, stored, needle_pid, since, rounds)


def measure(running: Collector, stored: int, needle_pid: str, since: str, rounds: int) -> int:
    base = f"http://{running.http}/snapshot?flush_timeout_s=0"
    probe = LoopProbe(running.http)

    def probed(run: Callable[[], tuple[float, float, int]]) -> Callable[[], tuple[float, float, int, float]]:
        def measured() -> tuple[float, float, int, float]:
            probe.start()
            try:
                first, total, size = run()
            finally:
                stall = probe.stop()
            return first, total, size, stall

        return measured

    def four() -> tuple[float, float, int]:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(fetch, [base] * 4))
        return min(r[0] for r in results), max(r[1] for r in results), sum(r[2] for r in results)

    def idle() -> tuple[float, float, int]:
        time.sleep(1.0)
        return 0.0, 1.0, 0

    variants = {
        "idle (no snapshot)": probed(idle),
        "chrome": probed(lambda: fetch(base)),
        "native": probed(lambda: fetch(base + "&format=native")),
        "perfetto": probed(lambda: fetch(base + "&format=perfetto")),
        "pid=needle": probed(lambda: fetch(f"{base}&pid={needle_pid}")),
        "since=needle": probed(lambda: fetch(f"{base}&since={since}")),
        "4 x chrome": probed(four),
    }
    results = interleave(variants, rounds, warmup=1)
    whole_s = median([r[1] for r in results["chrome"]])
    rows = []
    for name, values in results.items():
        first, total, size, stall = (median([v[i] for v in values]) for i in range(4))
        if name.startswith("idle"):
            rows.append([name, "-", "-", "-", "-", stall * 1000, "-"])
            continue
        rate = f"{stored / total / 1e6:.2f}" if name in ("chrome", "native", "perfetto") else "-"
        rows.append([name, total, first * 1000, size / 1e6, rate, stall * 1000, total / whole_s])
    headers = ["variant", "s", "first byte ms", "MB", "M events/s", "longest stall ms", "x chrome time"]
    print(table(headers, rows, title="medians of the rounds"))
    chrome = results["chrome"]
    sizes = {name: median([r[2] for r in results[name]]) for name in ("chrome", "perfetto")}
    print(f"perfetto size: {sizes['perfetto'] / 1e6:.1f} MB = {sizes['perfetto'] / sizes['chrome']:.2f}x Chrome JSON's "
          f"{sizes['chrome'] / 1e6:.1f} MB (the same store)")  # fmt: skip
    rate = stored / whole_s
    print(f"chrome: {rate / 1e6:.2f}M events/s  target >= 1.5M: {verdict(rate >= 1.5e6)}")
    print(f"first byte {median([r[0] for r in chrome]) * 1000:.0f} ms  target <= 100 ms: "
          f"{verdict(median([r[0] for r in chrome]) <= 0.1)}")  # fmt: skip
    for name in ("chrome", "4 x chrome"):
        stall = max(r[3] for r in results[name])
        print(f"longest stall with {name}: {stall * 1000:.1f} ms  target <= 10 ms: {verdict(stall <= 0.01)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="bulk spans (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="20,000 spans, 1 round: a smoke test")
    args = parser.parse_args()
    print(f"recorder: {recorder()}")
    return bench(20_000, 1) if args.quick else bench(args.n, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
