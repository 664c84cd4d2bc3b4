"""What recording with no code change costs a realistic program: ``ringtrace run``'s defaults (every integration,
sampling at 100 Hz) against the same program under plain ``python``, in one run.

Two programs (``workloads/``), each run fresh per round, the variants interleaved round-robin:

  cpu mix        ``cpu_mix.py``: JSON, regular expressions, dataclasses, sorting, a log line every ~20 ms; the time of
                 its work loop, and the CPU its process spent meanwhile (every thread's: the sampler, flusher and
                 streamer included; interpreter start and exit not counted)
  aiohttp server ``aiohttp_app.py`` loaded by ``http_load.py`` (a closed loop of keep-alive connections, never
                 traced): requests/s answered, and the server process's CPU per request (/proc, every thread's),
                 and its main thread's alone (the event loop's: what recording makes the program's own thread
                 spend, ringtrace's threads apart); it frees a large block at start, as a server that has run a
                 while has (the workload says why: without it, plain ``python`` mapped and unmapped a buffer on
                 every read, and ``ringtrace run`` did not). ``--pin`` runs the server on one core and the load and
                 the collector on the other: on two cores their sharing moves the server's CPU a request from round
                 to round

Variants: ``python`` (the baseline); ``ringtrace run`` (the defaults); ``run, no sampling`` (``--sample-hz 0``),
``run, sampling only`` (every integration off) and ``run, nothing on`` (both off: the baseline of sampling alone), to
see where a cost comes from; ``--split`` adds the aiohttp-server integration alone and every integration but it
(sampling off in both), ``--compare PYTHON`` the defaults under that interpreter's ``ringtrace`` (another install: the
code before a change), ``--batch-interval SECONDS`` the defaults with that ``--batch-interval``. Each streams to a real
collector subprocess. The cost is the ratio of medians against the baseline (time: variant / python; requests/s:
python / variant), so 1.02 is 2% slower. Target: <= 1.02 for the defaults. The CPU columns are the same ratio of CPU
spent: on a machine whose other work takes the cores, wall time and requests/s move with the scheduler from round to
round, while the CPU a program spends on its work moves far less, and what recording adds is CPU first.

For the cpu mix, two more columns: the CPU of its main thread alone (the program's own thread: what ringtrace's threads
spend is not in it, what they make it spend is), against the baseline, and how often that thread waited (voluntary
context switches: it drops the GIL to another thread and waits to take it back), a count, free of the machine's noise.
And the cost of sampling alone: ``run, sampling only`` against ``run, nothing on``, the process's CPU and the main
thread's. ``--no-server`` leaves the aiohttp server out (more rounds of the cpu mix in the same time), ``--server-only``
the cpu mix.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from _common import (
    collector,
    compared_ringtrace,
    free_port,
    http_load,
    interleave,
    listening_server,
    median,
    process_cpu_s,
    table,
)

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
RINGTRACE = str(Path(sys.executable).with_name("ringtrace"))
TARGET = 1.02
#: The core ``--pin`` gives the server.
SERVER_CORE = 1


def variants(
    address: str, split: bool = False, compare: str | None = None, batch_interval: str | None = None
) -> dict[str, list[str]]:
    """The variants run (see the module's docstring); ``split``: the aiohttp-server integration alone and all but it,
    sampling off; ``compare``: the defaults under that interpreter's ``ringtrace`` too (another install: the code
    before a change); ``batch_interval``: the defaults with that ``--batch-interval`` too."""
    from ringtrace.client.integrations import INTEGRATIONS

    run = [RINGTRACE, "run", "--collector", address]
    every_integration_off = [f"--no-{integration.name}" for integration in INTEGRATIONS]
    chosen = {
        "python": [sys.executable],
        "ringtrace run": run,
        "run, no sampling": [*run, "--sample-hz", "0"],
        "run, sampling only": [*run, *every_integration_off],
        "run, nothing on": [*run, *every_integration_off, "--sample-hz", "0"],
    }
    if split:
        server = "--no-aiohttp-server"
        chosen["run, no sampling, no aiohttp-server"] = [*run, "--sample-hz", "0", server]
        chosen["run, aiohttp-server only"] = [
            *run,
            "--sample-hz",
            "0",
            *[o for o in every_integration_off if o != server],
        ]
    if batch_interval is not None:
        chosen[f"run, --batch-interval {batch_interval}"] = [*run, "--batch-interval", batch_interval]
    if compare is not None:
        chosen["ringtrace run (compare)"] = [str(Path(compare).with_name("ringtrace")), *run[1:]]
    return chosen


def run_cpu_mix(command: list[str], batches: int, pattern: str) -> tuple[re.Match[str], str]:
    """``workloads/cpu_mix.py`` run by ``command``: where ``pattern`` matches its output, and the output."""
    result = subprocess.run(
        [*command, str(WORKLOADS / "cpu_mix.py"), str(batches)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    match = re.search(pattern, result.stdout)
    if match is None:
        raise RuntimeError(f"cpu_mix printed no time: {result.stdout!r} {result.stderr[-2000:]!r}")
    return match, result.stdout


def cpu_mix(command: list[str], batches: int) -> tuple[float, float, float, float]:
    """Seconds of the work loop, CPU seconds of the process meanwhile, and of its main thread, and how often that
    thread waited."""
    match, _ = run_cpu_mix(command, batches, r"elapsed_s (\S+) cpu_s (\S+) main_cpu_s (\S+) main_waits (\d+)")
    return float(match.group(1)), float(match.group(2)), float(match.group(3)), float(match.group(4))


def server_rps(command: list[str], seconds: float, connections: int, pin: bool) -> tuple[float, float, float]:
    """Requests/s answered, the server's CPU us a request, and its main thread's (the event loop's: ringtrace's own
    threads apart). ``pin``: the server on the second core (this process, the load and the collector on the first)."""
    port = free_port()
    with listening_server(
        [*command, str(WORKLOADS / "aiohttp_app.py"), str(port)],
        str(command),
        preexec_fn=(lambda: os.sched_setaffinity(0, {SERVER_CORE})) if pin else None,
    ) as server:
        cpu_before, main_before = process_cpu_s(server.pid), process_cpu_s(server.pid, server.pid)
        rps = http_load(WORKLOADS, port, seconds, connections)
        per_request = 1e6 / (rps * seconds)
        main_s = process_cpu_s(server.pid, server.pid) - main_before
        return rps, (process_cpu_s(server.pid) - cpu_before) * per_request, main_s * per_request


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds (default %(default)s)")
    parser.add_argument("--batches", type=int, default=400, help="cpu mix: batches of 200 orders (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=5.0, help="server: s of load a round (default %(default)s)")
    parser.add_argument("--connections", type=int, default=8, help="aiohttp server: connections (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 100 batches, 2 s of load: a smoke test")
    parser.add_argument("--no-server", action="store_true", help="the cpu mix only")
    parser.add_argument("--server-only", action="store_true", help="the aiohttp server only (no cpu mix)")
    parser.add_argument(
        "--split", action="store_true", help="add the aiohttp-server integration alone, and all but it (no sampling)"
    )
    parser.add_argument("--compare", metavar="PYTHON", help="add the defaults under this interpreter's ringtrace")
    parser.add_argument(
        "--pin", action="store_true", help="the server on one core, the rest (load, collector) on another"
    )
    parser.add_argument("--batch-interval", metavar="SECONDS", help="add the defaults with this --batch-interval")
    args = parser.parse_args()
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2 or {0, SERVER_CORE} - os.sched_getaffinity(0):
            parser.error(f"--pin needs cores 0 and {SERVER_CORE}; this process may run on {os.sched_getaffinity(0)}")
        os.sched_setaffinity(0, {0})  # (the load and the collector, started from here, inherit it)
    if args.compare is not None:
        compared_ringtrace(parser, args.compare)
    if args.quick:
        args.rounds, args.batches, args.seconds = 2, 100, 2.0
    nan = float("nan")
    with collector() as running:
        commands = variants(running.tcp, args.split, args.compare, args.batch_interval)
        times = (
            {name: [(nan, nan, nan, nan)] for name in commands}
            if args.server_only
            else interleave({name: lambda c=c: cpu_mix(c, args.batches) for name, c in commands.items()}, args.rounds)
        )
        rps = (
            {name: [(nan, nan, nan)] for name in commands}
            if args.no_server
            else interleave(
                {
                    name: lambda c=c: server_rps(c, args.seconds, args.connections, args.pin)
                    for name, c in commands.items()
                },
                args.rounds,
            )
        )
    # Per variant, the median of each figure: cpu mix s, its CPU s, its main thread's CPU s and waits; req/s, us/req.
    mix = {name: [median([run[i] for run in runs]) for i in range(4)] for name, runs in times.items()}
    server = {name: [median([run[i] for run in runs]) for i in range(3)] for name, runs in rps.items()}
    base, base_server = mix["python"], server["python"]

    def costs(name: str) -> tuple[float, float, float, float, float]:
        (time_s, cpu_s, main_s, _), (rate, us, _) = mix[name], server[name]
        return (
            time_s / base[0],
            cpu_s / base[1],
            main_s / base[2],
            base_server[0] / rate,
            us / base_server[1],
        )

    rows = [
        [
            name,
            f"{mix[name][0]:.3f}",
            f"{costs(name)[0]:.3f}",
            f"{costs(name)[1]:.3f}",
            f"{costs(name)[2]:.3f}",
            f"{mix[name][3]:.0f}",
            f"{server[name][0]:,.0f}",
            f"{costs(name)[3]:.3f}",
            f"{server[name][1]:.1f}",
            f"{costs(name)[4]:.3f}",
            f"{server[name][2]:.1f}",
        ]
        for name in commands
    ]
    print(
        table(
            [
                "variant",
                "cpu mix s",
                "cost",
                "CPU cost",
                "main CPU cost",
                "main waits",
                "server req/s",
                "cost",
                "CPU us/req",
                "CPU cost",
                "main us/req",
            ],
            rows,
            f"Always-on defaults, {args.rounds} rounds (cost: x python; target <= {TARGET})",
        )
    )
    sampling, nothing = mix["run, sampling only"], mix["run, nothing on"]
    print(
        f"sampling alone (sampling only / nothing on): process CPU x{sampling[1] / nothing[1]:.3f}, main thread CPU "
        f"x{sampling[2] / nothing[2]:.3f}, main thread waits {sampling[3]:.0f} / {nothing[3]:.0f}"
    )
    wall, cpu, _, rate, per_request = costs("ringtrace run")
    for what, pair in (("wall", (wall, rate)), ("CPU", (cpu, per_request))):
        worst = max((cost for cost in pair if not math.isnan(cost)), default=math.nan)  # (nan: not run)
        verdict = "within" if worst <= TARGET else "OVER"
        print(f"defaults, {what}: worst cost {worst:.3f} ({verdict} the {TARGET} target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
