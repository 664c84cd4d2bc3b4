"""CPU of an idle collector: what it costs the machine with no client connected and no request.

Collector subprocesses with their default settings (in memory), with a data dir (``--fsync never`` and ``interval``),
and with both OTLP receivers (``--otlp-http``, ``--otlp-grpc``) run side by side with a bare uvloop process that only
sleeps (the baseline: an interpreter and an event loop waiting). After a settling pause, each window of
``--seconds`` reads every process's CPU (the sum of its threads' run time, /proc/PID/task/*/schedstat, in ns; /proc
stat's user + system where there is none) at its start and end: ms of CPU per second of wall time. All processes are
measured over the same windows, so a busy machine delays them alike. Target: <= 5 ms/s each.

    python benchmarks/bench_idle.py                 # 3 windows of 10 s
    python benchmarks/bench_idle.py --quick         # 1 window of 3 s
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Collector, collector, median, process_cpu_s, stop_process, table, verdict

HERE = Path(__file__).resolve()
TARGET_MS_PER_S = 5.0


def cpu_ns(pid: int) -> float:
    """CPU ns process ``pid`` has run, all its threads (schedstat); /proc stat's ticks where schedstat is absent."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        for task in tasks:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as stats:
                total += int(stats.read().split()[0])  # (a thread that ended meanwhile: suppressed)
    except OSError:
        return process_cpu_s(pid) * 1e9
    return float(total) if total else process_cpu_s(pid) * 1e9


def serve_sleeping() -> int:
    """The baseline: a uvloop event loop that waits for SIGTERM and does nothing else."""
    import asyncio
    import signal

    import uvloop

    async def sleep() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print("sleeping", flush=True)
        await stop.wait()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(sleep())
    return 0


@contextlib.contextmanager
def sleeping_loop() -> Iterator[int]:
    process = subprocess.Popen(
        [sys.executable, str(HERE), "--sleep"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "sleeping":
            raise RuntimeError(f"the sleeping baseline did not start (exit {process.wait(10)})")
        yield process.pid
    finally:
        stop_process(process)


def otlp_args() -> list[str]:
    args = ["--otlp-http", "127.0.0.1:0"]
    try:
        import grpc  # noqa: F401
    except ImportError:
        print("grpc is not installed: --otlp-grpc left out")
        return args
    return [*args, "--otlp-grpc", "127.0.0.1:0"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of a measured window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between the start and the first window")
    parser.add_argument("--quick", action="store_true", help="one window of 3 s")
    parser.add_argument("--sleep", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sleep:
        return serve_sleeping()
    if args.quick:
        args.seconds, args.windows, args.settle = 3.0, 1, 1.0
    print(f"{args.windows} windows of {args.seconds:g} s, load average {os.getloadavg()[0]:.2f}")
    with contextlib.ExitStack() as stack:
        pids: dict[str, int] = {"bare uvloop, sleeping": stack.enter_context(sleeping_loop())}
        variants = {
            "collector, in memory": [],
            "collector, data dir": ["--data-dir", "{dir}"],
            "collector, data dir, --fsync interval": ["--data-dir", "{dir}", "--fsync", "interval"],
            "collector, OTLP receivers": otlp_args(),
        }
        for name, flags in variants.items():
            if "{dir}" in flags:
                data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ringtrace-idle-"))
                flags = [data_dir if flag == "{dir}" else flag for flag in flags]
            running: Collector = stack.enter_context(collector(*flags))
            pids[name] = running.process.pid
        time.sleep(args.settle)
        rates: dict[str, list[float]] = {name: [] for name in pids}
        for _ in range(args.windows):
            started = time.monotonic()
            before = {name: cpu_ns(pid) for name, pid in pids.items()}
            time.sleep(args.seconds)
            after = {name: cpu_ns(pid) for name, pid in pids.items()}
            elapsed = time.monotonic() - started
            for name in pids:
                rates[name].append((after[name] - before[name]) / 1e6 / elapsed)
    base = median(rates["bare uvloop, sleeping"])
    rows = []
    for name, values in rates.items():
        mid = median(values)
        target = "" if name.startswith("bare") else f"<= {TARGET_MS_PER_S:g} {verdict(mid <= TARGET_MS_PER_S)}"
        spread = f"{min(values):.2f}-{max(values):.2f}"
        rows.append([name, f"{mid:.2f}", spread, f"{mid - base:+.2f}" if not math.isnan(mid) else "?", target])
    print(table(["process", "CPU ms/s (median)", "windows", "vs bare", "target"], rows, "Idle CPU"))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
