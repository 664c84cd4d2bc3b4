"""End-to-end throughput: ONE producer thread records N events; how fast do they end up stored in a real collector?

For each kind (spans via ``with tl.scope("work"):``, instants via ``tl.instant("tick")``) and each round:

  ringtrace  t0 -> record N events as fast as possible -> ``tl.flush(timeout_s=60)`` -> poll GET /healthz until
             ``stored_events`` has grown by N (deadline 60 s). e2e events/s = N / (time from the first record until
             the poll saw them all). CPU/event = ``time.process_time()`` delta of this whole process (producer,
             flusher and streamer threads, and the health polls) / N. The collector's own CPU is not counted (other
             process).
  floor      the same producer loop appending to a bare list (FloorSpan / ``lst.append((name, monotonic_ns()))``).

Rounds of the two are interleaved; medians are reported, with the ratio ringtrace/floor.

The connection uses ``max_queue_bytes`` = 256 MiB (default 16 MiB): at a few million events/s a burst can outrun the
socket for a moment, and this benchmark measures throughput, not the drop policy; for the same reason the timeline
may buffer 16M events per track (default 1M). ``dropped_events`` is reported; the
collector runs with ``--capacity 2GiB`` so its ring never overwrites what we count.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from itertools import repeat
from typing import Any

import ringtrace.client
from _common import Collector, FloorSpan, bench_main, collector, interleave, median, table, verdict, wait_connected
from ringtrace.client import Streamer, Timeline

_now = time.monotonic_ns
_perf = time.perf_counter
_cpu = time.process_time

#: Targets: end-to-end events/s from one producer thread, and process CPU per event (all threads) / the floor's.
TARGET_EVENTS_PER_S = 1_500_000
TARGET_CPU_RATIO = 2.5
MAX_QUEUE_BYTES = 256 * 1024 * 1024
MAX_BUFFERED_EVENTS = 16_000_000


def ringtrace_run(tl: Timeline, streamer: Streamer, coll: Collector, kind: str, n: int) -> dict[str, float]:
    base = coll.stored_events()
    dropped0 = streamer.dropped_events
    c0 = _cpu()
    t0 = _perf()
    if kind == "span":
        for _ in repeat(None, n):
            with tl.scope("work"):
                pass
    else:
        for _ in repeat(None, n):
            tl.instant("tick")
    t_loop = _perf()
    acked = tl.flush(timeout_s=60)
    t_flush = _perf()
    stored = coll.wait_stored(base + n, deadline_s=60) - base
    t_end = _perf()
    c_end = _cpu()
    if stored < n:
        print(f"WARNING: collector stored {stored:,} of {n:,} {kind}s (flush acked: {acked})", file=sys.stderr)
    return {
        "loop_rate": n / (t_loop - t0),
        "e2e_rate": stored / (t_end - t0),
        "cpu_ns": (c_end - c0) * 1e9 / n,
        "flush_s": t_flush - t_loop,
        "tail_s": t_end - t_loop,
        "dropped": streamer.dropped_events - dropped0,
        "missing": n - stored,
    }


def floor_run(kind: str, n: int) -> dict[str, float]:
    lst: list[tuple[Any, ...]] = []
    c0 = _cpu()
    t0 = _perf()
    if kind == "span":
        append = lst.append
        for _ in repeat(None, n):
            with FloorSpan(append, "work"):
                pass
    else:
        for _ in repeat(None, n):
            lst.append(("tick", _now()))
    t1 = _perf()
    c1 = _cpu()
    del lst
    return {"loop_rate": n / (t1 - t0), "cpu_ns": (c1 - c0) * 1e9 / n}


def bench(n: int, rounds: int) -> int:
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with collector("--capacity", "2GiB") as coll:
        tl = ringtrace.client.connect(coll.tcp, process_name="bench_e2e", max_queue_bytes=MAX_QUEUE_BYTES)
        tl.max_buffered_events = MAX_BUFFERED_EVENTS  # a burst is measured, not the drop policy
        streamer = wait_connected(tl)
        if streamer is None:
            print("could not connect to the collector", file=sys.stderr)
            return 1
        try:
            for kind in ("span", "instant"):
                # Warm up both paths on a small N, then measure.
                ringtrace_run(tl, streamer, coll, kind, min(n, 50_000))
                floor_run(kind, min(n, 50_000))

                def variants(k: str) -> dict[str, Callable[[], dict[str, float]]]:
                    return {
                        "ringtrace": lambda: ringtrace_run(tl, streamer, coll, k, n),
                        "floor": lambda: floor_run(k, n),
                    }

                results[kind] = interleave(variants(kind), rounds=rounds, warmup=0)
        finally:
            delivered = tl.close(timeout_s=30)
        health = coll.healthz()

    rows = []
    summary = []
    for kind, by_variant in results.items():
        rt, fl = by_variant["ringtrace"], by_variant["floor"]
        rt_e2e = median([r["e2e_rate"] for r in rt])
        rt_loop = median([r["loop_rate"] for r in rt])
        rt_cpu = median([r["cpu_ns"] for r in rt])
        fl_loop = median([r["loop_rate"] for r in fl])
        fl_cpu = median([r["cpu_ns"] for r in fl])
        rows.append(
            (
                f"{kind}s ringtrace",
                rt_loop,
                rt_e2e,
                min(r["e2e_rate"] for r in rt),
                rt_cpu,
                median([r["tail_s"] for r in rt]) * 1e3,
                int(sum(r["dropped"] for r in rt)),
                int(sum(r["missing"] for r in rt)),
            )
        )
        rows.append((f"{kind}s floor", fl_loop, "", "", fl_cpu, "", "", ""))
        summary.append((f"{kind}s: ringtrace e2e / floor loop rate", f"{rt_e2e / fl_loop:.2f}x", ""))
        summary.append((f"{kind}s: ringtrace loop / floor loop rate", f"{rt_loop / fl_loop:.2f}x", ""))
        cpu_ratio = rt_cpu / fl_cpu
        summary.append(
            (
                f"{kind}s: ringtrace cpu / floor cpu per event",
                f"{cpu_ratio:.2f}x",
                f"<= {TARGET_CPU_RATIO}x  {verdict(cpu_ratio <= TARGET_CPU_RATIO)}" if kind == "instant" else "",
            )
        )
        summary.append(
            (
                f"{kind}s: ringtrace e2e events/s",
                f"{rt_e2e:,.0f}",
                f">= {TARGET_EVENTS_PER_S:,}  {verdict(rt_e2e >= TARGET_EVENTS_PER_S)}" if kind == "span" else "",
            )
        )
    print(
        table(
            [
                "variant",
                "loop ev/s",
                "e2e ev/s",
                "e2e min",
                "cpu ns/ev",
                "flush+poll ms",
                "dropped",
                "missing",
            ],
            rows,
            title=f"bench_e2e: N={n:,} events per round, one producer thread, {rounds} interleaved rounds, medians",
        )
    )
    print()
    print(table(["ratio (medians)", "value", "target"], summary))
    print(
        f"max_queue_bytes={MAX_QUEUE_BYTES:,}; streamer: sent_events={streamer.sent_events:,} "
        f"dropped_events={streamer.dropped_events:,} dropped_frames={streamer.dropped_frames:,} "
        f"connects={streamer.connects} close acknowledged={delivered}; "
        f"collector stored_events={health['stored_events']:,} used_bytes={health['used_bytes']:,}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=2_000_000, rounds=3, quick=(200_000, 2)))
