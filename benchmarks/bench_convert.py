"""``ringtrace convert``: events/s of a trace file to Chrome JSON, to a snapshot file and to a Perfetto trace, against
reading the same file with the client's own reader (``read_trace_file``, every event decoded to an object), in one
run; and the Perfetto trace's events/s as a ratio of Chrome JSON's (target >= 0.5x).

A file of ``--n`` spans (one arg each) on two threads is written once through a ``FileListener``; interleaved rounds
then time each variant in this process (the command's ``main``, so interpreter start-up is not counted).
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import bench_main, interleave, median, table, verdict
from ringtrace.client import FileListener, Timeline, read_trace_file
from ringtrace.collector.command.main import main as command


def write_file(path: Path, n: int) -> None:
    timeline = Timeline("convert-bench", [FileListener(path)], max_buffered_events=n)

    def record(count: int) -> None:
        for i in range(count):
            with timeline.scope("work", i=i):
                pass

    worker = threading.Thread(target=record, args=(n // 2,), name="worker")
    worker.start()
    record(n - n // 2)
    worker.join()
    timeline.close(timeout_s=120)


def bench(n: int, rounds: int) -> int:
    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory, "bench.rttrace")
        write_file(source, n)
        events = len(read_trace_file(source).events)
        print(f"file: {source.stat().st_size / 1e6:.1f} MB, {events:,} events")

        def convert(fmt: str) -> float:
            started = time.perf_counter()
            with contextlib.redirect_stderr(io.StringIO()):
                status = command(["convert", str(source), "-o", str(Path(directory, "out")), "--format", fmt])
            assert status == 0
            return time.perf_counter() - started

        def read() -> float:
            started = time.perf_counter()
            read_trace_file(source)
            return time.perf_counter() - started

        variants = {"read_trace_file (baseline)": read, "convert chrome": lambda: convert("chrome")}
        variants["convert native"] = lambda: convert("native")
        variants["convert perfetto"] = lambda: convert("perfetto")
        results = interleave(variants, rounds)
    base = median(results["read_trace_file (baseline)"])
    rows = [[name, median(v), events / median(v) / 1e6, median(v) / base] for name, v in results.items()]
    print(table(["variant", "s", "M events/s", "x baseline time"], rows, title="medians of the rounds"))
    ratio = median(results["convert chrome"]) / median(results["convert perfetto"])
    print(f"perfetto: {ratio:.2f}x Chrome JSON's events/s (the same file)  target >= 0.5x: {verdict(ratio >= 0.5)}")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 1_000_000, 3, (20_000, 1)))
