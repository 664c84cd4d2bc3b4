"""What recording does to a busy server's garbage collections: how many, by generation, and how long they take,
under plain ``python`` and under ``ringtrace run``'s defaults, in one run.

A server whose requests free what they allocate rarely sets off a collection (CPython collects when the containers
allocated outnumber those freed by 700). Recording keeps each request's events in a buffer until the next drain
(every 50 ms): those that hold containers push the count over, a young collection walks the ones still tracked, and
those that survive it are promoted, until a full collection walks the whole heap: a pause of the program's thread,
met only under recording. This counts them: ``workloads/aiohttp_app.py --gc-stats`` (a ``gc.callbacks`` timer,
answered at ``GET /gc``) loaded by ``http_load.py``, the variants interleaved round-robin, each round a fresh
server. Reported per variant, the medians over rounds: requests/s, collections a second by generation, the mean time
of a young (generation 0) collection (over the rounds that had one), and the share of the time the server spent
collecting. Under ``ringtrace run``, a collection's time includes its ``gc`` integration's callback (the span it
records). ``--compare PYTHON`` adds the defaults under that interpreter's ``ringtrace`` (another install: the code
before a change).

    python benchmarks/bench_collections.py [--rounds N] [--seconds S] [--compare PYTHON] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import urllib.request
from pathlib import Path

from _common import collector, compared_ringtrace, free_port, http_load, interleave, listening_server, median, table

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
RINGTRACE = str(Path(sys.executable).with_name("ringtrace"))


def collections(port: int) -> list[list[int]]:
    """The server's collections and their time in ns so far, by generation."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/gc", timeout=30) as answer:
        counted: list[list[int]] = json.load(answer)
        return counted


def one_round(command: list[str], seconds: float, connections: int) -> list[float]:
    """Requests/s; collections a second of generations 0, 1 and 2; a young collection's mean us; the share of the
    time spent collecting, in %."""
    port = free_port()
    with listening_server([*command, str(WORKLOADS / "aiohttp_app.py"), str(port), "--gc-stats"], str(command)):
        before, started = collections(port), time.monotonic()
        rps = http_load(WORKLOADS, port, seconds, connections)
        after, elapsed = collections(port), time.monotonic() - started
    made = [after[g][0] - before[g][0] for g in range(3)]
    spent_ns = [after[g][1] - before[g][1] for g in range(3)]
    young_us = spent_ns[0] / made[0] / 1e3 if made[0] else math.nan  # (none: left out of the median)
    return [rps, *(m / elapsed for m in made), young_us, 100 * sum(spent_ns) / 1e9 / elapsed]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=10.0, help="s of load a round (default %(default)s)")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections (default %(default)s)")
    parser.add_argument("--compare", metavar="PYTHON", help="add the defaults under this interpreter's ringtrace")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 3 s: a smoke test")
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0 or args.connections < 1:
        parser.error("--rounds and --connections at least 1, --seconds above 0")
    if args.quick:
        args.rounds, args.seconds = 2, 3.0
    compared = None if args.compare is None else compared_ringtrace(parser, args.compare)
    with collector() as running:
        commands = {"python": [sys.executable], "ringtrace run": [RINGTRACE, "run", "--collector", running.tcp]}
        if compared is not None:
            commands["ringtrace run (compare)"] = [compared, "run", "--collector", running.tcp]
        runs = interleave(
            {name: lambda c=c: one_round(c, args.seconds, args.connections) for name, c in commands.items()},
            args.rounds,
        )
    rows = []
    for name, measured in runs.items():
        rps, gen0, gen1, gen2, share = (median([run[i] for run in measured]) for i in (0, 1, 2, 3, 5))
        timed = [run[4] for run in measured if not math.isnan(run[4])]
        young = f"{median(timed):.0f}" if timed else "none"
        rows.append([name, f"{rps:,.0f}", f"{gen0:.1f}", f"{gen1:.2f}", f"{gen2 * 60:.1f}", young, f"{share:.3f}"])
    print(
        table(
            ["variant", "req/s", "gen 0 /s", "gen 1 /s", "gen 2 /min", "gen 0 us", "% of time collecting"],
            rows,
            title=f"Collections of a loaded aiohttp server, {args.rounds} rounds of {args.seconds:g} s (medians)",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
