"""What the ``gc`` integration alone costs a CPU-bound program, and what its callback costs a collection.

Three parts, in one run:

  collections    how many collections ``workloads/cpu_mix.py``'s work sets off a second of its CPU (its ``batch()``
                 run in this process, counted with ``gc.get_stats()``, no callback in ``gc.callbacks``)
  callback       ns per ``gc.collect(0)`` of a near-empty young generation, in this process, on a timeline that a
                 listener drains (kept nothing), with in ``gc.callbacks``: nothing (the baseline); an empty Python
                 function (what CPython's call of any Python callback costs: its frame, the ``info`` dict it builds
                 for every start and stop); the integration's Python callback; the C one (where the accelerator is
                 built). What each adds over nothing is what it costs a collection
  cpu mix        ``cpu_mix.py`` run fresh per round, variants interleaved: plain ``python``; ``ringtrace run`` with
                 sampling off and every integration off; the same with only the ``gc`` integration on; with only
                 ``logging`` on, and with ``logging`` and ``gc``. The CPU its process spent on its work (every
                 thread's) and its work's wall time, as ratios of medians against ``python``, and the CPU of its main
                 thread and of ringtrace's flusher and streamer threads; the ``gc`` integration's own cost is gc only
                 / nothing (and logging and gc / logging only, where something else is recorded too).
                 ``--before RINGTRACE`` adds the first two ``ringtrace run`` variants run with another build's
                 ``ringtrace`` executable (the code before a change, installed apart), in the same rounds

Each ``ringtrace run`` streams to a real collector subprocess.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ringtrace.client
from _common import ParkedListener, collector, interleave, median, recorder, table
from bench_always_on import run_cpu_mix
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.integrations import gc_pauses

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
RINGTRACE = str(Path(sys.executable).with_name("ringtrace"))
#: The gc integration's own cost (gc only / nothing, CPU): well under 1%.
TARGET = 1.01

_perf = time.perf_counter_ns


def collections_per_cpu_s(batches: int) -> tuple[int, float]:
    """Collections ``cpu_mix.batch`` sets off over ``batches`` batches, and per CPU second of that work."""
    spec = importlib.util.spec_from_file_location("cpu_mix", WORKLOADS / "cpu_mix.py")
    assert spec is not None and spec.loader is not None
    cpu_mix = importlib.util.module_from_spec(spec)
    sys.modules["cpu_mix"] = cpu_mix  # its dataclass looks its module up there
    spec.loader.exec_module(cpu_mix)
    import random

    rng = random.Random(7)
    before = sum(generation["collections"] for generation in gc.get_stats())
    started = time.process_time()
    for _ in range(batches):
        cpu_mix.batch(rng, 200)
    cpu = time.process_time() - started
    count = sum(generation["collections"] for generation in gc.get_stats()) - before
    return count, count / cpu


def _empty(phase: str, info: dict[str, Any]) -> None:
    pass


def callback_costs(n: int, rounds: int) -> dict[str, float]:
    """ns per ``gc.collect(0)`` with each callback (or none) in ``gc.callbacks``, interleaved."""
    tl = ringtrace.client.Timeline("gc", [ParkedListener()], max_buffered_events=2 * n)  # a round fits
    FLUSHER.unregister(tl)  # recording only: drained between rounds, untimed
    callbacks: dict[str, Callable[[str, dict[str, Any]], None] | None] = {
        "nothing": None,
        "empty Python function": _empty,
        "integration, Python": gc_pauses._on_collection,
    }
    make_c_callback = getattr(gc_pauses, "_c_callback", None)  # a build before the C callback has none
    c_callback = make_c_callback(tl) if make_c_callback is not None else None
    if c_callback is not None:
        callbacks["integration, C"] = c_callback
    gc_pauses._timeline = tl  # the Python callback records into tl (as install() sets it), without installing

    def run(callback: Callable[[str, dict[str, Any]], None] | None) -> Callable[[], float]:
        def measure() -> float:
            if callback is not None:
                gc.callbacks.append(callback)
            try:
                start = _perf()
                for _ in range(n):
                    gc.collect(0)
                elapsed = _perf() - start
            finally:
                if callback is not None:
                    gc.callbacks.remove(callback)
            tl.drain()
            return elapsed / n

        return measure

    try:
        results = interleave({name: run(callback) for name, callback in callbacks.items()}, rounds)
    finally:
        gc_pauses._timeline = None
        tl.close(0)
    return {name: median(values) for name, values in results.items()}


def cpu_mix(command: list[str], batches: int) -> tuple[float, float, dict[str, float]]:
    """Seconds of the work loop, CPU seconds of the process meanwhile, and each thread's CPU seconds by name."""
    match, output = run_cpu_mix(command, batches, r"elapsed_s (\S+) cpu_s (\S+)")
    threads = re.search(r"thread_cpu_s (.*)", output)
    pairs = (field.rsplit("=", 1) for field in (threads.group(1).split() if threads else ()))
    return float(match.group(1)), float(match.group(2)), {name: float(spent) for name, spent in pairs}


def variants(address: str, before: str | None) -> dict[str, list[str]]:
    from ringtrace.client.integrations import INTEGRATIONS

    all_off = [f"--no-{integration.name}" for integration in INTEGRATIONS]

    def only(*names: str) -> list[str]:
        return [switch for switch in all_off if switch.removeprefix("--no-") not in names]

    commands = {"python": [sys.executable]}
    for suffix, executable in (("", RINGTRACE), (" (before)", before)):
        if executable is None:
            continue
        run = [executable, "run", "--collector", address, "--sample-hz", "0"]
        commands[f"run, nothing{suffix}"] = [*run, *all_off]
        commands[f"run, gc only{suffix}"] = [*run, *only("gc")]
    run = [RINGTRACE, "run", "--collector", address, "--sample-hz", "0"]
    commands["run, logging only"] = [*run, *only("logging")]
    commands["run, logging and gc"] = [*run, *only("logging", "gc")]
    return commands


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9, help="measured rounds (default %(default)s)")
    parser.add_argument("--batches", type=int, default=400, help="cpu mix: batches of 200 orders (default %(default)s)")
    parser.add_argument("--n", type=int, default=20_000, help="callback: collections a round (default %(default)s)")
    parser.add_argument("--before", help="the ringtrace executable of another build, run as more variants")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 50 batches, 2,000 collections: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.batches, args.n = 2, 50, 2_000
    print(f"recorder: {recorder()}")

    count, rate = collections_per_cpu_s(args.batches)
    print(f"cpu mix: {count} collections in {args.batches} batches, {rate:,.0f} a CPU second of its work")

    costs = callback_costs(args.n, args.rounds)
    base = costs["nothing"]
    rows = [[name, f"{ns:,.0f}", f"{ns - base:,.0f}", f"{(ns - base) * rate / 1e7:.3f}%"] for name, ns in costs.items()]
    print(table(["in gc.callbacks", "ns/collect(0)", "added ns", "x cpu mix rate"], rows, "Callback, per collection"))

    with collector() as running:
        commands = variants(running.tcp, args.before)
        times = interleave({name: lambda c=c: cpu_mix(c, args.batches) for name, c in commands.items()}, args.rounds)
    wall = {name: median([run[0] for run in runs]) for name, runs in times.items()}
    cpu = {name: median([run[1] for run in runs]) for name, runs in times.items()}

    def thread_ms(name: str, thread: str) -> str:
        return f"{median([run[2].get(thread, 0.0) for run in times[name]]) * 1e3:.1f}"

    rows = [
        [
            name,
            f"{wall[name]:.3f}",
            f"{wall[name] / wall['python']:.3f}",
            f"{cpu[name]:.3f}",
            f"{cpu[name] / cpu['python']:.3f}",
            *(thread_ms(name, thread) for thread in ("MainThread", "ringtrace-flusher", "ringtrace-streamer")),
        ]
        for name in commands
    ]
    headers = ["variant", "wall s", "x python", "CPU s", "x python", "main ms", "flusher ms", "streamer ms"]
    print(table(headers, rows, f"cpu mix, {args.rounds} rounds (CPU: the process's; then each thread's, medians)"))
    for suffix, nothing, gc_only in (
        ("", "run, nothing", "run, gc only"),
        (" (before)", "run, nothing (before)", "run, gc only (before)"),
        (", beside logging", "run, logging only", "run, logging and gc"),
    ):
        if gc_only in cpu:
            own = cpu[gc_only] / cpu[nothing]
            verdict = "within" if own <= TARGET else "OVER"
            print(f"gc integration{suffix}, CPU: {gc_only} / {nothing} {own:.3f} ({verdict} the {TARGET} target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
