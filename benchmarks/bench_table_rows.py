"""The typed tables of ``format=parquet`` made in process, each table's writer as built against the Python rows it
stands in for: what moving a table's rows into the C writer (``collector/export/_tables.c``) gains.

A timeline records ``--n`` spans (8 names, one arg each), each holding one instant (one arg), one counter value and
one message (two values: an integer and a text, both in its text), to a file, read back as the store a snapshot
reads; and ``--n`` samples of 64 stacks 21 frames deep, as a sampler's stream holds them (a stack table, then EVENTS
frames of stack ids), to another file. Interleaved rounds then time, in this process (CPU time of this
thread), the whole Parquet file of a table (every column):

  spans, instants, counters, messages, samples
                                      as built: the C writer's rows where it is built (and not
                                      RINGTRACE_PURE_PYTHON=1)
  *_py                                the same table with the C writer left out: rows read a column at a time in
                                      Python and the rest through the walk (what the instants, counters, messages
                                      and samples tables were made by before they had a C writer)
  chrome                              Chrome JSON of the same store, for scale

python benchmarks/bench_table_rows.py [--n 1000000] [--rounds 3]
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import msgpack
from _common import bench_main, interleave, median, table
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export import table_rows
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.parquet import parquet_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.selection import EVERYTHING
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, SAMPLE, THREAD_TRACK, TrackInfo
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stream_encoder import StreamEncoder


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


def record_samples(path: Path, n: int) -> None:
    """``n`` samples of 64 stacks (a chain of 20 frames, then one of 64 leaves), as a sampler's stream holds them."""
    encoder = StreamEncoder()
    track = TrackInfo(1, THREAD_TRACK, "main", 1)
    ts = 10**18
    declared = encoder.encode(track, [INSTANT, "task-a", ts, ts, None])
    task = encoder.strings["task-a"]
    frames = tuple((f"function_{k}", f"/app/package/module_{k % 10}.py", 10 + k) for k in range(20 + 64))
    nodes = tuple((None if k == 0 else k - 1, k) for k in range(20)) + tuple((19, 20 + j) for j in range(64))
    out = [preamble(), encode(Hello(1, "host", "sampled", "i1", "boot", 1, 2, "bench"))]
    out += [*encoder.prefix(), encode(Stacks(0, frames, 0, nodes)), *declared.control]
    for first in range(0, n, 8192):
        count = min(8192, n - first)
        rows: list[list[Any]] = [[SAMPLE] * count, [task] * count, [first + k for k in range(count)], [0] * count]
        rows.append([20 + (first + k) % 64 for k in range(count)])
        out.append(encode(Events(track.track_id, count, ts + first, ts + first + count, msgpack.packb(rows))))
    path.write_bytes(b"".join(out))


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
        sampled = Path(directory) / "sampled.rttrace"
        record_samples(sampled, n)
        variants = {
            "spans": timed(path, lambda view: parquet_chunks(view, EVERYTHING, "spans")),  # type: ignore[arg-type]
            "spans_py": timed(path, without_c("spans")),
            "instants": timed(path, lambda view: parquet_chunks(view, EVERYTHING, "instants")),  # type: ignore[arg-type]
            "instants_py": timed(path, without_c("instants")),
            "counters": timed(path, lambda view: parquet_chunks(view, EVERYTHING, "counters")),  # type: ignore[arg-type]
            "counters_py": timed(path, without_c("counters")),
            "messages": timed(path, lambda view: parquet_chunks(view, EVERYTHING, "messages")),  # type: ignore[arg-type]
            "messages_py": timed(path, without_c("messages")),
            "samples": timed(sampled, lambda view: parquet_chunks(view, EVERYTHING, "samples")),  # type: ignore[arg-type]
            "samples_py": timed(sampled, without_c("samples")),
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
            title=f"{n:,} spans, instants, counters, messages, samples, {rounds} rounds",
        )
    )
    for name in ("spans", "instants", "counters", "messages", "samples"):
        print(f"{name}: as built / Python rows {seconds[name] / seconds[name + '_py']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=1_000_000, rounds=3, quick=(20_000, 1)))
