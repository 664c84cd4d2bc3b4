"""Snapshots of spans of a trace: what drawing the caller -> callee arrows costs the writers, in one run.

Three files of ``--n`` spans each, written once through a ``FileListener`` with the same args' shape (trace_id,
span_id, parent_span_id, kind): every span ``internal`` (no arrow: the baseline), every span an end of an arrow
(``client`` and ``server`` alternately), and every span with an OTLP-style link (an arrow the C writers leave to the
Python writers). Interleaved rounds then time, in this process, the Chrome JSON and the Perfetto trace of each file as
a snapshot writes them (the C writers where built), and of the arrows file with the Python writers alone.
Target: arrows cost the C writers at most 1.25x the baseline's time.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import bench_main, interleave, median, table, verdict
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView

TARGET = 1.25
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def span_args(i: int, shape: str) -> dict[str, object]:
    args: dict[str, object] = {"trace_id": TRACE, "span_id": f"{i + 1:016x}", "parent_span_id": f"{i:016x}"}
    if shape == "arrows":
        args["kind"] = "client" if i % 2 else "server"
    else:
        args["kind"] = "internal"
    if shape == "links":
        args["links"] = [f"{TRACE}/{i:016x}"]
    return args


def write_file(path: Path, n: int, shape: str) -> SnapshotView:
    timeline = Timeline("flows-bench", [FileListener(path)], max_buffered_events=n)
    for i in range(n):
        with timeline.scope("request", **span_args(i, shape)):
            pass
    timeline.close(timeout_s=120)
    return load_file(path).view


def timed(write: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        for _ in write():  # type: ignore[attr-defined]
            pass
        return time.perf_counter() - started

    return run


def bench(n: int, rounds: int) -> int:
    with tempfile.TemporaryDirectory() as directory:
        views = {
            shape: write_file(Path(directory, f"{shape}.rttrace"), n, shape) for shape in ("none", "arrows", "links")
        }
    variants: dict[str, Callable[[], float]] = {}
    for fmt, chunks in (("chrome", chrome_trace_chunks), ("perfetto", perfetto_chunks)):
        variants[f"{fmt}, no arrows"] = timed(lambda v=views["none"], c=chunks: c(v))
        variants[f"{fmt}, arrows"] = timed(lambda v=views["arrows"], c=chunks: c(v))
        variants[f"{fmt}, arrows, Python writer"] = timed(lambda v=views["arrows"], c=chunks: c(v, accelerated=False))
        variants[f"{fmt}, links"] = timed(lambda v=views["links"], c=chunks: c(v))
    results = interleave(variants, rounds)
    rows = []
    for name, values in results.items():
        base = median(results[name.split(",")[0] + ", no arrows"])
        rows.append([name, median(values), n / median(values) / 1e6, median(values) / base])
    print(table(["variant", "s", "M spans/s", "x no arrows"], rows, title=f"{n:,} spans, medians of the rounds"))
    for fmt in ("chrome", "perfetto"):
        ratio = median(results[f"{fmt}, arrows"]) / median(results[f"{fmt}, no arrows"])
        print(f"{fmt}: arrows / no arrows time {ratio:.2f}x  target <= {TARGET}x: {verdict(ratio <= TARGET)}")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 200_000, 5, (10_000, 1)))
