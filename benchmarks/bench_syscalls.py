"""What recording adds to an aiohttp server's request in system calls, per thread: the kernel's side of
``bench_instructions.py``, and a count the machine's load does not move much.

``bench_instructions.py`` counts user-space instructions; a system call is one instruction there, whatever it costs
the kernel, and a hand-over of the interpreter lock between threads is not in it at all. This runs the same program
(``workloads/aiohttp_in_one_process.py``: the server and one client on one event loop) under ``perf trace -s``,
``--warmup`` requests and ``--warmup`` plus ``--requests``, and reports the difference per request, by thread: the
program's thread (the server and the client) and ringtrace's own (the streamer, which owns the collector's socket,
and the flusher). The calls reported are those a recording process adds or moves:

  futex      waits and wake-ups of a lock: nearly all of them the interpreter lock handed between the program's
             thread and ringtrace's (each call of ringtrace's threads that lets go of the lock, a socket's send or a
             descriptor's check, lets the program's thread take it, and the call's return then waits for it)
  getpid     CPython 3.11's asyncio asks the pid each time it is asked for the running loop
  newfstatat the delivery threads' checks that their descriptors are still theirs (``owned_fds.py``), and more at
             start (imports: the short run's are taken off)
  poll       the streamer's waits: one a pass

A thread's calls are those of the threads in the order they started: the program's thread first, then (connected)
the streamer and the flusher; ``perf trace`` names them by thread id only. Counts move by a few percent from run to
run (a pass of ringtrace's threads runs on a clock, 50 ms, and a run's length moves with the machine's load): the
median of ``--runs`` runs is reported. Needs ``perf`` (Debian: ``apt-get install linux-perf``) and the right to trace
(root, or ``kernel.perf_event_paranoid`` at most 1).

    python benchmarks/bench_syscalls.py [--requests N] [--warmup N] [--runs N] [--variants none,scope,span]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import collector, table

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workloads" / "aiohttp_in_one_process.py"
VARIANTS = ("none", "idle", "noop", "scope", "span")
CALLS = ("futex", "getpid", "newfstatat", "poll")
THREADS = ("program", "streamer", "flusher")
_THREAD = re.compile(r"^ \S+ \((\d+)\), \d+ events")
_CALL = re.compile(r"^\s+(\w+)\s+(\d+)\s")


def calls(perf: str, variant: str, requests: int, address: str) -> dict[tuple[str, str], int]:
    """The system calls of one run with ``requests`` requests: (thread, call) -> count, threads in start order."""
    with tempfile.TemporaryDirectory() as out:
        summary = Path(out) / "summary"
        command = [sys.executable, str(WORKLOAD), variant, str(requests), address]
        result = subprocess.run(
            [perf, "trace", "-s", "-o", str(summary), *command],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=WORKLOAD.parent,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{variant}: exit {result.returncode}, {result.stderr[-2000:]}")
        by_thread: dict[int, dict[str, int]] = {}
        current: dict[str, int] | None = None
        for line in summary.read_text().splitlines():
            thread = _THREAD.match(line)
            if thread:
                current = by_thread.setdefault(int(thread.group(1)), {})
                continue
            call = _CALL.match(line)
            if call and current is not None:
                current[call.group(1)] = int(call.group(2))
    if len(by_thread) > len(THREADS):  # (named by start order: a thread more would shift the names)
        raise RuntimeError(f"{variant}: {len(by_thread)} threads, more than {', '.join(THREADS)}")
    counts: dict[tuple[str, str], int] = {}
    for name, tid in zip(THREADS, sorted(by_thread), strict=False):  # (thread ids grow in start order)
        for call_name in CALLS:
            counts[name, call_name] = by_thread[tid].get(call_name, 0)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000, help="requests counted (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=2_000, help="requests before them (default %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="runs a variant, the median reported (default %(default)s)")
    parser.add_argument("--variants", default="none,scope,span", help="comma-separated, of " + ", ".join(VARIANTS))
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        parser.error(f"--variants takes {', '.join(VARIANTS)}, comma-separated; got {args.variants!r}")
    least_values = (("--requests", args.requests, 1), ("--warmup", args.warmup, 0), ("--runs", args.runs, 1))
    for option, value, least in least_values:
        if value < least:
            parser.error(f"{option} must be at least {least}; got {value}")
    perf = shutil.which("perf")
    if perf is None:
        print("bench_syscalls: perf is not installed (Debian: apt-get install linux-perf)", file=sys.stderr)
        return 2
    rows = []
    with collector() as running:
        for variant in variants:
            runs: list[dict[tuple[str, str], float]] = []
            for _ in range(args.runs):
                short = calls(perf, variant, args.warmup, running.tcp)
                long = calls(perf, variant, args.warmup + args.requests, running.tcp)
                runs.append({key: (long[key] - short.get(key, 0)) / args.requests for key in long})
            for thread in THREADS:
                if not any((thread, call) in run for run in runs for call in CALLS):
                    continue
                medians = [statistics.median(run.get((thread, call), 0.0) for run in runs) for call in CALLS]
                rows.append([variant, thread, *(f"{m:.3f}" for m in medians)])
    title = f"system calls a request: aiohttp server and client in one process, {args.requests:,} requests"
    print(table(["recording", "thread", *CALLS], rows, f"{title}, medians of {args.runs} runs"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
