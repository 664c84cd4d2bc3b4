"""The function tracer's cost per call (issue "Function tracing at viztracer's cost"): what ringtrace's tracer adds
to each Python call, against what viztracer's adds, everything traced.

Workloads (in this process):
  fib         recursive fib(25): 242,785 calls that do almost nothing else (the worst case, a tracer's floor).
  call_heavy  ``workloads/call_heavy.py``: JSON in and out, dataclasses, a small class hierarchy (~1M Python calls).

Variants, ROUNDS rounds interleaved round-robin (the order rotating each round), one warm-up round:
  untraced    the workload alone.
  viztracer   ``VizTracer(tracer_entries=..., verbose=0, ignore_c_function=...)``: start, the workload, stop; its
              buffer cleared after (not timed); nothing saved.
  ringtrace   ``ringtrace.client._functions.Tracer`` (decide: everything; a buffer that holds every call): start, the
              workload, stop; drained after (not timed). Its records written and calls dropped are reported.
  floor       on Python 3.11 with C functions only (where both tracers are C profile functions): a profile function
              that does nothing (``workloads/noop_profile.c``, compiled at start with the interpreter's compiler;
              ``noop_profile.py``): what the interpreter adds to every call for any profile function, so that what
              each tracer adds beyond it is its own part.
Python calls only (``builtins=False``, viztracer's ``ignore_c_function=True``), and for call_heavy also with C
functions (``builtins=True``, viztracer's default) as "call_heavy+C".

Added ns per call = (median traced time - median untraced) / calls, calls being the records ringtrace wrote (every
call: nothing is filtered), times being the thread's CPU time (``time.thread_time_ns``: on a busy shared machine, wall
time counts the waits for a core too). The ratio is ringtrace's added / viztracer's added (target <= 0.8).

Run: ``python benchmarks/bench_functions.py`` (``--rounds``, ``--fib``, ``--scale``, ``--quick``);
``RINGTRACE_PURE_PYTHON=1`` or an unbuilt extension: nothing to measure.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import CodeType
from typing import Any

import noop_profile
from _common import interleave, median, table
from ringtrace.wire.call_records import RECORD
from ringtrace.wire.optional_c import load_optional

sys.path.insert(0, str(Path(__file__).parent / "workloads"))
import call_heavy

TARGET = 0.8


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def everything(code: CodeType, module: str) -> bool:
    return True


class Measured:
    """One workload's variants: each a callable that runs it once and returns its wall time in ns."""

    def __init__(self, work: Callable[[], object], calls_hint: int, builtins: bool) -> None:
        from viztracer import VizTracer

        functions = load_optional("ringtrace.client._functions")
        assert functions is not None
        self.work = work
        self.viztracer: Any = VizTracer(tracer_entries=calls_hint * 2 + 1000, verbose=0, ignore_c_function=not builtins)
        self.locations: list[Any] = []
        self.tracer = functions.Tracer(
            everything, self.locations, builtins=builtins, buffer_bytes=(calls_hint * 2 + 1000) * RECORD.size
        )
        self.records: list[int] = []
        self.dropped = 0

    def untraced(self) -> int:
        gc.collect()
        start = time.thread_time_ns()
        self.work()
        return time.thread_time_ns() - start

    def viztraced(self) -> int:
        gc.collect()
        tracer = self.viztracer
        start = time.thread_time_ns()
        tracer.start()
        self.work()
        tracer.stop()
        elapsed = time.thread_time_ns() - start
        tracer.clear()
        return elapsed

    def floor(self, profile: Any) -> int:
        gc.collect()
        start = time.thread_time_ns()
        profile.start()
        self.work()
        profile.stop()
        return time.thread_time_ns() - start

    def ringtraced(self) -> int:
        gc.collect()
        tracer = self.tracer
        dropped = tracer.dropped
        start = time.thread_time_ns()
        tracer.start()
        self.work()
        tracer.stop()
        elapsed = time.thread_time_ns() - start
        self.records.append(sum(len(records) for _, records in tracer.drain()) // RECORD.size)
        self.dropped += tracer.dropped - dropped
        return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds (default %(default)s)")
    parser.add_argument("--fib", type=int, default=25, help="fib(N) (default %(default)s)")
    parser.add_argument("--scale", type=int, default=6000, help="call_heavy's orders (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="2 rounds, fib(20), scale 500: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.fib, args.scale = 2, 20, 500
    if load_optional("ringtrace.client._functions") is None:
        print("the C function tracer is not built (or RINGTRACE_PURE_PYTHON is set): nothing to measure")
        return 0
    print(f"Python {sys.version.split()[0]}, {args.rounds} rounds")
    fib_calls = 2 * 121393 - 1  # fib(25) calls itself fib(26) * 2 - 1 times; sized generously below anyway
    workloads = {
        f"fib({args.fib})": (lambda: fib(args.fib), max(fib_calls, 1 << 20), False),
        "call_heavy": (lambda: call_heavy.run(args.scale), 400 * args.scale, False),
        "call_heavy+C": (lambda: call_heavy.run(args.scale), 700 * args.scale, True),
    }
    # Python 3.11 sees C calls only through a profile function (3.12 on: sys.monitoring), whose floor is measured
    profile = noop_profile.build() if sys.version_info < (3, 12) else None
    rows = []
    worst = 0.0
    for name, (work, calls_hint, builtins) in workloads.items():
        measured = Measured(work, calls_hint, builtins)
        variants = {"untraced": measured.untraced, "viztracer": measured.viztraced, "ringtrace": measured.ringtraced}
        if builtins and profile is not None:
            variants["floor"] = partial(measured.floor, profile)
        times = interleave(variants, args.rounds)
        calls = measured.records[-1]
        base = median(times["untraced"])
        viz_added = (median(times["viztracer"]) - base) / calls
        ours_added = (median(times["ringtrace"]) - base) / calls
        floor = (median(times["floor"]) - base) / calls if "floor" in times else None
        ratio = ours_added / viz_added
        worst = max(worst, ratio)
        own = "-" if floor is None else f"{ours_added - floor:.1f} / {viz_added - floor:.1f}"
        rows.append(
            [name, calls, base / calls, viz_added, ours_added, ratio, "-" if floor is None else floor, own,
             sum(measured.records), measured.dropped]
        )  # fmt: skip
        if floor is not None:
            tsc = profile.tsc_read_ns(50_000_000)
            if tsc is not None:
                print(f"a read of this CPU's time stamp counter: {tsc:.1f} ns (a traced call takes two)")
            print(
                f"{name}: a no-op profile function adds {floor:.1f} ns a call, {floor / viz_added:.2f}x viztracer's "
                f"{viz_added:.1f}: {TARGET}x would leave ringtrace {TARGET * viz_added - floor:.1f} ns of its own "
                f"(it takes {ours_added - floor:.1f}; viztracer {viz_added - floor:.1f})"
            )
    headers = [
        "workload", "calls", "untraced ns/call", "viztracer +ns", "ringtrace +ns", "ratio", "no-op profile +ns",
        "own ns: ringtrace / viztracer", "records", "dropped",
    ]  # fmt: skip
    print(table(headers, rows, title="added ns per call (median thread CPU time, traced - untraced, / calls)"))
    print(f"worst ratio ringtrace/viztracer {worst:.2f} (target <= {TARGET}): {'PASS' if worst <= TARGET else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
