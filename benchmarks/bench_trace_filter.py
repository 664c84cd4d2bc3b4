"""``?trace_id=`` snapshots against the same snapshot with no filter, on one store, in one run.

Two files of about ``--n`` events each, written once through a ``FileListener`` and read into a store as a snapshot
reads it:

- requests: one request after another, each a ``server_span`` (a trace of its own) holding three plain scopes and an
  instant (5 events a request). ``?trace_id=`` of one request in the middle selects its 5 events: a first pass finds
  its spans (only frames that hold the trace id's text are decoded), the second decodes only the frames that hold the
  text or overlap its span.
- one trace: one ``trace_scope`` holding every other event, plain scopes: ``?trace_id=`` of it selects every event,
  the worst case (the frames its span holds whole go to the C writers; the others' events are judged one by one by
  the Python writers).

Interleaved rounds time the Chrome JSON and the Perfetto trace of each, whole (the C writers where built) and with
``trace_id``. Targets: one request's snapshot at most 0.25x the time of the whole store's, one trace's that holds
every event at most 2x, in both formats.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from _common import bench_main, interleave, median, table, verdict
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EVERYTHING, EventFilter

TARGET = 0.25
TARGET_EVERY_EVENT = 2.0
EVENTS_PER_REQUEST = 5


def requests_file(path: Path, n: int) -> tuple[SnapshotView, str]:
    """The requests file, and the trace id of the request in its middle."""
    timeline = Timeline("trace-filter-bench", [FileListener(path)], max_buffered_events=n)
    middle = ""
    for i in range(n // EVENTS_PER_REQUEST):
        with timeline.server_span("GET /item", {}, i=i) as span:
            with timeline.scope("parse"):
                pass
            with timeline.scope("query", rows=i % 7):
                timeline.instant("cache miss")
            with timeline.scope("render"):
                pass
        if i == n // EVENTS_PER_REQUEST // 2:
            assert span.context is not None
            middle = span.context.trace_id
    timeline.close(timeout_s=300)
    return load_file(path).view, middle


def one_trace_file(path: Path, n: int) -> tuple[SnapshotView, str]:
    """The file of one trace whose span holds every other event."""
    timeline = Timeline("trace-filter-bench", [FileListener(path)], max_buffered_events=n)
    with timeline.trace_scope("job") as job:
        for i in range(n - 1):
            with timeline.scope("step", i=i):
                pass
    timeline.close(timeout_s=300)
    assert job.context is not None
    return load_file(path).view, job.context.trace_id


def timed(write: Callable[[], Iterator[bytes]]) -> Callable[[], tuple[float, int]]:
    def run() -> tuple[float, int]:
        started = time.perf_counter()
        size = sum(len(chunk) for chunk in write())
        return time.perf_counter() - started, size

    return run


def bench(n: int, rounds: int) -> int:
    with tempfile.TemporaryDirectory() as directory:
        requests, request_id = requests_file(Path(directory, "requests.rttrace"), n)
        one_trace, job_id = one_trace_file(Path(directory, "one_trace.rttrace"), n)
    stores = {"requests": (requests, request_id), "one trace": (one_trace, job_id)}
    variants: dict[str, Callable[[], tuple[float, int]]] = {}
    for fmt, chunks in (("chrome", chrome_trace_chunks), ("perfetto", perfetto_chunks)):
        for store, (view, trace_id) in stores.items():
            selected = EventFilter(trace_id=trace_id)
            variants[f"{fmt}, {store}, whole"] = timed(lambda v=view, c=chunks: c(v, EVERYTHING))
            variants[f"{fmt}, {store}, trace_id"] = timed(lambda v=view, c=chunks, s=selected: c(v, s))
    results = interleave(variants, rounds)
    rows = []
    for name, values in results.items():
        seconds = seconds_of(values)
        whole = seconds_of(results[name.rsplit(",", 1)[0] + ", whole"])
        rows.append([name, seconds, values[0][1] / 1e6, seconds / whole])
    title = f"about {n:,} events a store, medians of {rounds} rounds"
    print(table(["snapshot", "s", "MB", "x whole"], rows, title=title))
    for fmt in ("chrome", "perfetto"):
        for store, target in (("requests", TARGET), ("one trace", TARGET_EVERY_EVENT)):
            ratio = seconds_of(results[f"{fmt}, {store}, trace_id"]) / seconds_of(results[f"{fmt}, {store}, whole"])
            print(f"{fmt}, {store}: trace_id / whole {ratio:.3f}x  target <= {target}x: {verdict(ratio <= target)}")
    return 0


def seconds_of(values: list[tuple[float, int]]) -> float:
    return median([seconds for seconds, _ in values])


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 1_000_000, 3, (100_000, 1)))
