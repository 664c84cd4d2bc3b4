"""ns per log call with the logging integration (``ringtrace.client.integrations``, "logging") against without it.

The process is ``connect()``ed to a real collector subprocess throughout (its timeline at priority ``info``, the
default, except in the last row); the integration's hooks on ``logging.Logger`` are swapped in and out between
repetitions, so both variants of a row run interleaved in one process. A repetition is N calls then ``tl.flush()``
(the collector has acknowledged every message recorded): what the flusher and the streamer spend on the messages is
in the time.

Rows, each a logger ``bench.*`` with its own level and handler:

  info, printed        ``log.info("request %d done in %s ms", i, 12)`` on a logger at INFO whose handler formats
                       the record and writes it to a file on /dev/null: the program prints it, ringtrace records it
  info, not printed    the same call on a logger left at logging's default (WARNING): dropped by the program, so
                       at the timeline's default priority the integration leaves it to logging's level test (no
                       record is created): it should cost what it costs without the integration
  debug, off           ``log.debug(...)`` on the INFO logger: off for the program and for the timeline
  debug, at debug      the same call with the timeline's priority at ``debug`` (``set_priority``, as
                       ``POST /priority`` does) for the "with" variant: ``isEnabledFor`` is widened, the record is
                       created and recorded for ringtrace only, still not printed: the price of asking for detail

And the gc integration's cost, in the same run: an allocation-heavy loop (5 N iterations, a dict and a list each,
kept 10,000 at a time), whose young collections the garbage collector sets off by itself, with the integration's
``gc.callbacks`` entry in the list and without it: ns per iteration.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import ringtrace.client
from _common import bench_main, collector, interleave, median, table, wait_connected
from ringtrace.client.integrations import apply

_perf = time.perf_counter_ns

#: What the integration may add, as a ratio of medians (with / without).
TARGET_PRINTED_RATIO = 1.5
TARGET_DEBUG_OFF_RATIO = 1.5
#: A record the program drops, at the timeline's default priority: within noise of no integration.
TARGET_NOT_PRINTED_RATIO = 1.1


def _hooks() -> tuple[Any, Any]:
    return logging.Logger.isEnabledFor, logging.Logger.callHandlers


def _use(hooks: tuple[Any, Any]) -> None:
    logging.Logger.isEnabledFor, logging.Logger.callHandlers = hooks  # type: ignore[method-assign]


def allocate(n: int, tl: Any, callback: Callable[[str, dict[str, Any]], None] | None) -> Callable[[], float]:
    """n iterations of an allocation-heavy loop (a dict and a list each, kept a while), whose young collections the
    collector sets off by itself, then ``tl.flush()``; with ``callback`` in ``gc.callbacks`` (None: without)."""

    def run() -> float:
        if callback is not None:
            gc.callbacks.append(callback)
        kept: list[Any] = []
        start = _perf()
        for i in range(n):
            kept.append({"i": i, "v": [i, i]})
            if len(kept) == 10_000:
                kept = []
        tl.flush(60)
        elapsed = _perf() - start
        if callback is not None:
            gc.callbacks.remove(callback)
        return elapsed / n

    return run


def bench(n: int, rounds: int) -> int:
    with collector() as running, open(os.devnull, "w") as devnull:
        tl = ringtrace.client.connect(running.tcp, process_name="bench-logging")
        if wait_connected(tl) is None:
            print("did not connect to the collector", file=sys.stderr)
            return 1
        printed = logging.getLogger("bench.printed")
        printed.setLevel(logging.INFO)
        handler = logging.StreamHandler(devnull)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        printed.addHandler(handler)
        printed.propagate = False
        quiet = logging.getLogger("bench.quiet")  # logging's defaults: WARNING from the root, no handler of its own

        without = _hooks()
        apply(tl, {"logging", "gc"})
        with_integration = _hooks()
        on_collection = gc.callbacks[-1]
        gc.callbacks.remove(on_collection)
        assert with_integration != without, "the integration did not install"

        def loop(hooks: tuple[Any, Any], call: Callable[..., None], priority: str = "info") -> Callable[[], float]:
            def run() -> float:
                _use(hooks)
                tl.set_priority(priority)  # past info, the integration widens isEnabledFor (its hooks are in)
                start = _perf()
                for i in range(n):
                    call("request %d done in %s ms", i, 12)
                tl.flush(60)
                elapsed = _perf() - start
                tl.set_priority("info")  # the integration puts logging's own isEnabledFor back
                _use(without)
                return elapsed / n

            return run

        cases = {
            "info, printed": (printed.info, "info"),
            "info, not printed": (quiet.info, "info"),
            "debug, off": (printed.debug, "info"),
            "debug, at debug": (printed.debug, "debug"),
        }
        variants: dict[str, Callable[[], float]] = {}
        for case, (call, priority) in cases.items():
            variants[f"{case} | without"] = loop(without, call)
            variants[f"{case} | with"] = loop(with_integration, call, priority)
        variants["allocating | without"] = allocate(n * 5, tl, None)
        variants["allocating | with"] = allocate(n * 5, tl, on_collection)
        results = interleave(variants, rounds)
        dropped = tl.dropped_events
        tl.close()

    rows, ratios = [], {}
    for case in [*cases, "allocating"]:
        off, on = median(results[f"{case} | without"]), median(results[f"{case} | with"])
        ratios[case] = on / off
        rows.append([case, off, on, on / off])
    title = f"ns per call, N={n:,}, {rounds} rounds"
    print(table(["call", "without ns", "with ns", "with / without"], rows, title=title))
    print(f"events dropped: {dropped}")
    print(
        f"info printed: with / without {ratios['info, printed']:.2f} (target <= {TARGET_PRINTED_RATIO}); "
        f"info not printed: {ratios['info, not printed']:.2f} (target <= {TARGET_NOT_PRINTED_RATIO}); "
        f"debug off: {ratios['debug, off']:.2f} (target <= {TARGET_DEBUG_OFF_RATIO}); "
        f"debug at debug: {ratios['debug, at debug']:.2f}; allocating: {ratios['allocating']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=200_000, rounds=5, quick=(2_000, 1)))
