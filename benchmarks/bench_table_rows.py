"""The typed tables of ``format=parquet`` made in process, each table's writer as built against the Python rows it
stands in for: what moving a table's rows into the C writer (``collector/export/_tables.c``) gains.

A timeline records ``--n`` spans (8 names, one arg each), each holding one instant (one arg), one counter value and
one message (two values: an integer and a text, both in its text), to a file, read back as the store a snapshot
reads. Interleaved rounds then time, in this process (CPU time of this
thread), the whole Parquet file of a table (every column):

  spans, instants, counters, messages  as built: the C writer's rows where it is built (and not
                                      RINGTRACE_PURE_PYTHON=1)
  *_py                                the same table with the C writer left out: rows read a column at a time in
                                      Python and the rest through the walk (what the instants, counters and messages
                                      tables were made by before they had a C writer)
  chrome                              Chrome JSON of the same store, for scale

python benchmarks/bench_table_rows.py [--n 1000000] [--rounds 3]
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

from _common import bench_main, interleave, median, table
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export import table_rows
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.parquet import parquet_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.selection import EVERYTHING


def record(path: Path, n: int) -> None:
    tl = Timeline("bulk", [FileListener(path, process_name="bulk")])
    names = [f"handler-{k}" for k in range(8)]
    handled = tl.message("app", "info", "handled $i by ${who}")
    for i in range(n):
        with tl.scope(names[i % 8], i=i):
            tl.instant("tick", i=i)
            tl.counter("depth", i % 7)
            handled(i, names[i % 8])
        if i % 100_000 == 0:
            tl.flush(timeout_s=600)
    tl.close()


def timed(path: Path, make: Callable[[object], object]) -> Callable[[], tuple[float, int]]:
    """A round: a fresh view of the file (a walk lets go of what it read), then ``make`` of it, in thread CPU s."""

    def run() -> tuple[float, int]:
        view = load_file(path).view
        started = time.thread_time()
        size = sum(len(chunk) for chunk in make(view))  # type: ignore[attr-defined]
        return time.thread_time() - started, size

    return run


def without_c(table: str) -> Callable[[object], object]:
    def make(view: object) -> object:
        others = {name: c for name, c in table_rows.C_TABLES.items() if name != table}
        with mock.patch.object(table_rows, "C_TABLES", others):
            return list(parquet_chunks(view, EVERYTHING, table))  # type: ignore[arg-type]

    return make


def bench(n: int, rounds: int) -> int:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "bulk.rttrace"
        record(path, n)
        variants = {
            "spans": timed(path, lambda view: parquet_chunks(view, EVERYTHING, "spans")),  # type: ignore[arg-type]
            "spans_py": timed(path, without_c("spans")),
            "instants": timed(path, lambda view: parquet_chunks(view, EVERYTHING, "instants")),  # type: ignore[arg-type]
            "instants_py": timed(path, without_c("instants")),
            "counters": timed(path, lambda view: parquet_chunks(view, EVERYTHING, "counters")),  # type: ignore[arg-type]
            "counters_py": timed(path, without_c("counters")),
            "messages": timed(path, lambda view: parquet_chunks(view, EVERYTHING, "messages")),  # type: ignore[arg-type]
            "messages_py": timed(path, without_c("messages")),
            "chrome": timed(path, lambda view: chrome_trace_chunks(view, EVERYTHING)),  # type: ignore[arg-type]
        }
        results = interleave(variants, rounds)
    seconds = {name: median([took for took, _ in values]) for name, values in results.items()}
    rows = [
        [name, f"{seconds[name]:.3f}", f"{n / seconds[name] / 1e6:.2f}", f"{values[-1][1] / 1e6:.1f}"]
        for name, values in results.items()
    ]
    print(
        table(
            ["variant", "CPU s (median)", "M rows/s", "MB"],
            rows,
            title=f"{n:,} spans, instants, counters, messages, {rounds} rounds",
        )
    )
    for name in ("spans", "instants", "counters", "messages"):
        print(f"{name}: as built / Python rows {seconds[name] / seconds[name + '_py']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=1_000_000, rounds=3, quick=(20_000, 1)))
