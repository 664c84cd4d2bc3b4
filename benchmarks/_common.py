"""Shared helpers for the benchmarks: a collector subprocess, interleaved timing, and table printing.

Every benchmark measures a variant and its baseline in the same process and run, interleaving the repetitions of
each (round-robin, rotating the start), so that a noisy shared machine shifts both alike; results are reported as
ratios of medians.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ringtrace.client import Streamer, Timeline, TrackInfo

T = TypeVar("T")
HOST = "127.0.0.1"
_now = time.monotonic_ns
_LISTENING = re.compile(r"(ingest|http) listening on (?:tcp|http)://([^\s:]+):(\d+)")


@dataclass
class Collector:
    """A running collector subprocess and its two bound addresses."""

    process: subprocess.Popen[str]
    tcp: str
    http: str
    log: list[str] = field(default_factory=list)

    def healthz(self, timeout_s: float = 5.0) -> dict[str, object]:
        with urllib.request.urlopen(f"http://{self.http}/healthz", timeout=timeout_s) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def stats(self, timeout_s: float = 30.0) -> dict[str, object]:
        with urllib.request.urlopen(f"http://{self.http}/stats", timeout=timeout_s) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def stored_events(self) -> int:
        return int(self.healthz()["stored_events"])  # type: ignore[call-overload]

    def lag_buckets(self) -> dict[float, float]:
        """The collector's event-loop lag histogram (``ringtrace_event_loop_lag_seconds``): upper bound -> count."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://{self.http}/metrics", timeout=30) as response:
            text = response.read().decode()
        return {
            float(sample.labels["le"]): sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "ringtrace_event_loop_lag_seconds"
            for sample in family.samples
            if sample.name.endswith("_bucket")
        }

    def loop_core_wait(self) -> tuple[float, float]:
        """(now, seconds its main thread, the event loop's, has waited for a core in all: runnable, not run), from
        /proc's schedstat; (now, nan) where there is none."""
        try:
            with open(f"/proc/{self.process.pid}/task/{self.process.pid}/schedstat") as stats:
                text = stats.read()
        except OSError:
            return time.monotonic(), math.nan
        return time.monotonic(), int(text.split()[1]) / 1e9

    def wait_stored(self, target: int, deadline_s: float, poll_s: float = 0.005) -> int:
        """Poll /healthz until ``stored_events >= target`` or the deadline passes; returns the last count."""
        end = time.monotonic() + deadline_s
        stored = self.stored_events()
        while stored < target and time.monotonic() < end:
            time.sleep(poll_s)
            stored = self.stored_events()
        return stored


@contextmanager
def collector(
    *extra_args: str,
    startup_timeout_s: float = 20.0,
    environment: dict[str, str] | None = None,
    python: str = sys.executable,
) -> Iterator[Collector]:
    """Start ``python -m ringtrace.collector`` on 127.0.0.1 with OS-chosen ports (with ``environment`` added to
    this process's), under ``python`` (another install's interpreter runs that install's collector); always stopped
    on exit."""
    cmd = [
        python,
        "-m",
        "ringtrace.collector",
        "--tcp",
        f"{HOST}:0",
        "--http",
        f"{HOST}:0",
        "--log-level",
        "INFO",
        *extra_args,
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(environment or {}))
    process = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    lines: queue.Queue[str | None] = queue.Queue()
    log: list[str] = []

    def pump() -> None:  # keep draining stderr so the collector can never block on a full pipe
        assert process.stderr is not None
        for line in process.stderr:
            log.append(line.rstrip())
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="collector-stderr", daemon=True).start()
    try:
        found: dict[str, str] = {}
        deadline = time.monotonic() + startup_timeout_s
        while len(found) < 2:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError("collector did not report its listeners in time:\n" + "\n".join(log))
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"collector exited with {process.wait()}:\n" + "\n".join(log))
            match = _LISTENING.search(line)
            if match:
                found[match.group(1)] = f"{match.group(2)}:{match.group(3)}"
        yield Collector(process, found["ingest"], found["http"], log)
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it is still there after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def compared_ringtrace(parser: argparse.ArgumentParser, python: str) -> str:
    """The ``ringtrace`` command of another install (``--compare PYTHON``: the one beside that interpreter), or the
    parser's error where there is none."""
    command = Path(python).with_name("ringtrace")
    if not os.access(command, os.X_OK):
        parser.error(f"--compare {python}: no ringtrace command beside it ({command}): install the tree there first")
    return str(command)


def free_port() -> int:
    """A port of 127.0.0.1 free a moment ago (for a workload server, which takes it as an argument)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@contextmanager
def listening_server(command: list[str], what: str, **popen: Any) -> Iterator[subprocess.Popen[str]]:
    """``command`` (a workload server) started and yielded once it printed ``listening`` (60 s at most: else
    RuntimeError naming ``what``); stopped after. ``popen``: more of ``subprocess.Popen``'s arguments."""
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **popen)
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 60
        while server.stdout.readline().strip() != "listening":
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {what}")
        yield server
    finally:
        stop_process(server)


def http_load(workloads: Path, port: int, seconds: float, connections: int) -> float:
    """``workloads/http_load.py`` run against 127.0.0.1:``port``: the requests/s answered with 200."""
    load = subprocess.run(
        [sys.executable, str(workloads / "http_load.py"), str(port), str(seconds), str(connections)],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        check=True,
    )
    return float(load.stdout.split()[1])


def wait_connected(timeline: Timeline, timeout_s: float = 15.0) -> Streamer | None:
    """The collector streamer ``connect()`` attached to ``timeline``, once connected; None if it did not connect."""
    from ringtrace.client import Streamer

    streamer = next(listener for listener in timeline.listeners if isinstance(listener, Streamer))
    deadline = time.monotonic() + timeout_s
    while not streamer.connected and time.monotonic() < deadline:
        time.sleep(0.01)
    return streamer if streamer.connected else None


class FloorSpan:
    """The floor for a span: a __slots__ context manager doing two clock reads and one list append, nothing else."""

    __slots__ = ("_append", "_name", "_t0")

    def __init__(self, append: Callable[[tuple[str, int, int]], None], name: str) -> None:
        self._append = append
        self._name = name

    def __enter__(self) -> FloorSpan:
        self._t0 = _now()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._append((self._name, self._t0, _now()))


def interleave(variants: dict[str, Callable[[], T]], rounds: int, warmup: int = 1) -> dict[str, list[T]]:
    """Run each variant once per round, rotating the order every round; returns the measured values per variant.

    Each callable does its own timing and returns the figure (ns/op, events/s, ...); warm-up rounds are discarded.
    """
    names = list(variants)
    results: dict[str, list[T]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            value = variants[name]()
            if r >= warmup:
                results[name].append(value)
    return results


def bench_main(bench: Callable[[int, int], int], doc: str | None, n: int, rounds: int, quick: tuple[int, int]) -> int:
    """The command line of a benchmark that runs ``bench(n, rounds)``; ``--quick`` uses ``quick`` instead."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=n, help="iterations per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=rounds, help="measured rounds (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help=f"N={quick[0]:,} and {quick[1]} rounds, a smoke test")
    args = parser.parse_args()
    print(f"recorder: {recorder()}")
    return bench(*quick) if args.quick else bench(args.n, args.rounds)


def longest_lag(before: dict[float, float], after: dict[float, float]) -> float:
    """The least bucket bound that holds every lag observed between two readings of ``Collector.lag_buckets``: the
    longest lag, at most (the event loop is looked at every 5 ms: a stall of S seconds shows as S - 0.005 to S)."""
    observed = {bound: after[bound] - before.get(bound, 0) for bound in after}
    return min(bound for bound, count in observed.items() if count == observed[math.inf])


def core_wait_share(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The share of the time between two readings of ``Collector.loop_core_wait`` that the event loop was ready to
    run but waited for a core (its lag then is the machine's, not its own work's)."""
    return (after[1] - before[1]) / max(after[0] - before[0], 1e-9)


def process_cpu_s(pid: int, thread: int | None = None) -> float:
    """User and system CPU seconds process ``pid`` has used, all its threads (/proc/PID/stat), or its thread
    ``thread`` alone (a native id: /proc/PID/task/TID/stat; its main thread's is ``pid``); nan where unread."""
    try:
        with open(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_status_kb(pid: int, field_name: str) -> int:
    """A ``kB`` field of /proc/PID/status (VmRSS, VmHWM), in bytes; 0 if it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def recorder() -> str:
    """Which recorder this process runs: the C accelerator, or the pure-Python one (``RINGTRACE_PURE_PYTHON=1``)."""
    from ringtrace.client.accelerator import speedups
    from ringtrace.wire.optional_c import PURE_PYTHON_ENV

    if speedups is not None:
        return "C accelerator"
    return f"pure Python (the C accelerator is off, {PURE_PYTHON_ENV}, or not built)"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str | None = None) -> str:
    """A plain fixed-width table; floats get sensible precision."""

    def fmt(value: object) -> str:
        if isinstance(value, float):
            if value >= 1000:
                return f"{value:,.0f}"
            if value >= 100:
                return f"{value:.1f}"
            return f"{value:.2f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        # First column left-aligned (names), the others right-aligned (numbers).
        pairs = enumerate(zip(values, widths, strict=True))
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in pairs)

    out = [title] if title else []
    out.append(line(headers))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


class ParkedListener:
    """A listener that keeps nothing, for timelines taken off the flusher's list (recording only); counts what it is
    handed, which should be nothing."""

    #: It reads no arguments: the flusher hands it instants' as the C recorder keeps them, as it does a streamer.
    packs_keywords = True

    def __init__(self) -> None:
        self.received = 0

    def receive(self, track: TrackInfo, records: Any) -> None:
        self.received += len(records) // 5 if type(records) is list else len(records)  # (a run in bytes: its events)

    def lost(self, events: int) -> None:
        pass

    def retire(self, track: TrackInfo) -> None:
        pass

    def flush(self, timeout_s: float) -> bool:
        return True

    def close(self, timeout_s: float) -> bool:
        return True

    def after_fork(self) -> None:
        return None


def serve_until_signalled(protocol: Callable[[], Any]) -> int:
    """Serve ``protocol`` on 127.0.0.1 (an OS-chosen port, printed as ``bare sink listening on tcp://HOST:PORT``) on
    uvloop until SIGINT or SIGTERM: the bare sinks the ingest benchmarks measure the collector against."""
    import asyncio
    import signal

    import uvloop

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        server = await loop.create_server(protocol, HOST, 0)
        print(f"bare sink listening on tcp://{HOST}:{server.sockets[0].getsockname()[1]}", flush=True)
        await stop.wait()
        server.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve())
    return 0
