"""A good client's flush round trip while other connections fill their tables: the event loop's share for table
frames (``collector/ingest/turns.py``).

Each round starts a fresh collector. A "filler" process opens ``--connections`` (40) raw connections (HELLO, then
WELCOME) and, on the go, sends on each at once, from a thread per connection, STRINGS, SCHEMA and TRACK frames to
every default table limit (--max-strings 100000 strings of 19 bytes in 1 MB frames, 1000 kinds of about 220 bytes of
text in one SCHEMA frame, --max-tracks 10000 TRACK frames of 100-byte names: 3.8 MB a connection, decoded entry by
entry, unlike EVENTS), then a FLUSH, and waits for its FLUSH_ACK. Meanwhile this process, a good client on a raw
connection of its own, sends a FLUSH every 10 ms and times each round trip to its FLUSH_ACK. The baseline: the same
probe for as long, with nothing else sent, before the filler goes. Also reported: the collector's own longest
event-loop lag (``/healthz`` ``event_loop_lag_max_ms``) after the round.

Target (the issue's): loaded max round trip <= 50 ms.

python benchmarks/bench_tables.py [--connections 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import collector, median, stop_process, table, verdict

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent / "tests" / "integration"))  # RawClient: a hand-made client, real socket
from collector_process import RawClient, hello  # noqa: E402

TARGET_MAX_S = 0.050
PROBE_INTERVAL_S = 0.01

_FILLER = """
import sys, threading, time
sys.path.insert(0, sys.argv[3])
from collector_process import RawClient, hello
from ringtrace.wire.model import THREAD_TRACK
from ringtrace.wire.frames import KindSpec, Schema, Strings, Track, encode

strings = tuple(f"{i:08d}".ljust(19, "s") for i in range(100_000))
frames = [encode(Strings(first, strings[first : first + 45_000])) for first in range(0, len(strings), 45_000)]
kinds = tuple(KindSpec(i, f"k{i}", "message", (("a", "i64"),), "t" * 200, "info") for i in range(1000))
frames.append(encode(Schema(kinds)))
frames += [encode(Track(i + 1, THREAD_TRACK, f"{i}".ljust(100, "t"), i + 1)) for i in range(10_000)]
tables = b"".join(frames)
fillers = [RawClient(sys.argv[1], hello(pid=1000 + i, instance=f"filler-{i}")) for i in range(int(sys.argv[2]))]
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()

def fill(raw):
    raw.sock.settimeout(300)
    raw.send_raw(tables)
    raw.flush()

threads = [threading.Thread(target=fill, args=(raw,)) for raw in fillers]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("done", len(tables), time.perf_counter() - started, flush=True)
"""


def probe(good: RawClient, until: threading.Event | float) -> list[float]:
    """Flush round trips every PROBE_INTERVAL_S until the event is set, or for that many seconds."""
    round_trips: list[float] = []
    deadline = time.monotonic() + until if isinstance(until, float) else float("inf")
    token = 1_000_000
    while not (until.is_set() if isinstance(until, threading.Event) else time.monotonic() > deadline):
        token += 1
        started = time.perf_counter()
        good.flush(token)
        round_trips.append(time.perf_counter() - started)
        time.sleep(PROBE_INTERVAL_S)
    return round_trips


def one_round(connections: int) -> tuple[list[float], list[float], float, float]:
    """(idle round trips, loaded round trips, loop lag max in s, the filler's time in s)."""
    # Each connection's tables are charged to --capacity (about 16 MB at every limit), all together to at most half
    # of it, each process's to its share of that half: room for all of them.
    with collector("--capacity", "2GiB") as running:
        filler = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _FILLER,
                running.tcp,
                str(connections),
                str(HERE.parent.parent / "tests" / "integration"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert filler.stdin is not None and filler.stdout is not None
            if filler.stdout.readline().strip() != "ready":
                raise RuntimeError("the filler did not connect")
            with RawClient(running.tcp, hello(pid=7, instance="good")) as good:
                good.sock.settimeout(60)
                idle = probe(good, 2.0)
                done = threading.Event()
                report: list[str] = []

                def wait_filler() -> None:
                    assert filler.stdout is not None
                    report.append(filler.stdout.readline())
                    done.set()

                waiter = threading.Thread(target=wait_filler)
                waiter.start()
                filler.stdin.write("go\n")
                filler.stdin.flush()
                loaded = probe(good, done)
                waiter.join()
            if not report or not report[0].startswith("done"):
                raise RuntimeError(f"the filler failed: {report}")
            lag_s = float(running.healthz()["event_loop_lag_max_ms"]) / 1000  # type: ignore[arg-type]
            return idle, loaded, lag_s, float(report[0].split()[2])
        finally:
            stop_process(filler)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=40, help="connections filling their tables at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="8 connections, 1 round")
    args = parser.parse_args()
    connections, rounds = (8, 1) if args.quick else (args.connections, args.rounds)
    rows = []
    worst = 0.0
    for number in range(rounds):
        idle, loaded, lag_s, fill_s = one_round(connections)
        worst = max(worst, max(loaded))
        for name, values in (("idle", idle), (f"{connections} filling", loaded)):
            ms = [v * 1000 for v in values]
            rows.append(
                (
                    f"round {number + 1}: {name}",
                    len(ms),
                    f"{median(ms):.1f}",
                    f"{quantile(ms, 0.99):.1f}",
                    f"{max(ms):.1f}",
                    f"{lag_s * 1000:.0f}" if name != "idle" else "",
                    f"{fill_s:.1f}" if name != "idle" else "",
                )
            )
        rows.append(("  ratio p50 filling / idle", "", f"{median(loaded) / median(idle):.2f}", "", "", "", ""))
    headers = ["flush round trips", "n", "p50 ms", "p99 ms", "max ms", "loop lag max ms", "fill s"]
    print(table(headers, rows, title=f"bench_tables: {connections} connections filling every table limit"))
    print(f"target (max round trip while filling <= {TARGET_MAX_S * 1000:.0f} ms): {verdict(worst <= TARGET_MAX_S)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
