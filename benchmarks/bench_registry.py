"""The collector's registry: registering processes that share one OS pid (containers all run pid 1) against
processes with pids of their own, in one run. Constant time per process makes the ratio stay near 1 as N grows; a
linear probe per process (as before) made it grow with N.
"""

from __future__ import annotations

import sys
import time

from _common import bench_main, interleave, median, table
from ringtrace.collector.store.processes import Registry
from ringtrace.wire.frames import Hello


def register(n: int, shared_pid: bool) -> float:
    hellos = [Hello(1 if shared_pid else 1000 + i, "host", "p", f"i{i}", "boot", 10**12, 10**18, "b") for i in range(n)]
    registry = Registry()
    started = time.perf_counter()
    for hello in hellos:
        registry.known(hello)
    return (time.perf_counter() - started) / n * 1e9


def bench(n: int, rounds: int) -> int:
    rows = []
    for size in (n // 10, n):
        variants = {
            "own pids": lambda size=size: register(size, False),  # type: ignore[misc]
            "pid 1": lambda size=size: register(size, True),  # type: ignore[misc]
        }
        results = interleave(variants, rounds)
        own, shared = median(results["own pids"]), median(results["pid 1"])
        rows.append([f"{size:,} processes", own, shared, shared / own])
    print(table(["registered", "ns each, own pids", "ns each, all pid 1", "ratio"], rows))
    print("target: the ratio stays near 1 at both sizes (constant time per process)")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 50_000, 3, (5_000, 1)))
