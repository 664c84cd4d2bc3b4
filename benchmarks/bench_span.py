"""ns per span / instant: ringtrace's hot path against a bare floor and the OpenTelemetry SDK, in one run.

Variants, each a timeit-style loop of N iterations, interleaved round-robin over several rounds:

  empty loop              ``for _ in repeat(None, n): pass`` (loop overhead, included in every other row)
  floor span              ``with FloorSpan(append, "work"):``, a __slots__ class, monotonic_ns in __enter__,
                          ``append((name, t0, t1))`` in __exit__; list cleared between rounds
  ringtrace scope         ``with tl.scope("work"):`` on the timeline ``connect()`` returns, streaming to a real
                          collector subprocess; the flusher and streamer threads drain, encode and send concurrently
                          (their GIL share is in the wall time)
  ringtrace scope (hot)   the same call on a private Timeline whose one listener keeps nothing, taken off the
                          flusher's list: recording only, nothing drains or encodes concurrently; the benchmark
                          drains the buffer between rounds (``timeline.drain()``)
  otel span               OpenTelemetry SDK: TracerProvider + BatchSpanProcessor + a no-op exporter,
                          ``with tracer.start_as_current_span("work"):``
  floor instant           ``lst.append(("tick", monotonic_ns()))``
  ringtrace instant       ``tl.instant("tick")`` (connected, as above)
  ringtrace instant (hot) the same on the never-started timeline
  ringtrace instant 2 args ``tl.instant("x", a=1, b="s")`` connected, and (hot) on the never-started timeline
  plain call              ``work()``, ``def work(): pass``: the baseline of the next three
  traced call             ``work`` under ``@traced(timeline=tl)``, connected; (hot): the same on the never-started
                          timeline
  viztracer call          ``work()`` while viztracer's tracer runs (``VizTracer(verbose=0)``, started and stopped
                          around the loop, its buffer cleared between rounds); skipped when viztracer is not installed
  ... [gc off]            diagnostics: floor span and ringtrace scope (hot) with the cyclic GC disabled

Why (hot) rows: the connected rows share the GIL with the background threads; the hot rows isolate the recording
path, and connected / hot is what the background path costs the recording thread (issue 38's target 7: <= 1.1x
for scope and instant, and what ``@traced`` adds to a call connected <= what viztracer adds). The parked listener
counts what it is handed: the summary line says so if anything reached it mid-loop.

Columns: wall ns/op of the loop (median and min of the rounds), the loop thread's own CPU ns/op
(``time.thread_time_ns``: on a machine shared with other work, steadier than the wall), and process CPU ns/op over
the loop plus the variant's flush (ringtrace: ``tl.flush()``, waiting for the collector's ack; otel:
``force_flush()``), which counts the background threads' encoding/exporting of what the loop recorded. The flush
also keeps one variant's leftover background work from spilling into the next variant's timing. GC stays enabled (as
in a real program) except in the [gc off] rows.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable
from itertools import repeat
from typing import Any

import ringtrace.client
from _common import FloorSpan, ParkedListener, bench_main, collector, interleave, median, table, verdict, wait_connected
from ringtrace.client import Timeline, traced
from ringtrace.client.delivery.flusher import FLUSHER

_now = time.monotonic_ns  # what ringtrace's timeline and FloorSpan read
_perf = time.perf_counter_ns
_cpu = time.process_time_ns
_thread = time.thread_time_ns

#: Targets, as ratios of wall medians (connected timeline / floor) and of CPU including the background threads.
TARGET_SPAN_RATIO = 1.3
TARGET_INSTANT_RATIO = 1.3
TARGET_INSTANT_CPU_RATIO = 2.5
#: Connected over hot (parked), wall medians: what the background path costs the recording thread.
TARGET_CONNECTED_RATIO = 1.1
#: What ``@traced`` adds to a call connected, over what viztracer's tracer adds.
TARGET_TRACED_RATIO = 1.0


def work() -> None:
    pass


def make_otel() -> tuple[Any, Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class NoopExporter(SpanExporter):
        exported = 0

        def export(self, spans: Any) -> SpanExportResult:
            NoopExporter.exported += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    # Default BatchSpanProcessor settings; when its queue (2048) is full it drops spans and logs a warning per
    # batch: the warning is silenced, and the drops are reported from the exporter's count.
    logging.getLogger("opentelemetry").setLevel(logging.ERROR)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NoopExporter()))
    return provider, provider.get_tracer("bench"), NoopExporter


Result = tuple[float, float, float]  # (wall ns/op, cpu ns/op incl. flush, the loop's thread cpu ns/op)


def bench(n: int, rounds: int) -> int:
    with collector() as coll:
        tl = ringtrace.client.connect(coll.tcp, process_name="bench_span")
        streamer = wait_connected(tl)
        if streamer is None:
            print("could not connect to the collector", file=sys.stderr)
            return 1

        # Recording only: a timeline whose listener keeps nothing, off the flusher's list (the flusher thread itself
        # runs, for the connected timeline). Events pile up during a loop; drained between rounds.
        parked = ParkedListener()
        hot_tl = Timeline("hot", listeners=[parked], max_buffered_events=n)  # a round fits: nothing refused
        FLUSHER.unregister(hot_tl)

        provider, tracer, exporter = make_otel()
        otel_started = 0
        floor_list: list[tuple[Any, ...]] = []

        def empty_loop() -> Result:
            c0 = _cpu()
            t0, tt0 = _perf(), _thread()
            for _ in repeat(None, n):
                pass
            t1, tt1 = _perf(), _thread()
            return (t1 - t0) / n, (_cpu() - c0) / n, (tt1 - tt0) / n

        def floor_span() -> Result:
            append = floor_list.append
            c0 = _cpu()
            t0, tt0 = _perf(), _thread()
            for _ in repeat(None, n):
                with FloorSpan(append, "work"):
                    pass
            t1, tt1 = _perf(), _thread()
            c1 = _cpu()
            floor_list.clear()
            return (t1 - t0) / n, (c1 - c0) / n, (tt1 - tt0) / n

        def gc_off(run: Callable[[], Result]) -> Callable[[], Result]:
            def wrapped() -> Result:
                gc.disable()
                try:
                    return run()
                finally:
                    gc.enable()

            return wrapped

        def ringtrace_scope(timeline: Timeline, connected: bool) -> Callable[[], Result]:
            def run() -> Result:
                tl = timeline
                c0 = _cpu()
                t0, tt0 = _perf(), _thread()
                for _ in repeat(None, n):
                    with tl.scope("work"):
                        pass
                t1, tt1 = _perf(), _thread()
                if connected and not tl.flush(timeout_s=30):
                    raise RuntimeError("flush was not acknowledged")
                c1 = _cpu()
                if not connected:
                    tl.drain()
                return (t1 - t0) / n, (c1 - c0) / n, (tt1 - tt0) / n

            return run

        def otel_span() -> Result:
            nonlocal otel_started
            otel_started += n
            start = tracer.start_as_current_span
            c0 = _cpu()
            t0, tt0 = _perf(), _thread()
            for _ in repeat(None, n):
                with start("work"):
                    pass
            t1, tt1 = _perf(), _thread()
            provider.force_flush(30_000)
            c1 = _cpu()
            return (t1 - t0) / n, (c1 - c0) / n, (tt1 - tt0) / n

        def floor_instant() -> Result:
            lst = floor_list
            c0 = _cpu()
            t0, tt0 = _perf(), _thread()
            for _ in repeat(None, n):
                lst.append(("tick", _now()))
            t1, tt1 = _perf(), _thread()
            c1 = _cpu()
            floor_list.clear()
            return (t1 - t0) / n, (c1 - c0) / n, (tt1 - tt0) / n

        def ringtrace_instant(timeline: Timeline, connected: bool) -> Callable[[], Result]:
            def run() -> Result:
                tl = timeline
                c0 = _cpu()
                t0, tt0 = _perf(), _thread()
                for _ in repeat(None, n):
                    tl.instant("tick")
                t1, tt1 = _perf(), _thread()
                if connected and not tl.flush(timeout_s=30):
                    raise RuntimeError("flush was not acknowledged")
                c1 = _cpu()
                if not connected:
                    tl.drain()
                return (t1 - t0) / n, (c1 - c0) / n, (tt1 - tt0) / n

            return run

        def ringtrace_instant_args(timeline: Timeline, connected: bool) -> Callable[[], Result]:
            def run() -> Result:
                instant = timeline.instant
                c0 = _cpu()
                t0, tt0 = _perf(), _thread()
                for _ in repeat(None, n):
                    instant("x", a=1, b="s")
                t1, tt1 = _perf(), _thread()
                if connected and not timeline.flush(timeout_s=30):
                    raise RuntimeError("flush was not acknowledged")
                c1 = _cpu()
                if not connected:
                    timeline.drain()
                return (t1 - t0) / n, (c1 - c0) / n, (tt1 - tt0) / n

            return run

        def calls(function: Callable[[], None], timeline: Timeline | None, connected: bool) -> Callable[[], Result]:
            def run() -> Result:
                c0 = _cpu()
                t0, tt0 = _perf(), _thread()
                for _ in repeat(None, n):
                    function()
                t1, tt1 = _perf(), _thread()
                if connected and timeline is not None and not timeline.flush(timeout_s=30):
                    raise RuntimeError("flush was not acknowledged")
                c1 = _cpu()
                if not connected and timeline is not None:
                    timeline.drain()
                return (t1 - t0) / n, (c1 - c0) / n, (tt1 - tt0) / n

            return run

        try:
            from viztracer import VizTracer

            viz: Any = VizTracer(verbose=0)
        except ImportError:
            viz = None

        def viztracer_call() -> Result:
            viz.start()
            c0 = _cpu()
            t0, tt0 = _perf(), _thread()
            for _ in repeat(None, n):
                work()
            t1, tt1 = _perf(), _thread()
            c1 = _cpu()
            viz.stop()
            viz.clear()
            return (t1 - t0) / n, (c1 - c0) / n, (tt1 - tt0) / n

        variants: dict[str, Callable[[], Result]] = {
            "empty loop": empty_loop,
            "floor span": floor_span,
            "ringtrace scope": ringtrace_scope(tl, True),
            "ringtrace scope (hot)": ringtrace_scope(hot_tl, False),
            "otel span": otel_span,
            "floor instant": floor_instant,
            "ringtrace instant": ringtrace_instant(tl, True),
            "ringtrace instant (hot)": ringtrace_instant(hot_tl, False),
            "ringtrace instant 2 args": ringtrace_instant_args(tl, True),
            "ringtrace instant 2 args (hot)": ringtrace_instant_args(hot_tl, False),
            "plain call": calls(work, None, False),
            "traced call": calls(traced(timeline=tl)(work), tl, True),
            "traced call (hot)": calls(traced(timeline=hot_tl)(work), hot_tl, False),
            # Diagnostics: the same loops with the cyclic GC off, to show what GC costs each side.
            "floor span [gc off]": gc_off(floor_span),
            "ringtrace scope (hot) [gc off]": gc_off(ringtrace_scope(hot_tl, False)),
        }
        if viz is not None:
            variants["viztracer call"] = viztracer_call
        try:
            results = interleave(variants, rounds=rounds, warmup=1)
        finally:
            provider.shutdown()
            delivered = tl.close(timeout_s=30)
            hot_tl.remove_listener(parked)
        stored = coll.stored_events()

    wall = {k: median([r[0] for r in v]) for k, v in results.items()}
    wall_min = {k: min(r[0] for r in v) for k, v in results.items()}
    cpu = {k: median([r[1] for r in v]) for k, v in results.items()}
    own = {k: median([r[2] for r in v]) for k, v in results.items()}
    loop = wall["empty loop"]

    def base(name: str) -> str:
        if "call" in name:
            return "plain call"
        if "[gc off]" in name:
            return "floor span [gc off]"
        return "floor instant" if "instant" in name else "floor span"

    rows = []
    for name in variants:
        ratio = "" if name == "empty loop" else f"{wall[name] / wall[base(name)]:.2f}x"
        cpu_ratio = "" if name == "empty loop" else f"{cpu[name] / cpu[base(name)]:.2f}x"
        rows.append((name, wall[name], wall_min[name], wall[name] - loop, own[name], cpu[name], ratio, cpu_ratio))
    print(
        table(
            ["variant", "wall ns/op", "min", "net of loop", "thread cpu", "cpu ns/op+flush", "wall/floor", "cpu/floor"],
            rows,
            title=f"bench_span: N={n:,} per round, {rounds} interleaved rounds (+1 warm-up), medians",
        )
    )

    span_ratio = wall["ringtrace scope"] / wall["floor span"]
    instant_ratio = wall["ringtrace instant"] / wall["floor instant"]
    instant_cpu_ratio = cpu["ringtrace instant"] / cpu["floor instant"]
    hot_ratio = wall["ringtrace scope (hot)"] / wall["floor span"]
    net_ratio = (wall["ringtrace scope"] - loop) / (wall["floor span"] - loop)

    def target(limit: float, value: float) -> str:
        return f"<= {limit}x  {verdict(value <= limit)}"

    print()
    print(
        table(
            ["ratio (medians)", "value", "target"],
            [
                ("ringtrace scope / floor span", f"{span_ratio:.2f}x", target(TARGET_SPAN_RATIO, span_ratio)),
                ("  same, net of loop overhead", f"{net_ratio:.2f}x", ""),
                ("ringtrace scope (hot) / floor span", f"{hot_ratio:.2f}x", ""),
                ("otel span / ringtrace scope", f"{wall['otel span'] / wall['ringtrace scope']:.2f}x", ""),
                (
                    "ringtrace instant / floor instant",
                    f"{instant_ratio:.2f}x",
                    target(TARGET_INSTANT_RATIO, instant_ratio),
                ),
                (
                    "ringtrace instant (hot) / floor",
                    f"{wall['ringtrace instant (hot)'] / wall['floor instant']:.2f}x",
                    "",
                ),
                (
                    "ringtrace instant cpu+flush / floor cpu",
                    f"{instant_cpu_ratio:.2f}x",
                    target(TARGET_INSTANT_CPU_RATIO, instant_cpu_ratio),
                ),
                (
                    "[gc off] ringtrace scope (hot) / floor",
                    f"{wall['ringtrace scope (hot) [gc off]'] / wall['floor span [gc off]']:.2f}x",
                    "",
                ),
            ],
        )
    )
    connected_rows = []
    for name in ("ringtrace scope", "ringtrace instant", "ringtrace instant 2 args", "traced call"):
        connected = wall[name] / wall[name + " (hot)"]
        limit = "" if name == "traced call" else target(TARGET_CONNECTED_RATIO, connected)
        thread_ratio = f"{own[name] / own[name + ' (hot)']:.2f}x"
        connected_rows.append((f"{name} connected / (hot)", f"{connected:.2f}x", thread_ratio, limit))
    print()
    print(
        table(
            ["issue 38 target 7 (medians)", "wall", "thread cpu", "target (wall)"],
            connected_rows + traced_rows(wall, own),
        )
    )
    print(
        f"streamer: sent_events={streamer.sent_events:,} dropped_events={streamer.dropped_events:,} "
        f"connects={streamer.connects} close acknowledged={delivered}; collector stored_events={stored:,}"
    )
    print(f"hot timeline: events handed to its parked listener while loops ran: {parked.received:,} (expected 0)")
    dropped = otel_started - exporter.exported
    print(
        f"otel: exported {exporter.exported:,} of {otel_started:,} spans started"
        + (f" ({dropped:,} dropped by BatchSpanProcessor's default 2048-span queue)" if dropped else "")
    )
    return 0


def traced_rows(wall: dict[str, float], own: dict[str, float]) -> list[tuple[str, str, str, str]]:
    """What ``@traced`` adds to a call, connected and hot, over what viztracer adds (none without viztracer): of the
    wall time (the added ns in brackets) and of the loop thread's CPU."""
    if "viztracer call" not in wall:
        print("viztracer is not installed (pip install -e '.[bench]'): @traced was not measured against it")
        return []
    viz_added = wall["viztracer call"] - wall["plain call"]
    viz_own = own["viztracer call"] - own["plain call"]
    rows = []
    for name in ("traced call", "traced call (hot)"):
        added = wall[name] - wall["plain call"]
        ratio = added / viz_added
        limit = f"<= {TARGET_TRACED_RATIO}x  {verdict(ratio <= TARGET_TRACED_RATIO)}" if "hot" not in name else ""
        own_ratio = f"{(own[name] - own['plain call']) / viz_own:.2f}x"
        label = f"{name} adds / viztracer adds ({added:.0f} / {viz_added:.0f} ns)"
        rows.append((label, f"{ratio:.2f}x", own_ratio, limit))
    return rows


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=200_000, rounds=7, quick=(20_000, 3)))
