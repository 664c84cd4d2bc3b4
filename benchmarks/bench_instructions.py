"""What recording adds to an aiohttp server's request, counted in instructions: a measure the machine's load does not
move.

On a shared 2-core machine the CPU a request costs moves by 10 to 25% from round to round (``bench_server_span.py``),
more than issue 34's 2% target. The instructions a request runs do not. This runs
``workloads/aiohttp_in_one_process.py`` (``aiohttp_traced_app.py``'s server and one client on one event loop, over
loopback) under ``valgrind --tool=callgrind``, ``--warmup`` requests and ``--warmup`` plus ``--requests``, and reports
the difference per request: a request's instructions, start and exit left out. The main thread's (the program's: the
server, the client, and what recording adds to them) and ringtrace's own threads' (the flusher and the streamer) are
reported apart. A collector subprocess (not under valgrind) takes the stream; a variant that records must have
stored what it sent there.

Python's random hash seed moves a run's count by about 1.5% (the layout of its dicts and sets), as much as some of
what is measured: each variant runs under each of ``--seeds`` fixed seeds (``PYTHONHASHSEED`` 0, 1, ...), and the
median and the spread over them are reported.

  none   not connected (the baseline)
  idle   connected, nothing recorded per request
  noop   a middleware that records nothing (what aiohttp's middleware chain costs)
  scope  a middleware recording a plain ``Timeline.scope`` per request (a task's lane and the scope)
  span   the aiohttp-server integration, as applied (around ``Application._handle``): a server span per request
  run    ``ringtrace run --sample-hz 0`` of the unrecorded server: every integration as the defaults apply them, no
         sampling (under valgrind a program runs about 50 times slower, so a sampler at 100 Hz would take 50 times as
         many samples a request as it does: ``bench_sampler.py`` measures the sampler)

What a count is: the user-space instructions of a thread. The kernel's (the server's system calls: 13 to 30 us of
CPU a request natively) are not in it, nor a cache miss or a wait for the interpreter lock, and the client's
instructions are in the baseline: so the instructions added are the figure, and the ratio is one of the program's
user-space instructions, not of its time. ringtrace's threads' figure a request is too high here: they sweep on a
clock (every 50 ms), and under valgrind a request lasts about 50 times as long, so a sweep's fixed part falls on far
fewer requests than natively (``bench_always_on.py`` reads their CPU). Needs ``valgrind`` (Debian: ``apt-get install
valgrind``); about 30 s a run, two runs a variant and seed.

    python benchmarks/bench_instructions.py [--requests N] [--warmup N] [--seeds N] [--variants none,span,...] [--quick]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import Collector, collector, table

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workloads" / "aiohttp_in_one_process.py"
RINGTRACE = str(Path(sys.executable).with_name("ringtrace"))
VARIANTS = ("none", "idle", "noop", "scope", "span", "run")
#: The variants that record a span a request: the collector must have stored at least that many events.
RECORDING = frozenset(("scope", "span", "run"))
_SUMMARY = re.compile(r"^summary: (\d+)", re.MULTILINE)


def instructions(valgrind: str, variant: str, requests: int, seed: int, address: str) -> tuple[int, int]:
    """The instructions of one run of the workload with ``requests`` requests, under hash seed ``seed``: its main
    thread's (the program's), and its other threads' (ringtrace's: the flusher and the streamer)."""
    if variant == "run":
        command = [RINGTRACE, "run", "--collector", address, "--sample-hz", "0", str(WORKLOAD), "none", str(requests)]
    else:
        command = [sys.executable, str(WORKLOAD), variant, str(requests), address]
    with tempfile.TemporaryDirectory() as out:
        result = subprocess.run(
            [valgrind, "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}/run", *command],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=WORKLOAD.parent,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        )
        if result.returncode != 0:
            raise RuntimeError(f"{variant}: exit {result.returncode}, {result.stderr[-2000:]}")
        threads = {}
        for path in Path(out).glob("run-*"):
            summary = _SUMMARY.search(path.read_text(errors="replace"))
            if summary is None:
                raise RuntimeError(f"{variant}: no summary in {path.name}")
            threads[int(path.name.rsplit("-", 1)[1])] = int(summary.group(1))
    main_thread = threads.pop(1)
    return main_thread, sum(threads.values())


def per_request(valgrind: str, variant: str, warmup: int, requests: int, seed: int, running: Collector) -> list[float]:
    """A request's instructions, main thread and ringtrace's threads, under hash seed ``seed``."""
    stored = running.stored_events()
    short = instructions(valgrind, variant, warmup, seed, running.tcp)
    long = instructions(valgrind, variant, warmup + requests, seed, running.tcp)
    got, spans = running.stored_events() - stored, 2 * warmup + requests
    if variant in RECORDING and got < spans:
        raise RuntimeError(f"{variant}, seed {seed}: the collector stored {got:,} events, fewer than {spans:,} spans")
    return [(b - a) / requests for a, b in zip(short, long, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000, help="requests counted (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=200, help="requests before them (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=3, help="hash seeds each variant runs under (default %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated (default: all)")
    quick = "a smoke test: none and span, 100 requests after 20, one seed (replaces those four options)"
    parser.add_argument("--quick", action="store_true", help=quick)
    args = parser.parse_args()
    if args.quick:
        args.requests, args.warmup, args.seeds, args.variants = 100, 20, 1, "none,span"
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        parser.error(f"--variants takes {', '.join(VARIANTS)}, comma-separated; got {args.variants!r}")
    least_values = (("--requests", args.requests, 1), ("--warmup", args.warmup, 0), ("--seeds", args.seeds, 1))
    for option, value, least in least_values:
        if value < least:
            parser.error(f"{option} must be at least {least}; got {value}")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("bench_instructions: valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    counts: dict[str, list[list[float]]] = {}
    with collector() as running:
        for variant in variants:
            for seed in range(args.seeds):
                program, others = per_request(valgrind, variant, args.warmup, args.requests, seed, running)
                counts.setdefault(variant, []).append([program, others])
                print(f"{variant}, seed {seed}: {program:,.0f} + {others:,.0f} instructions a request", flush=True)
    medians = {v: statistics.median(p for p, _ in runs) for v, runs in counts.items()}
    base = medians.get("none")
    rows = []
    for variant, runs in counts.items():
        programs = [p for p, _ in runs]
        spread = f"{min(programs):,.0f}-{max(programs):,.0f}"
        over = "" if base is None else f"{medians[variant] - base:+,.0f}"
        ratio = "" if base is None else f"{medians[variant] / base:.3f}"
        others = statistics.median(o for _, o in runs)
        rows.append([variant, f"{medians[variant]:,.0f}", spread, over, ratio, f"{others:,.0f}"])
    title = (
        f"aiohttp server and client in one process, {args.requests:,} requests after {args.warmup:,}, "
        f"medians of {args.seeds} hash seeds"
    )
    headers = ["recording", "main thread/request", "seeds' min-max", "added", "x none", "ringtrace's threads/request"]
    print(table(headers, rows, title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
