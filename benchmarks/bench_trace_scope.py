"""ns per span of a trace (``tl.trace_scope``, ``server_span``, ``client_span``) against a plain ``tl.scope``.

Each a timeit-style loop of N iterations on a timeline whose one listener keeps nothing and which the flusher does
not drain during the loop (as bench_span's "hot" rows), interleaved round-robin:

  ringtrace scope           ``with tl.scope("work"):`` (the baseline: a scope outside any trace)
  trace scope, new trace    ``with tl.trace_scope("work"):`` outside any trace: a new trace id and span id each
  trace scope, in a trace   the same inside an open span of a trace: a child span
  server span               ``with tl.server_span("work", headers):``, headers holding a caller's ``traceparent``
  client span               ``with tl.client_span("work", headers):`` in a trace, writing ``traceparent`` into a dict

No target: where a request enters or leaves a process, what a span of a trace costs beside the request.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from itertools import repeat

from _common import ParkedListener, bench_main, interleave, median, table
from ringtrace.client import Timeline
from ringtrace.client.delivery.flusher import FLUSHER

_perf = time.perf_counter_ns
CALLER = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def bench(n: int, rounds: int) -> int:
    parked = ParkedListener()
    tl = Timeline("hot", listeners=[parked], max_buffered_events=n)  # a round fits: nothing refused
    FLUSHER.unregister(tl)

    def loop(body: Callable[[], object], in_trace: bool = False) -> Callable[[], float]:
        def run() -> float:
            outer = tl.trace_scope("request") if in_trace else None
            if outer is not None:
                outer.__enter__()
            t0 = _perf()
            for _ in repeat(None, n):
                with body():  # type: ignore[attr-defined]
                    pass
            t1 = _perf()
            if outer is not None:
                outer.__exit__(None, None, None)
            tl.drain()
            return (t1 - t0) / n

        return run

    headers: dict[str, str] = {}
    variants = {
        "ringtrace scope": loop(lambda: tl.scope("work")),
        "trace scope, new trace": loop(lambda: tl.trace_scope("work")),
        "trace scope, in a trace": loop(lambda: tl.trace_scope("work"), in_trace=True),
        "server span": loop(lambda: tl.server_span("work", CALLER)),
        "client span": loop(lambda: tl.client_span("work", headers), in_trace=True),
    }
    try:
        results = interleave(variants, rounds=rounds, warmup=1)
    finally:
        tl.remove_listener(parked)
    base = median(results["ringtrace scope"])
    rows = [[name, median(values), min(values), median(values) / base] for name, values in results.items()]
    print(table(["variant", "ns/op", "min", "x scope"], rows, title="wall ns per span, medians of the rounds"))
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 100_000, 7, (5_000, 1)))
