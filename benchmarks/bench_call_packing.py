"""Packing traced function calls into EVENTS frames: what the flusher spends per call of ``ringtrace run --functions``
on its way to the wire, in-process (no collector, no socket).

The run: ``--n`` calls (1M) as a tracer hands them over (``CallRun``: 24-byte records in bytes), over ``--locations``
(200) code locations drawn as a program's calls fall (a few hot functions, a long tail: Zipf-like), nested durations.
Variants, interleaved round-robin, each timing one whole ``StreamEncoder.encode`` of the run per round (the median of
``--rounds``), a fresh encoder each time (its tables start empty, as a new stream's):

  C calls         the run packed in C from its records' bytes (``pack_calls``): no Python object per call
  Python calls    the pure-Python path that defines the bytes: ``run.as_flat()`` (a tuple and five values a call),
                  then the Python packer (``accelerated=False``)
  C flat spans    baseline: the same spans as ordinary flat records (``SPAN, qualified name, start, end, None``, made
                  before the clock starts) through the existing C packer: what a hand-recorded span costs to pack

ns/call, and ratios to ``C flat spans``. The frames of ``C calls`` and ``Python calls`` are checked byte-equal once.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import interleave, median, table
from ringtrace.wire.call_packing import CALLS_ACCELERATED
from ringtrace.wire.call_records import CALL, CALL_RAISED, CallRun, pack_records
from ringtrace.wire.model import SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder

TRACK = TrackInfo(1, THREAD_TRACK, "MainThread", 1)


def make_run(calls: int, locations: int, seed: int = 7) -> CallRun:
    """``calls`` calls over ``locations`` code locations, Zipf-like (weight 1/rank), 1 in 50 raised."""
    rng = random.Random(seed)
    table = [
        (f"module_{i % 23}.Class_{i % 11}.method_{i}", f"/srv/app/module_{i % 23}.py", 10 + 7 * i)
        for i in range(locations)
    ]
    indexes = rng.choices(range(locations), weights=[1 / (rank + 1) for rank in range(locations)], k=calls)
    now = 10**15
    records = []
    for n, index in enumerate(indexes):
        start = now + 100 * n
        records.append((start, start + rng.randrange(50, 5_000), index, CALL_RAISED if n % 50 == 49 else CALL))
    return CallRun(pack_records(records), table)


def timed(action: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter_ns()
    action()
    return (time.perf_counter_ns() - start) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="calls per run (default %(default)s)")
    parser.add_argument("--locations", type=int, default=200, help="code locations (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="20,000 calls and 2 rounds, a smoke test")
    args = parser.parse_args()
    calls, rounds = (20_000, 2) if args.quick else (args.n, args.rounds)
    if not CALLS_ACCELERATED:
        print("the C packer is not built here (or RINGTRACE_PURE_PYTHON is set): nothing to compare")
        return 0
    run = make_run(calls, args.locations)
    spans = [
        value
        for _, name, start, end, _ in zip(*[iter(run.as_flat())] * 5, strict=True)
        for value in (SPAN, name, start, end, None)
    ]
    by_c = StreamEncoder().encode(TRACK, run)
    by_python = StreamEncoder(accelerated=False).encode(TRACK, run.as_flat())
    assert by_c.events == by_python.events and by_c.control == by_python.control, "C and Python frames differ"
    frames = len(by_c.events)
    wire_bytes = sum(len(frame) for frame, _ in by_c.events)

    variants = {
        "C calls": lambda: timed(lambda: StreamEncoder().encode(TRACK, run), calls),
        "Python calls": lambda: timed(lambda: StreamEncoder(accelerated=False).encode(TRACK, run.as_flat()), calls),
        "C flat spans": lambda: timed(lambda: StreamEncoder().encode(TRACK, spans), calls),
    }
    results = interleave(variants, rounds)
    base = median(results["C flat spans"])
    rows = [(name, median(values), median(values) / base) for name, values in results.items()]
    print(f"{calls:,} calls over {args.locations} locations: {frames} EVENTS frames, {wire_bytes / calls:.1f} B/call")
    print(table(["variant", "ns/call", "x C flat spans"], rows, title=f"median of {rounds} rounds"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
