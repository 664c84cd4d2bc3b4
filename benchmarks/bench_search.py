"""GET /spans and GET /aggregates against a Chrome snapshot of the same selection, on one collector, in one run.

A client subprocess records ``--n`` spans in a process named "bulk": plain scopes of a few microseconds, and one in
every 10,000 a "slow" one of about a millisecond. Interleaved rounds then time, each in the same run:

  chrome       GET /snapshot of the whole store (the C writer where built): the baseline
  spans        GET /spans?min_duration=500us&limit=20: the slowest spans, read column-wise, a heap of 20
  aggregates   GET /aggregates: every span's duration per name, exact percentiles

and, while each runs, the collector's own measure of its event loop's lag (``ringtrace_event_loop_lag_seconds`` in
/metrics, read before and after: the bucket bound that holds the longest lag of the rounds). Targets (issue 37):
spans <= 0.5x the time of the Chrome snapshot, aggregates <= 1x, each holding the event loop no longer than it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable

from _common import Collector, bench_main, collector, interleave, longest_lag, median, table, verdict

RECORD = """
import sys, time, ringtrace.client
n = int(sys.argv[2])
tl = ringtrace.client.connect(sys.argv[1], process_name="bulk", max_queue_bytes=1024 * 1024 * 1024)
for i in range(n):
    if i % 10_000 == 5_000:
        with tl.scope("slow", i=i):
            time.sleep(0.001)
    else:
        with tl.scope("work", i=i):
            pass
assert tl.flush(600), "bulk not delivered"
"""
SPANS = "/spans?min_duration=500us&limit=20&flush_timeout_s=0"
AGGREGATES = "/aggregates?flush_timeout_s=0"
CHROME = "/snapshot?flush_timeout_s=0"


def fetch(running: Collector, path: str) -> tuple[float, bytes]:
    """(seconds, body) of one GET, read whole."""
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://{running.http}{path}", timeout=3600) as response:
        body = response.read()
    return time.perf_counter() - started, body


def bench(n: int, rounds: int) -> int:
    with collector("--capacity", "4GiB", "--process-capacity", "4GiB") as running:
        started = time.perf_counter()
        recorded = subprocess.run([sys.executable, "-c", RECORD, running.tcp, str(n)], capture_output=True, text=True)
        assert recorded.returncode == 0, recorded.stderr
        stored = running.stored_events()
        print(f"stored: {stored:,} events ({n:,} spans, recorded in {time.perf_counter() - started:.0f} s)")
        slow = json.loads(fetch(running, SPANS)[1])["spans"]
        names = sorted({span["name"] for span in slow})
        print(f"/spans: {len(slow)} spans of 500us or more ({', '.join(names)}: a busy machine stretches a few)")
        assert slow and all(span["duration_ns"] >= 500_000 for span in slow), slow[:3]

        def measured(path: str) -> Callable[[], tuple[float, float]]:
            def run() -> tuple[float, float]:
                lags = running.lag_buckets()
                seconds, _ = fetch(running, path)
                return seconds, longest_lag(lags, running.lag_buckets())

            return run

        variants = {"chrome": measured(CHROME), "spans": measured(SPANS), "aggregates": measured(AGGREGATES)}
        results = interleave(variants, rounds, warmup=1)
    chrome_s = median([r[0] for r in results["chrome"]])
    chrome_lag = max(r[1] for r in results["chrome"])
    rows = []
    for name, values in results.items():
        seconds, lag = median([v[0] for v in values]), max(v[1] for v in values)
        rows.append([name, seconds, stored / seconds / 1e6, seconds / chrome_s, lag * 1000])
    print(table(["variant", "s", "M events/s", "x chrome time", "loop lag <= ms"], rows, title="medians of the rounds"))
    for name, target in (("spans", 0.5), ("aggregates", 1.0)):
        ratio = median([r[0] for r in results[name]]) / chrome_s
        lag = max(r[1] for r in results[name])
        print(f"{name}: {ratio:.2f}x the Chrome snapshot's time  target <= {target}x: {verdict(ratio <= target)}; "
              f"loop lag <= {lag * 1000:g} ms (chrome's <= {chrome_lag * 1000:g} ms): "
              f"{verdict(lag <= chrome_lag)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 10_000_000, 3, (50_000, 1)))
