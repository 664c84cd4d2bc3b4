"""The collector's memory for connections that fill every table limit, and after they are gone.

Connections (raw sockets: preamble, HELLO, WELCOME) each declare all that the collector's default limits allow one
connection: 100,000 strings in 2 MiB of UTF-8, 10,000 tracks whose names take another 2 MiB, 1,000 kinds in 256 KiB,
then a FLUSH, one after another while the previous ones stay open. The collector's VmRSS (from /proc) is read before,
after each connection it kept, and once they all closed and their processes were forgotten (``--forget-after``).
Reported: RSS growth per connection kept, what ``/healthz`` says their tables take (``table_bytes``, counted against
the capacity), how many the collector closed for their tables, and the RSS left after they are gone.

``--texts wide`` (default) makes Python keep every text in 4 bytes a character (each ends with an emoji): the most a
byte of the limits can cost; ``--texts ascii`` the least.

Examples:
  python benchmarks/bench_table_memory.py
  python benchmarks/bench_table_memory.py --connections 120 --capacity 256MiB --texts ascii
"""

from __future__ import annotations

import argparse
import socket
import time

from _common import collector, read_status_kb, table
from ringtrace.wire.frames import Flush, FlushAck, Hello, KindSpec, Schema, Strings, Track, encode, preamble
from ringtrace.wire.model import THREAD_TRACK
from ringtrace.wire.reader import CLOSED, NEED_DATA, FrameReader

MB = 10**6
MAX_STRINGS, MAX_STRING_BYTES, MAX_TRACKS, MAX_KINDS, MAX_SCHEMA_BYTES = 100_000, 2 << 20, 10_000, 1000, 256 << 10


def text(i: int, utf8_bytes: int, wide: bool) -> str:
    if wide:  # one emoji (4 bytes of UTF-8) and Python keeps every character in 4 bytes
        return f"{i:08d}" + "a" * (utf8_bytes - 12) + "\U0001f600"
    return f"{i:08d}" + "a" * (utf8_bytes - 8)


def tables(wide: bool, per_frame: int) -> bytes:
    strings = [text(i, MAX_STRING_BYTES // MAX_STRINGS, wide) for i in range(MAX_STRINGS)]
    frames = [
        encode(Strings(first, tuple(strings[first : first + per_frame]))) for first in range(0, MAX_STRINGS, per_frame)
    ]
    frames += [
        encode(Track(i + 1, THREAD_TRACK, text(i, MAX_STRING_BYTES // MAX_TRACKS, wide), i + 1))
        for i in range(MAX_TRACKS)
    ]
    per_kind = MAX_SCHEMA_BYTES // MAX_KINDS - 4 - 10  # (its shape counts; and a name of at most 256 characters)
    kinds = [KindSpec(i + 100, text(i, per_kind, wide), "span") for i in range(MAX_KINDS)]
    frames += [encode(Schema(tuple(kinds[first : first + 50]))) for first in range(0, MAX_KINDS, 50)]
    return b"".join(frames)


def connect_and_fill(address: str, number: int, payload: bytes) -> socket.socket | None:
    """A connection that declared ``payload`` and had it acknowledged; None: the collector closed it."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    hello = Hello(10_000 + number, "bench-host", "tables", f"tables-{number}", "", 1, 2, "bench")
    reader = FrameReader("collector")
    try:
        sock.sendall(preamble() + encode(hello) + payload + encode(Flush(1)))
        while True:
            frame = reader.next_frame()
            if isinstance(frame, FlushAck):
                return sock
            if frame is CLOSED:
                raise ConnectionError
            if frame is NEED_DATA:
                data = sock.recv(65536)
                reader.receive_data(data)
    except OSError:
        sock.close()
        return None


def per_connection(table_bytes: object, kept: int) -> str:
    return "n/a" if not isinstance(table_bytes, int) else f"{table_bytes / max(kept, 1) / MB:.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--capacity", default="256MiB")
    parser.add_argument("--texts", choices=["wide", "ascii"], default="wide")
    parser.add_argument(
        "--strings-per-frame", type=int, default=1000, help="strings a STRINGS frame declares (40000: ~1 MiB frames)"
    )
    parser.add_argument("--forget-after", default="1")
    parser.add_argument("--quick", action="store_true", help="3 connections: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.connections = 3
    payload = tables(args.texts == "wide", args.strings_per_frame)
    # (No connection kept is closed as idle while the others fill their tables.)
    extra = ("--capacity", args.capacity, "--forget-after", args.forget_after, "--idle-timeout", "3600")
    with collector(*extra, "--max-connections", str(args.connections + 8)) as running:
        pid = running.process.pid
        time.sleep(0.5)
        base = read_status_kb(pid, "VmRSS")
        kept: list[socket.socket] = []
        closed = 0
        kept_rss = base
        for number in range(args.connections):
            sock = connect_and_fill(running.tcp, number, payload)
            if sock is None:
                closed += 1
                continue
            kept.append(sock)
            if not closed:
                kept_rss = read_status_kb(pid, "VmRSS")
        health = running.healthz()
        peak = read_status_kb(pid, "VmHWM")
        for sock in kept:
            sock.close()
        deadline = time.monotonic() + 60
        while running.healthz()["processes"] and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(float(args.forget_after) + 6)  # the forget timer trims the heap
        after = read_status_kb(pid, "VmRSS")
        table_bytes = health.get("table_bytes")  # (None from a collector that does not count them)
        rows = [
            ["texts", args.texts],
            ["strings per STRINGS frame", str(args.strings_per_frame)],
            ["capacity", args.capacity],
            ["RSS before", f"{base / MB:.1f} MB"],
            ["connections kept / closed for their tables", f"{len(kept)} / {closed}"],
            ["RSS growth per connection kept", f"{(kept_rss - base) / max(len(kept), 1) / MB:.1f} MB"],
            ["table_bytes per connection kept", per_connection(table_bytes, len(kept))],
            ["buffer_bytes (read buffers) per connection kept", per_connection(health.get("buffer_bytes"), len(kept))],
            ["peak RSS (VmHWM)", f"{peak / MB:.1f} MB"],
            ["RSS after they closed and were forgotten", f"{after / MB:.1f} MB"],
            ["held_bytes after", str(running.healthz()["held_bytes"])],
        ]
        print(table(["", "measured"], rows, title="collector memory at every table limit"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
