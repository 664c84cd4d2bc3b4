"""GET /snapshot against a real collector holding N spans: speed, first byte, event-loop stalls, selective filters.

A client subprocess records ``--n`` spans (one arg each) in a process named "bulk", then, after a pause, 1,000 more in
a process named "needle". A second collector, which writes every event through the Python walk (the C writer off,
``RINGTRACE_PURE_PYTHON=1``), is given the same store (the first one's snapshot file, replayed). Interleaved rounds
then time, each in the same run:

  chrome               the whole store as Chrome JSON: events/s, MB, time to the first byte
  chrome, Python walk  the same, from the second collector: the baseline of the C writer
  native               the whole store as a snapshot file
  perfetto             the whole store as a Perfetto protobuf trace (and its size as a ratio of Chrome JSON's)
  pid=needle           Chrome JSON of the needle process alone (0.1% of the events, or less)
  since=needle         Chrome JSON of the time window holding the needle's events alone
  4 x chrome           four whole-store snapshots at once (wall time of the slowest)

While each runs, a thread polls /healthz back to back: its longest answer is the longest the event loop stalled
(as seen from outside, plus one HTTP round trip); the same polling with no snapshot running is the baseline. After
each answer it reads the collector's VmRSS: "RSS up" is its peak above what it was when the variant began (the
store is shared by every snapshot; what one adds is its own). Meanwhile a client process records an instant and
flushes every 10 ms: "longest ack" is its longest wait for the collector's acknowledgement (the event stored), which
is how long ingest was held up; it adds 100 events a second to the store, a rounding error on the events/s.
Selective filters are reported as a ratio of their time to the whole snapshot's, next to the share of events they
select.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import Collector, collector, interleave, median, read_status_kb, recorder, table, verdict
from ringtrace.client.accelerator import PURE_PYTHON_ENV

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
PINGER = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="pinger")
while True:
    tl.instant("ping")
    started = time.perf_counter()
    delivered = tl.flush(60)
    print(f"{time.time():.6f} {time.perf_counter() - started:.6f} {int(delivered)}", flush=True)
    time.sleep(0.01)
"""


class IngestProbe:
    """A client process that records one instant and flushes, every 10 ms, for as long as it runs: how long the
    collector takes to acknowledge a flush (store the event and answer) is how long ingest waited."""

    def __init__(self, running: Collector) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PINGER, running.tcp], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        #: (wall-clock s at the acknowledgement, seconds the flush took, delivered)
        self.pings: list[tuple[float, float, bool]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            acked, took, delivered = line.split()
            self.pings.append((float(acked), float(took), delivered == "1"))

    def longest(self, since: float, until: float) -> float:
        """The longest flush that was under way between the two wall-clock times (waits for one that ends after)."""
        deadline = time.monotonic() + 60
        while (not self.pings or self.pings[-1][0] < until) and time.monotonic() < deadline:
            time.sleep(0.01)
        taken = [took for acked, took, _ in self.pings if acked >= since and acked - took <= until]
        assert all(delivered for acked, _, delivered in self.pings if acked >= since), "a ping was not delivered"
        return max(taken, default=float("nan"))

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class LoopProbe:
    """Polls /healthz back to back on a thread: ``longest_s`` is the slowest answer since ``start``, ``rss_growth``
    how far the collector's VmRSS rose above what it was at ``start`` (read after each answer)."""

    def __init__(self, running: Collector) -> None:
        self.url = f"http://{running.http}/healthz"
        self.pid = running.process.pid
        self.longest_s = 0.0
        self.rss_growth = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.longest_s = 0.0
        self.rss_growth = 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(read_status_kb(self.pid, "VmRSS"),), daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        return self.longest_s

    def _run(self, rss_at_start: int) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=30) as response:
                response.read()
            self.longest_s = max(self.longest_s, time.perf_counter() - started)
            self.rss_growth = max(self.rss_growth, read_status_kb(self.pid, "VmRSS") - rss_at_start)


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
    python_walk = {PURE_PYTHON_ENV: "1"}
    with collector("--capacity", "1GiB") as running, collector("--capacity", "1GiB", environment=python_walk) as slow:
        bulk = subprocess.run([sys.executable, "-c", RECORD, running.tcp, str(n)], capture_output=True, text=True)
        assert bulk.returncode == 0, bulk.stderr
        time.sleep(0.2)
        needle = subprocess.run([sys.executable, "-c", NEEDLE, running.tcp], capture_output=True, text=True)
        assert needle.returncode == 0, needle.stderr
        needle_pid, since = needle.stdout.split()
        stored = running.stored_events()
        print(f"stored: {stored:,} events ({n:,} bulk spans, 1,000 needle instants)")
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "store.rtsnap"
            with urllib.request.urlopen(f"http://{running.http}/snapshot?format=native", timeout=600) as response:
                copy.write_bytes(response.read())
            command = "import sys; from ringtrace.collector.command import main; sys.exit(main())"
            replay = [sys.executable, "-c", command, "replay", str(copy), "--to", slow.tcp]
            subprocess.run(replay, check=True, capture_output=True)
        print(f"stored by the Python walk's collector: {slow.stored_events():,} events")
        pinger = IngestProbe(running)
        try:
            return measure(running, slow, pinger, stored, needle_pid, since, rounds)
        finally:
            pinger.stop()


def measure(
    running: Collector, slow: Collector, pinger: IngestProbe, stored: int, needle_pid: str, since: str, rounds: int
) -> int:
    base = f"http://{running.http}/snapshot?flush_timeout_s=0"
    probe = LoopProbe(running)
    slow_probe = LoopProbe(slow)

    def probed(
        run: Callable[[], tuple[float, float, int]], loop: LoopProbe = probe
    ) -> Callable[[], tuple[float, float, int, float, int, float]]:
        def measured() -> tuple[float, float, int, float, int, float]:
            loop.start()
            began = time.time()
            try:
                first, total, size = run()
            finally:
                stall = loop.stop()
            return first, total, size, stall, loop.rss_growth, pinger.longest(began, time.time())

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
        "chrome, Python walk": probed(lambda: fetch(f"http://{slow.http}/snapshot?flush_timeout_s=0"), slow_probe),
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
        first, total, size, stall, grown, ingest = (median([v[i] for v in values]) for i in range(6))
        if name.startswith("idle"):
            rows.append([name, "-", "-", "-", "-", stall * 1000, ingest * 1000, grown / 1e6, "-"])
            continue
        rate = f"{stored / total / 1e6:.2f}" if name in ("chrome", "chrome, Python walk", "native", "perfetto") else "-"
        rows.append([name, total, first * 1000, size / 1e6, rate, stall * 1000, ingest * 1000, grown / 1e6,
                     total / whole_s])  # fmt: skip
    headers = ["variant", "s", "first byte ms", "MB", "M events/s", "longest stall ms", "longest ack ms", "RSS up MB",
               "x chrome time"]  # fmt: skip
    print(table(headers, rows, title="medians of the rounds"))
    chrome = results["chrome"]
    sizes = {name: median([r[2] for r in results[name]]) for name in ("chrome", "perfetto")}
    print(f"perfetto size: {sizes['perfetto'] / 1e6:.1f} MB = {sizes['perfetto'] / sizes['chrome']:.2f}x Chrome JSON's "
          f"{sizes['chrome'] / 1e6:.1f} MB (the same store)")  # fmt: skip
    rate = stored / whole_s
    print(f"chrome: {rate / 1e6:.2f}M events/s  target >= 1.5M: {verdict(rate >= 1.5e6)}")
    ratio = median([r[1] for r in results["chrome, Python walk"]]) / whole_s
    print(f"chrome: {ratio:.1f}x the Python walk's events/s  target >= 2x: {verdict(ratio >= 2)}")
    print(f"first byte {median([r[0] for r in chrome]) * 1000:.0f} ms  target <= 100 ms: "
          f"{verdict(median([r[0] for r in chrome]) <= 0.1)}")  # fmt: skip
    for name in ("chrome", "4 x chrome"):
        stall = max(r[3] for r in results[name])
        print(f"longest stall with {name}: {stall * 1000:.1f} ms  target <= 10 ms: {verdict(stall <= 0.01)}")
    idle_ack = max(r[5] for r in results["idle (no snapshot)"])
    for name in ("chrome", "4 x chrome"):
        ack = max(r[5] for r in results[name])
        print(f"longest flush acknowledgement with {name}: {ack * 1000:.1f} ms (idle: {idle_ack * 1000:.1f} ms)  "
              f"target <= 10 ms more than idle: {verdict(ack <= idle_ack + 0.01)}")  # fmt: skip
    one, four = (max(r[4] for r in results[name]) for name in ("chrome", "4 x chrome"))
    print(f"RSS growth: {four / 1e6:.1f} MB with 4 x chrome, {one / 1e6:.1f} MB with one  target <= 2x: "
          f"{verdict(four <= 2 * max(one, 1))}")  # fmt: skip
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
