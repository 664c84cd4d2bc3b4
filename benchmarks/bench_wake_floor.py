"""What a background thread's wake-up costs beside a busy program, on this machine: the floor under ringtrace's
delivery threads (issue 34's always-on cost).

A program whose main thread computes flat out for ``--seconds`` runs fresh per round, in four variants, interleaved
round-robin:

  bare wait    a plain Python thread beside it that waits 50 ms on a ``threading.Event`` and computes ``sum(range(10))``
               (the flusher's pace with nothing to do, and none of its work)
  bare sleep   the same thread at 100 Hz with ``time.sleep`` (the sampler's pace, and none of its work)
  connected    ``ringtrace.client.connect`` to a real collector subprocess, nothing recorded: the flusher and the
               streamer as they run with nothing to deliver
  sampling     connected, and sampling at 100 Hz (``sample_hz``): the sampler's passes over the main thread, and the
               flusher and streamer delivering the samples

For each thread: its CPU per wake-up in us (its CPU time over its voluntary context switches: each wait it leaves is
one), and its wake-ups a second; for the main thread, the times it waited (for the GIL a background thread took) a
second. All four in the same rounds, medians. Where a bare thread's wake costs about as much as a delivery thread's,
what those threads cost is their waking (its system calls, the GIL handed over and back, caches cold after 10-50 ms of
the main thread's work), not the Python they run, and only fewer wake-ups cut it.

    python benchmarks/bench_wake_floor.py [--rounds 5] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import collector, interleave, median, table

HERE = Path(__file__).resolve()
VARIANTS = ("bare wait", "bare sleep", "connected", "sampling")


def thread_counts() -> dict[str, tuple[float, int]]:
    """Each live thread's CPU seconds and voluntary context switches so far, by name (Linux /proc)."""
    counts = {}
    for thread in threading.enumerate():
        base = f"/proc/self/task/{thread.native_id}"
        with open(f"{base}/schedstat") as schedstat, open(f"{base}/status") as status:
            cpu = int(schedstat.read().split()[0]) / 1e9
            waits = next(int(line.split(":")[1]) for line in status if line.startswith("voluntary_ctxt_switches"))
        counts[thread.name] = (cpu, waits)
    return counts


def program(variant: str, seconds: float, address: str) -> int:
    """The measured program (a subprocess): prints each thread's CPU and waits over ``seconds`` of busy work."""
    if variant in ("bare wait", "bare sleep"):

        def wake_up() -> None:
            event = threading.Event()
            while True:
                if variant == "bare wait":
                    event.wait(0.05)
                else:
                    time.sleep(0.01)
                sum(range(10))

        threading.Thread(target=wake_up, name="bare", daemon=True).start()
    else:
        from ringtrace.client.connecting import connect
        from ringtrace.client.sampling.sampler import start_sampler

        timeline = connect(address, process_name="wake-floor")
        timeline.flush(timeout_s=10.0)
        if variant == "sampling":
            start_sampler(timeline, 100)
    time.sleep(0.2)  # (the threads started and settled)
    before, began = thread_counts(), time.monotonic()
    total = 0
    while time.monotonic() - began < seconds:
        for i in range(1000):
            total += i
    after, elapsed = thread_counts(), time.monotonic() - began
    print(json.dumps({
        name: (cpu - before.get(name, (0.0, 0))[0], waits - before.get(name, (0.0, 0))[1], elapsed)
        for name, (cpu, waits) in after.items()
    }))  # fmt: skip
    return 0


def run(variant: str, seconds: float, address: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HERE), "--program", variant, str(seconds), address],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=3.0, help="busy seconds a run (default %(default)s)")
    parser.add_argument("--program", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.program:
        variant, seconds, address = args.program
        return program(variant, float(seconds), address)
    with collector() as running:
        results = interleave({v: lambda v=v: run(v, args.seconds, running.tcp) for v in VARIANTS}, args.rounds)
    rows = []
    for variant, runs in results.items():
        for name in sorted({name for r in runs for name in r}, key=lambda n: (n != "MainThread", n)):
            seen = [r[name] for r in runs if name in r]
            cpu_us = median([cpu / max(waits, 1) * 1e6 for cpu, waits, _ in seen])
            rate = median([waits / elapsed for _, waits, elapsed in seen])
            share = median([cpu / elapsed for cpu, _, elapsed in seen])
            per_wake = "-" if name == "MainThread" else f"{cpu_us:.0f}"
            rows.append([variant, name, per_wake, f"{rate:.0f}", f"{share:.2%}"])
    print(
        table(
            ["variant", "thread", "CPU us a wake-up", "waits a second", "CPU share of a core"],
            rows,
            f"A background thread's wake-up beside a busy main thread, {args.rounds} rounds of {args.seconds:g} s",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
