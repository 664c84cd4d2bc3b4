"""How far a first liar of a boot moves the events of the honest processes after it: a raw client says HELLO with a
clock pairing LIE_MS later than the truth (by its wall clock, or by its monotonic clock), on another boot than the
collector's or on the collector's own; then --processes honest raw clients of the same boot each send an instant at
their monotonic "now". Reported, per case: how far from their own clocks' wall time the collector places them (min
and max over the processes, in ns), in a fresh collector each.

python benchmarks/bench_clock.py [--processes 10]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import urllib.request
from pathlib import Path

from _common import Collector, collector, table, verdict
from ringtrace.wire.frames import Flush, FlushAck, Hello, encode, preamble
from ringtrace.wire.model import INSTANT, THREAD_TRACK, TrackInfo
from ringtrace.wire.reader import CLOSED, NEED_DATA, FrameReader
from ringtrace.wire.stream_encoder import StreamEncoder

LIE_MS = 900
#: Both lies make the liar's pairing LIE_MS later than the truth.
LIES = {"wall": f"wall clock +{LIE_MS} ms", "monotonic": f"monotonic -{LIE_MS} ms"}
#: No process may move another's events by more than this (or its HELLO's delivery time, larger on loopback only
#: on an overloaded machine).
TARGET_NS = 10 * 10**6


def send_instant(address: str, hello: Hello, ts_ns: int) -> None:
    """Say ``hello``, send one instant at ``ts_ns``, and wait until the collector has it (FLUSH acknowledged)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        encoder = StreamEncoder(max_events_per_frame=64)
        batch = encoder.encode(TrackInfo(1, THREAD_TRACK, "t", 66), [INSTANT, "tick", ts_ns, ts_ns, None])
        events = b"".join([*encoder.prefix(), *batch.control, *(frame for frame, _ in batch.events)])
        sock.sendall(preamble() + encode(hello) + events + encode(Flush(1)))
        reader = FrameReader("collector")
        while True:
            frame = reader.next_frame()
            if isinstance(frame, FlushAck):
                return
            if frame is CLOSED:
                raise ConnectionError("the collector closed the connection")
            if frame is NEED_DATA:
                reader.receive_data(sock.recv(65536))


def placed_ns(running: Collector, pid: int) -> int:
    """The wall-clock ns at which the snapshot shows the instant of ``pid``."""
    with urllib.request.urlopen(f"http://{running.http}/snapshot", timeout=30) as response:
        trace = json.loads(response.read())
    (event,) = [e for e in trace["traceEvents"] if e["ph"] == "i" and e["pid"] == pid]
    return round(trace["otherData"]["clock_origin_wall_ns"] + event["ts"] * 1000)


def shifts(host: str, boot: str, lie: str, processes: int) -> list[int]:
    lie_ns = LIE_MS * 10**6
    with collector() as running:
        mono, wall = time.monotonic_ns(), time.time_ns()
        lied = (mono - lie_ns, wall) if lie == "monotonic" else (mono, wall + lie_ns)
        send_instant(running.tcp, Hello(666, host, "liar", "liar", boot, *lied, "bench"), mono)
        found = []
        for pid in range(601, 601 + processes):
            mono, wall = time.monotonic_ns(), time.time_ns()
            send_instant(running.tcp, Hello(pid, host, "honest", str(pid), boot, mono, wall, "bench"), mono)
            found.append(placed_ns(running, pid) - wall)
        return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=10, help="honest processes after the liar, per case")
    parser.add_argument("--quick", action="store_true", help="2 honest processes per case")
    args = parser.parse_args()
    processes = 2 if args.quick else args.processes
    try:
        own_boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        own_boot = ""
    cases = [("another boot", "bench-host", "bench-boot")]
    if own_boot:
        cases.append(("the collector's boot", socket.gethostname(), own_boot))
    rows = []
    for where, host, boot in cases:
        for lie in ("wall", "monotonic"):
            found = shifts(host, boot, lie, processes)
            within = max(abs(shift) for shift in found) <= TARGET_NS
            rows.append([where, LIES[lie], processes, min(found), max(found), verdict(within)])
    headers = ["liar on", "its lie", "honest", "min shift ns", "max shift ns", f"<= {TARGET_NS // 10**6} ms"]
    print(table(headers, rows, "Honest processes' events moved by a first liar of their boot"))
    return 0  # a missed target is reported, not a failure


if __name__ == "__main__":
    sys.exit(main())
