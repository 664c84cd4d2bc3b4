"""What recording adds to an aiohttp server's request, counted in instructions: a measure a busy machine does not move.

On a shared 2-core machine the CPU a request costs moves by 10 to 25% from round to round (``bench_server_span.py``),
more than issue 34's 2% target. The instructions a request runs do not. This runs
``workloads/aiohttp_in_one_process.py`` (``aiohttp_traced_app.py``'s server and one client on one event loop, over
loopback) under ``valgrind --tool=callgrind`` twice per variant, ``--warmup`` requests and ``--warmup`` plus
``--requests``, and reports the difference per request: a request's instructions, server and client, the flusher's
and streamer's threads included, start and exit left out. A collector subprocess (not under valgrind) takes the
stream.

  none   not connected (the baseline)
  idle   connected, nothing recorded per request
  noop   a middleware that records nothing (what aiohttp's middleware chain costs)
  scope  a middleware recording a plain ``Timeline.scope`` per request (a task's lane and the scope)
  span   the aiohttp-server integration's middleware: a server span per request
  run    ``ringtrace run --sample-hz 0`` of the unrecorded server: every integration as the defaults apply them, no
         sampling (under valgrind a program runs about 50 times slower, so a sampler at 100 Hz would take 50 times as
         many samples a request as it does: ``bench_sampler.py`` measures the sampler)

Cost: the main thread's instructions a request (the program's thread: the server, the client, and what recording
adds to them) over the baseline's; ringtrace's own threads (the flusher and the streamer) apart. Their figure a
request is too high here: they sweep on a clock (every 50 ms), and under valgrind a request lasts about 50 times as
long, so a sweep's fixed part falls on far fewer requests than natively (``bench_always_on.py`` reads their CPU).
Instructions are not time: a cache miss or a wait for the interpreter lock costs time and no instruction, so a ratio
here is a floor under what recording costs the program's thread, not the cost.
Needs ``valgrind`` (Debian: ``apt-get install valgrind``); about 30 s a run, two runs a variant.

    python benchmarks/bench_instructions.py [--requests N] [--warmup N] [--variants none,span,...] [--quick]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import collector, table

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workloads" / "aiohttp_in_one_process.py"
RINGTRACE = str(Path(sys.executable).with_name("ringtrace"))
VARIANTS = ("none", "idle", "noop", "scope", "span", "run")
_SUMMARY = re.compile(r"^summary: (\d+)", re.MULTILINE)


def instructions(valgrind: str, variant: str, requests: int, address: str) -> tuple[int, int]:
    """The instructions of one run of the workload with ``requests`` requests: its main thread's (the program's), and
    its other threads' (ringtrace's: the flusher and the streamer)."""
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000, help="requests counted (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=200, help="requests before them (default %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated (default: all)")
    parser.add_argument("--quick", action="store_true", help="none and span, 100 requests after 20: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.warmup, args.variants = 100, 20, "none,span"
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        parser.error(f"--variants takes {', '.join(VARIANTS)}, comma-separated; got {args.variants!r}")
    if args.requests < 1 or args.warmup < 0:
        parser.error(f"--requests must be at least 1 and --warmup at least 0; got {args.requests} and {args.warmup}")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("bench_instructions: valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    per_request: dict[str, tuple[float, float]] = {}
    with collector() as running:
        for variant in variants:
            short = instructions(valgrind, variant, args.warmup, running.tcp)
            long = instructions(valgrind, variant, args.warmup + args.requests, running.tcp)
            program, others = ((b - a) / args.requests for a, b in zip(short, long, strict=True))
            per_request[variant] = (program, others)
            print(f"{variant}: {program:,.0f} + {others:,.0f} instructions a request", flush=True)
    base = per_request["none"][0] if "none" in per_request else None
    rows = []
    for variant, (program, others) in per_request.items():
        over = "" if base is None else f"{program - base:+,.0f}"
        cost = "" if base is None else f"{program / base:.3f}"
        rows.append([variant, f"{program:,.0f}", over, cost, f"{others:,.0f}"])
    title = f"aiohttp server and client in one process, {args.requests:,} requests after {args.warmup:,}"
    headers = ["recording", "main thread/request", "over none", "cost (x none)", "ringtrace's threads/request"]
    print(table(headers, rows, title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
