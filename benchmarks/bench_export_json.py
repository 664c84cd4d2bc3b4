"""orjson vs stdlib json: encoding 10k Chrome trace event dicts (what the collector's /snapshot export produces).

Events look like ``{"name": "work", "ph": "X", "ts": 1234.567, "dur": 12.5, "pid": 1, "tid": 2, "args": {"i": 7}}``
with ts/dur/tid/args varying per event. Variants, interleaved round-robin, each timing ``--number`` encodes of the
whole list per round:

  json.dumps                    stdlib, default separators, returns str
  json.dumps compact + encode   stdlib, separators=(",", ":"), then .encode(): bytes, like orjson's output
  orjson.dumps                  returns bytes
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
from _common import interleave, median, table


def make_events(count: int) -> list[dict[str, Any]]:
    return [
        {
            "name": "work",
            "ph": "X",
            "ts": 1234.567 + i * 1.25,
            "dur": 12.5 + (i % 7) * 0.5,
            "pid": 1,
            "tid": 2 + i % 4,
            "args": {"i": i},
        }
        for i in range(count)
    ]


def bench(count: int, number: int, rounds: int) -> int:
    events = make_events(count)
    assert orjson.loads(orjson.dumps(events)) == json.loads(json.dumps(events)), "encoders disagree"

    def timed(fn: Callable[[], object]) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(number):
                fn()
            return (time.perf_counter_ns() - t0) / number / 1e6  # ms per encode of the whole list

        return run

    variants = {
        "json.dumps": timed(lambda: json.dumps(events)),
        "json.dumps compact + encode": timed(lambda: json.dumps(events, separators=(",", ":")).encode()),
        "orjson.dumps": timed(lambda: orjson.dumps(events)),
    }
    results = interleave(variants, rounds=rounds, warmup=1)
    med = {k: median(v) for k, v in results.items()}
    size = {
        "json.dumps": len(json.dumps(events).encode()),
        "json.dumps compact + encode": len(json.dumps(events, separators=(",", ":")).encode()),
        "orjson.dumps": len(orjson.dumps(events)),
    }
    rows = [
        (
            name,
            med[name],
            min(results[name]),
            count / med[name] * 1e3 / 1e6,
            size[name],
            f"{med[name] / med['orjson.dumps']:.2f}x",
        )
        for name in variants
    ]
    print(
        table(
            ["variant", "ms/encode", "min", "M events/s", "bytes", "time vs orjson"],
            rows,
            title=f"bench_export_json: {count:,} events, {number} encodes per round, {rounds} interleaved rounds",
        )
    )
    print()
    print(
        table(
            ["ratio (medians)", "value"],
            [
                ("stdlib json.dumps / orjson.dumps", f"{med['json.dumps'] / med['orjson.dumps']:.2f}x"),
                (
                    "stdlib compact+encode / orjson.dumps",
                    f"{med['json.dumps compact + encode'] / med['orjson.dumps']:.2f}x",
                ),
            ],
        )
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000, help="events in the list (default %(default)s)")
    parser.add_argument("--number", type=int, default=20, help="encodes per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="5 encodes per round, 3 rounds, for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.number, args.rounds = 5, 3
    return bench(args.events, args.number, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
