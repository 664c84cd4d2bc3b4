"""GET /snapshot against a real collector holding N spans: speed, first byte, event-loop stalls, selective filters.

A client subprocess records ``--n`` spans (one arg each) in a process named "bulk", another ``--small`` instants
flushed one by one (a frame each: a process that records little at a time; a reader of many small frames once held
the event loop up for 150 ms), then, after a pause, 1,000 instants in a process named "needle". A second collector,
which writes every event through the Python walk (the C writer off, ``RINGTRACE_PURE_PYTHON=1``), is given the same
store (the first one's snapshot file, replayed). Interleaved rounds then time, each in the same run:

  chrome               the whole store as Chrome JSON: events/s, MB, time to the first byte
  chrome, Python walk  the same, from the second collector: the baseline of the C writer
  native               the whole store as a snapshot file
  perfetto             the whole store as a Perfetto protobuf trace (its events/s and size as a ratio of Chrome
                       JSON's)
  pid=needle           Chrome JSON of the needle process alone (0.1% of the events, or less)
  since=needle         Chrome JSON of the time window holding the needle's events alone
  4 x chrome           four whole-store snapshots at once (wall time of the slowest)

While each runs:
  loop lag <= ms   the collector's own measure of its event loop (``ringtrace_event_loop_lag_seconds`` in /metrics,
                   read before and after): the bucket bound that holds the longest lag of the rounds
  /healthz ms      a thread polls /healthz every 10 ms: its longest answer (median of the rounds), as seen from
                   outside (this process's own threads and the 2 cores shared with it count too)
  flush ack ms     a client process records an instant and flushes every 10 ms: its longest wait for the collector's
                   acknowledgement (the event stored), how long ingest was held up (it adds 100 events a second to
                   the store: a rounding error on the events/s)
The same with no snapshot running is the baseline. Selective filters are reported as a ratio of their time to the
whole snapshot's, next to the share of events they select. Last, memory: a fresh collector is given the same store,
then serves one whole Chrome snapshot, and another fresh one four at once: their peak RSS (VmHWM, reset before).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import (
    HOST,
    Collector,
    collector,
    interleave,
    longest_lag,
    median,
    read_status_kb,
    recorder,
    table,
    verdict,
)
from ringtrace.wire.optional_c import PURE_PYTHON_ENV

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
CHATTY = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="chatty")
for i in range(int(sys.argv[2])):
    tl.instant("ping", i=i)
    assert tl.flush(30), "chatty not delivered"
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
    """Polls /healthz every 10 ms on a thread; ``longest_s`` is the slowest answer since ``start``. (Back to back,
    hundreds of new connections a second, the polling itself took a good share of the two cores.)"""

    def __init__(self, running: Collector) -> None:
        self.url = f"http://{running.http}/healthz"
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
            self._stop.wait(0.01)


def fetch(url: str) -> tuple[float, float, int]:
    """(seconds to the first byte of the body, seconds in all, bytes of the body as sent) of one GET.

    Read from a raw socket that only counts bytes (the body as sent: chunked, its chunk sizes included), so that
    this process takes little of the cores it shares with the collector: urllib's chunked decoding in Python took a
    good part of one per snapshot, and four at once held up the collector's event loop for want of a core."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or HOST, parts.port or 80
    request = f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
    started = time.perf_counter()
    first = 0.0
    head: bytearray | None = bytearray()
    buffer = bytearray(1 << 20)
    size = 0
    with socket.create_connection((host, port), timeout=600) as connection:
        connection.sendall(request.encode())
        while count := connection.recv_into(buffer):
            if head is not None:  # the status line and headers come first
                head += buffer[:count]
                head_end = head.find(b"\r\n\r\n")
                if head_end < 0:
                    continue
                assert head.startswith(b"HTTP/1.1 200"), bytes(head[:200])
                count, head = len(head) - head_end - 4, None
            if count and not size:
                first = time.perf_counter() - started
            size += count
    return first, time.perf_counter() - started, size


def bench(n: int, small: int, rounds: int) -> int:
    python_walk = {PURE_PYTHON_ENV: "1"}
    with (
        tempfile.TemporaryDirectory() as scratch,
        collector("--capacity", "1GiB") as running,
        collector("--capacity", "1GiB", environment=python_walk) as slow,
    ):
        bulk = subprocess.run([sys.executable, "-c", RECORD, running.tcp, str(n)], capture_output=True, text=True)
        assert bulk.returncode == 0, bulk.stderr
        chatty = subprocess.run([sys.executable, "-c", CHATTY, running.tcp, str(small)], capture_output=True, text=True)
        assert chatty.returncode == 0, chatty.stderr
        time.sleep(0.2)
        needle = subprocess.run([sys.executable, "-c", NEEDLE, running.tcp], capture_output=True, text=True)
        assert needle.returncode == 0, needle.stderr
        needle_pid, since = needle.stdout.split()
        stored = running.stored_events()
        print(f"stored: {stored:,} events ({n:,} bulk spans, {small:,} instants flushed one by one, 1,000 needle "
              "instants)")  # fmt: skip
        copy = Path(scratch) / "store.rtsnap"
        with urllib.request.urlopen(f"http://{running.http}/snapshot?format=native", timeout=600) as response:
            copy.write_bytes(response.read())
        replay(copy, slow)
        print(f"stored by the Python walk's collector: {slow.stored_events():,} events")
        pinger = IngestProbe(running)
        try:
            measure(running, slow, pinger, stored, needle_pid, since, rounds)
        finally:
            pinger.stop()
        memory(copy)
    return 0


def replay(path: Path, to: Collector) -> None:
    command = "import sys; from ringtrace.collector.command.main import main; sys.exit(main())"
    subprocess.run(
        [sys.executable, "-c", command, "replay", str(path), "--to", to.tcp], check=True, capture_output=True
    )


def memory(path: Path) -> None:
    """Peak RSS of a fresh collector given the same store while one, then four, whole Chrome snapshots run; and how
    far above its RSS before the snapshots that peak is."""
    grown, peak = {}, {}
    for at_once in (1, 4):
        with collector("--capacity", "1GiB") as fresh:
            replay(path, fresh)
            pid = fresh.process.pid
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from now on
            before = read_status_kb(pid, "VmRSS")
            with ThreadPoolExecutor(at_once) as pool:
                list(pool.map(fetch, [f"http://{fresh.http}/snapshot?flush_timeout_s=0"] * at_once))
            peak[at_once] = read_status_kb(pid, "VmHWM")
            grown[at_once] = peak[at_once] - before
    print(f"peak RSS: {peak[1] / 1e6:.1f} MB with one snapshot, {peak[4] / 1e6:.1f} MB with 4 at once = "
          f"{peak[4] / peak[1]:.2f}x  target <= 2x: {verdict(peak[4] <= 2 * peak[1])}")  # fmt: skip
    print(f"  of which the snapshots' own (above the collector's RSS before): {grown[1] / 1e6:.1f} MB with one, "
          f"{grown[4] / 1e6:.1f} MB with 4 = {grown[4] / max(grown[1], 1):.2f}x")  # fmt: skip


def measure(
    running: Collector, slow: Collector, pinger: IngestProbe, stored: int, needle_pid: str, since: str, rounds: int
) -> None:
    base = f"http://{running.http}/snapshot?flush_timeout_s=0"
    probe = LoopProbe(running)
    slow_probe = LoopProbe(slow)

    def probed(
        run: Callable[[], tuple[float, float, int]], target: Collector = running
    ) -> Callable[[], tuple[float, float, int, float, float, float]]:
        loop = probe if target is running else slow_probe

        def measured() -> tuple[float, float, int, float, float, float]:
            lags = target.lag_buckets()
            loop.start()
            began = time.time()
            try:
                first, total, size = run()
            finally:
                stall = loop.stop()
            lag = longest_lag(lags, target.lag_buckets())
            return first, total, size, stall, pinger.longest(began, time.time()), lag

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
        "chrome, Python walk": probed(lambda: fetch(f"http://{slow.http}/snapshot?flush_timeout_s=0"), slow),
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
        first, total, size, stall, ingest, _ = (median([v[i] for v in values]) for i in range(6))
        lag = max(v[5] for v in values)
        if name.startswith("idle"):
            rows.append([name, "-", "-", "-", "-", lag * 1000, stall * 1000, ingest * 1000, "-"])
            continue
        rate = f"{stored / total / 1e6:.2f}" if name in ("chrome", "chrome, Python walk", "native", "perfetto") else "-"
        rows.append([name, total, first * 1000, size / 1e6, rate, lag * 1000, stall * 1000, ingest * 1000,
                     total / whole_s])  # fmt: skip
    headers = ["variant", "s", "first byte ms", "MB", "M events/s", "loop lag <= ms", "/healthz ms", "flush ack ms",
               "x chrome time"]  # fmt: skip
    print(table(headers, rows, title="medians of the rounds"))
    chrome = results["chrome"]
    sizes = {name: median([r[2] for r in results[name]]) for name in ("chrome", "perfetto")}
    print(f"perfetto size: {sizes['perfetto'] / 1e6:.1f} MB = {sizes['perfetto'] / sizes['chrome']:.2f}x Chrome JSON's "
          f"{sizes['chrome'] / 1e6:.1f} MB (the same store)")  # fmt: skip
    rate = stored / whole_s
    print(f"chrome: {rate / 1e6:.2f}M events/s  target >= 1.5M: {verdict(rate >= 1.5e6)}")
    ratio = whole_s / median([r[1] for r in results["perfetto"]])
    print(f"perfetto: {ratio:.2f}x Chrome JSON's events/s  target >= 0.5x: {verdict(ratio >= 0.5)}")
    ratio = median([r[1] for r in results["chrome, Python walk"]]) / whole_s
    print(f"chrome: {ratio:.1f}x the Python walk's events/s  target >= 2x: {verdict(ratio >= 2)}")
    print(f"first byte {median([r[0] for r in chrome]) * 1000:.0f} ms  target <= 100 ms: "
          f"{verdict(median([r[0] for r in chrome]) <= 0.1)}")  # fmt: skip
    for name in ("chrome", "4 x chrome"):
        lag = max(r[5] for r in results[name])
        print(f"longest event-loop lag with {name}: <= {lag * 1000:g} ms  target <= 10 ms: {verdict(lag <= 0.01)}")
    idle_ack = max(r[4] for r in results["idle (no snapshot)"])
    for name in ("chrome", "4 x chrome"):
        ack = max(r[4] for r in results[name])
        print(f"longest flush acknowledgement with {name}: {ack * 1000:.1f} ms (idle: {idle_ack * 1000:.1f} ms)  "
              f"target <= 10 ms more than idle: {verdict(ack <= idle_ack + 0.01)}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="bulk spans (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (default %(default)s)")
    parser.add_argument(
        "--small", type=int, default=20_000, help="instants flushed one by one, a frame each (default %(default)s)"
    )
    parser.add_argument("--quick", action="store_true", help="20,000 spans, 1 round: a smoke test")
    args = parser.parse_args()
    print(f"recorder: {recorder()}")
    return bench(20_000, 100, 1) if args.quick else bench(args.n, args.small, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
