"""Peak memory of a process that records faster than it can deliver: 10M instants with 2 args, nothing listening.

Each round is a fresh subprocess that ``connect()``s, at default settings, to a port bound but not listening (a
collector that is stopped: every connection is refused), then records ``tl.instant("x", a=1, b="s")`` N times in a
loop on its main thread. Its peak RSS is the kernel's own high-water mark (``VmHWM``, reset just before the loop by
writing 5 to ``/proc/self/clear_refs``), its start the ``VmRSS`` then. What does not fit its buffer
(``max_buffered_events``) or the send queue (``max_queue_bytes``) is dropped and counted: the row says how many,
and how many were queued, at the end of the loop (the rest are in the buffer or in the flusher's hands).

The baseline is the bound the client's docs state (``docs/client.md``, "What is recorded"): peak RSS growth is
reported as a ratio of it, which must be <= 1, and the bound itself must be <= 150 MB (issue 22, target 2). The
rounds alternate between the C accelerator and the pure-Python recorder (``RINGTRACE_PURE_PYTHON=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import median, read_status_kb, recorder, table, verdict

#: What docs/client.md states a recording thread holds at most at default settings, in MB (2**20 bytes).
STATED_BOUND_MB = 140
#: Issue 22, target 2: the stated bound itself.
TARGET_BOUND_MB = 150
MB = 2**20


def child(port: int, n: int) -> None:
    """Record ``n`` instants with 2 args into a timeline connected to ``port``, where nothing listens; print a JSON
    line of what it took."""
    import ringtrace.client

    tl = ringtrace.client.connect(f"127.0.0.1:{port}", process_name="bench_client_memory")
    instant = tl.instant
    for _ in range(1000):  # the first events: the flusher and streamer threads start, the code warms up
        instant("x", a=1, b="s")
    time.sleep(0.2)
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # the peak (VmHWM) starts again from the RSS now
        reset = True
    except OSError:
        reset = False
    pid = os.getpid()
    start = read_status_kb(pid, "VmRSS")
    t0 = time.perf_counter_ns()
    for _ in range(n):
        instant("x", a=1, b="s")
    elapsed = time.perf_counter_ns() - t0
    peak = read_status_kb(pid, "VmHWM")
    (streamer,) = tl.listeners
    dropped, queued = streamer.dropped_events, streamer.queued_events
    tl.close(timeout_s=0)
    result = {
        "recorder": recorder(),
        "max_buffered_events": tl.max_buffered_events,
        "reset": reset,
        "start": start,
        "peak": peak,
        "ns_per_call": elapsed / n,
        "dropped": dropped,
        "queued": queued,
    }
    print(json.dumps(result), flush=True)


def run_child(port: int, n: int, pure_python: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("RINGTRACE_PURE_PYTHON", None)
    if pure_python:
        env["RINGTRACE_PURE_PYTHON"] = "1"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--port", str(port), "--n", str(n)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def bench(n: int, rounds: int) -> int:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # bound and never listening: connections to it are refused, and no one else gets it
    port = holder.getsockname()[1]
    results: dict[str, list[dict[str, Any]]] = {"C accelerator": [], "pure Python": []}
    try:
        for r in range(rounds):
            order = list(results) if r % 2 == 0 else list(reversed(results))
            for name in order:
                results[name].append(run_child(port, n, pure_python=name == "pure Python"))
    finally:
        holder.close()

    rows = []
    worst = 0.0
    for name, runs in results.items():
        growth = [(run["peak"] - run["start"]) / MB for run in runs]
        worst = max(worst, *growth)
        rows.append(
            (
                f"{name} (bound {runs[0]['max_buffered_events']:,} events)",
                median([run["start"] / MB for run in runs]),
                median(growth),
                max(growth),
                f"{max(growth) / STATED_BOUND_MB:.2f}x",
                median([run["ns_per_call"] for run in runs]),
                median([run["dropped"] for run in runs]),
                median([run["queued"] for run in runs]),
            )
        )
        if not all(run["reset"] for run in runs):
            print(f"{name}: /proc/self/clear_refs could not be written; the peak counts from the process's start")
    print(
        table(
            ["recorder", "start MB", "growth MB", "max growth", "max / stated", "ns/call", "dropped", "queued"],
            rows,
            title=f"bench_client_memory: {n:,} instants with 2 args, nothing listening, {rounds} rounds, medians",
        )
    )
    print()
    print(
        table(
            ["check", "value", "target"],
            [
                (
                    "peak RSS growth / stated bound",
                    f"{worst:.1f} MB / {STATED_BOUND_MB} MB = {worst / STATED_BOUND_MB:.2f}x",
                    f"<= 1x  {verdict(worst <= STATED_BOUND_MB)}",
                ),
                (
                    "stated bound",
                    f"{STATED_BOUND_MB} MB",
                    f"<= {TARGET_BOUND_MB} MB  {verdict(STATED_BOUND_MB <= TARGET_BOUND_MB)}",
                ),
            ],
        )
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000_000, help="instants per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each recorder (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="N=1,000,000 and 1 round, a smoke test")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.port, args.n)
        return 0
    return bench(1_000_000, 1) if args.quick else bench(args.n, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
