"""Collector CPU for what it ingests: per event with small EVENTS frames against large ones, and per short connection.

The streams are recorded once through the client's stream encoder (``bench_ingest.record_stream``: spans with a few
labels and small args on 4 threads), cut in two frame shapes: "large" (64 KiB frames of up to 3400 events) and
"small" (8 events a frame, about 160 bytes). They are replayed from raw sockets in this process (the collector is a
subprocess with a core to itself as far as two cores allow) and the collector's CPU time is read from
``/proc/PID/stat`` (user + system, all its threads, kernel receive work included) before and after each round:

  large    one connection: HELLO, WELCOME, then, counted: the tables, the large EVENTS frames over and over, a FLUSH,
           its FLUSH_ACK. CPU / events.
  small    the same with the small frames. CPU / events; the target is the ratio small / large (medians).
  small apart  the same, a send per frame (TCP_NODELAY): frames that come a few at a time, as from quiet clients.
  ..., bare sink   large and small apart also to the bare sink below (what reading the bytes costs by itself).
  short    ``--short`` connections, ``--short-threads`` at a time, each: connect, preamble + HELLO (a process of its
           own), WELCOME, the tables and the first 4 small EVENTS frames, FLUSH, FLUSH_ACK, close; the round ends
           once ``/healthz`` says no connection is open. CPU / connection, against the issue's absolute bound.
  short bare   the same connections to a bare uvloop BufferedProtocol in its own subprocess that answers the first
           read with a WELCOME and a read that ends with the FLUSH with its FLUSH_ACK, and keeps nothing: what
           accepting, reading, answering and closing cost by themselves (kernel included).

The rounds are interleaved (rotating the order); each large and small round gets enough events to take
``--round-cpu-s`` of collector CPU at its warm-up's rate (the clock tick is 10 ms). Targets: CPU per event with small
frames <= 3x that with large frames; CPU per short connection <= 100 us.

Examples:
  python benchmarks/bench_ingest_cpu.py --quick
  python benchmarks/bench_ingest_cpu.py --rounds 5 --short 2000
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from _common import (
    Collector,
    collector,
    interleave,
    median,
    recorder,
    serve_until_signalled,
    stop_process,
    table,
    verdict,
)
from bench_ingest import _FLUSH_ACK, _WELCOME, Stream, _frame_index, _FrameSocket, record_stream

#: Target: collector CPU per event with small frames / with large frames (medians).
TARGET_SMALL_RATIO = 3.0
#: Target: collector CPU per short connection, in microseconds.
TARGET_SHORT_US = 100.0
#: Frame shapes of the two streams: name -> the client encoder's (max_frame_bytes, max_events_per_frame).
SHAPES = {"large": (64 * 1024, 3400), "small": (64 * 1024, 8)}
#: The events rounds: name -> (shape, a send per frame, to the bare sink).
VARIANTS = {
    "large": ("large", False, False),
    "large, bare sink": ("large", False, True),
    "small": ("small", False, False),
    "small apart": ("small", True, False),
    "small apart, bare sink": ("small", True, True),
}
#: The collector's --capacity.
CAPACITY_BYTES = 256 * 1024 * 1024
#: EVENTS frames a short connection sends.
SHORT_FRAMES = 4
#: The token of every FLUSH sent.
FLUSH_TOKEN = 7
SINK_READ_BYTES = 256 * 1024
HERE = Path(__file__).resolve()
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_PREAMBLE_BYTES = 8


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads, those that ended included)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S  # utime, stime (fields 14 and 15)


def hello_bytes(index: int) -> bytes:
    from ringtrace.wire.frames import Hello, encode, preamble

    hello = Hello(
        pid=2_000_000 + index,
        host="bench-ingest-cpu",
        process_name=f"bench_ingest_cpu-{index}",
        instance_id=uuid.uuid4().hex,
        boot_id="",
        monotonic_ns=time.monotonic_ns(),
        wall_ns=time.time_ns(),
        client_version="bench",
    )
    return preamble() + encode(hello)


def flush_bytes(token: int) -> bytes:
    from ringtrace.wire.frames import Flush, encode

    return encode(Flush(token))


def handshake(address: str, index: int) -> tuple[socket.socket, _FrameSocket]:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=120)
    reader = _FrameSocket(sock)
    sock.sendall(hello_bytes(index))
    reader.read_exact(_PREAMBLE_BYTES)
    frame_type, body = reader.read_frame()
    if frame_type != _WELCOME:
        raise RuntimeError(f"expected WELCOME, got frame type {frame_type:#x}: {body[:200]!r}")
    return sock, reader


def wait_ack(reader: _FrameSocket, token: int) -> None:
    while True:
        frame_type, body = reader.read_frame()
        if frame_type == _FLUSH_ACK and int.from_bytes(body[:8], "little") == token:
            return


def serve_bare_sink(welcome: bytes, flush: bytes, flush_ack: bytes) -> int:
    """The baseline of a short connection: a BufferedProtocol on uvloop that answers a connection's first read with
    ``welcome`` and a read that ends with ``flush`` with ``flush_ack``, and keeps nothing. Prints its port."""
    import asyncio

    class Sink(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buffer = bytearray(SINK_READ_BYTES)
            self.transport: asyncio.Transport | None = None
            self.welcomed = False
            self.tail = b""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

        def get_buffer(self, sizehint: int) -> memoryview:
            return memoryview(self.buffer)

        def buffer_updated(self, nbytes: int) -> None:
            assert self.transport is not None
            if not self.welcomed:
                self.welcomed = True
                self.transport.write(welcome)
            self.tail = (self.tail + self.buffer[max(0, nbytes - len(flush)) : nbytes])[-len(flush) :]
            if self.tail == flush:
                self.transport.write(flush_ack)

    return serve_until_signalled(Sink)


@contextmanager
def bare_sink() -> Iterator[tuple[str, int]]:
    """Start the bare sink subprocess; yields its address and pid; always stopped on exit."""
    from ringtrace.wire.frames import FlushAck, Welcome, encode, preamble

    welcome = preamble() + encode(Welcome(1, 1 << 20, 1000, 1000, 1000, "bare"))
    answers = [welcome, flush_bytes(FLUSH_TOKEN), encode(FlushAck(FLUSH_TOKEN))]
    process = subprocess.Popen(
        [sys.executable, str(HERE), "--bare-sink", *(answer.hex() for answer in answers)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on tcp://" not in line:
            raise RuntimeError(f"bare sink did not start (exit {process.wait(10)}): {line!r}")
        yield line.rsplit("tcp://", 1)[1].strip(), process.pid
    finally:
        stop_process(process)


class Bench:
    def __init__(self, coll: Collector, streams: dict[str, Stream]) -> None:
        self.coll, self.streams = coll, streams
        self.pid = coll.process.pid
        self.connections = 0
        #: Each stream's EVENTS frames, one by one.
        self.frames = {}
        for shape, stream in streams.items():
            ends, _ = _frame_index(stream.events)
            self.frames[shape] = [stream.events[start:end] for start, end in zip([0, *ends], ends, strict=False)]

    def _next(self) -> int:
        self.connections += 1
        return self.connections

    def events_round(
        self, shape: str, passes: int, *, apart: bool = False, bare: tuple[str, int] | None = None
    ) -> tuple[float, int]:
        """One connection sends the stream's tables and its EVENTS frames ``passes`` times (``apart``: a send per
        frame, no Nagle delay), then a FLUSH, to the collector (or ``bare``: the bare sink's address and pid);
        returns its CPU seconds from after WELCOME to the FLUSH_ACK, and the events sent."""
        stream = self.streams[shape]
        address, pid = bare if bare is not None else (self.coll.tcp, self.pid)
        sock, reader = handshake(address, self._next())
        frames = self.frames[shape] if apart else [stream.events]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            before = cpu_s(pid)
            sock.sendall(stream.prefix)
            send = sock.sendall
            for _ in range(passes):
                for frame in frames:
                    send(frame)
            sock.sendall(flush_bytes(FLUSH_TOKEN))
            wait_ack(reader, FLUSH_TOKEN)
            spent = cpu_s(pid) - before
        finally:
            sock.close()
        return spent, passes * stream.event_count

    def short_round(self, count: int, threads: int, bare: tuple[str, int] | None = None) -> tuple[float, int]:
        """``count`` short connections, ``threads`` at a time, to the collector (or ``bare``: the bare sink's
        address and pid); returns its CPU seconds until none is open, and ``count``."""
        stream = self.streams["small"]
        ends, _ = _frame_index(stream.events)
        body = stream.prefix + stream.events[: ends[SHORT_FRAMES - 1]] + flush_bytes(FLUSH_TOKEN)
        errors: list[BaseException] = []
        indexes = [self._next() for _ in range(count)]
        address, pid = bare if bare is not None else (self.coll.tcp, self.pid)
        host, port = address.rsplit(":", 1)

        def run(mine: Sequence[int]) -> None:
            try:
                for index in mine:
                    with socket.create_connection((host, int(port)), timeout=120) as sock:
                        reader = _FrameSocket(sock)
                        sock.sendall(hello_bytes(index))  # (made now: its clock readings are read as it arrives)
                        reader.read_exact(_PREAMBLE_BYTES)
                        frame_type, _ = reader.read_frame()
                        if frame_type != _WELCOME:
                            raise RuntimeError(f"expected WELCOME, got frame type {frame_type:#x}")
                        sock.sendall(body)
                        wait_ack(reader, FLUSH_TOKEN)
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=run, args=(indexes[t::threads],)) for t in range(threads)]
        before = cpu_s(pid)
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if errors:
            raise errors[0]
        if bare is None:
            deadline = time.monotonic() + 30
            while self.coll.healthz()["connections"] and time.monotonic() < deadline:
                time.sleep(0.01)
        else:  # (it cannot be asked: what is left of closing is done in far less)
            time.sleep(0.05)
        return cpu_s(pid) - before, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test of a few seconds")
    parser.add_argument("--rounds", type=int, help="measured rounds per variant (default 3, --quick 2)")
    parser.add_argument("--round-cpu-s", type=float, help="collector CPU per events round (default 1.0, --quick 0.3)")
    parser.add_argument("--short", type=int, help="short connections per round (default 2000, --quick 300)")
    parser.add_argument("--short-threads", type=int, default=4, help="short connections at a time (default 4)")
    parser.add_argument("--spans", type=int, help="spans recorded per stream (default 100000, --quick 20000)")
    parser.add_argument("--bare-sink", nargs=3, metavar="HEX", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_sink:
        return serve_bare_sink(*(bytes.fromhex(answer) for answer in args.bare_sink))
    quick = args.quick
    rounds = args.rounds or (2 if quick else 3)
    round_cpu_s = args.round_cpu_s or (0.3 if quick else 1.0)
    short = args.short or (300 if quick else 2000)
    spans = args.spans or (20_000 if quick else 100_000)

    print(f"recorder: {recorder()}")
    with tempfile.TemporaryDirectory(prefix="bench_ingest_cpu-") as tmp:
        streams = {
            shape: record_stream(shape, spans, threads=4, directory=Path(tmp), frame_shape=frame_shape)
            for shape, frame_shape in SHAPES.items()
        }
        with collector("--capacity", str(CAPACITY_BYTES)) as coll, bare_sink() as sink:
            bench = Bench(coll, streams)
            # Fill the capacity first: until it is, each segment's pages are faulted in for the first time, which
            # is a cost of the collector's first minutes (it then reuses its segments' memory), not of each event.
            large = streams["large"]
            bench.events_round("large", -(-CAPACITY_BYTES * 5 // 4 // len(large.events)))
            passes: dict[str, int] = {}
            for name, (shape, apart, to_bare) in VARIANTS.items():  # warm-up: passes that take round_cpu_s
                passes[name], spent = 1, 0.0
                while spent < round_cpu_s / 10:  # (doubling until a tenth of it)
                    passes[name] *= 2
                    spent, _ = bench.events_round(shape, passes[name], apart=apart, bare=sink if to_bare else None)
                passes[name] = max(1, round(passes[name] * round_cpu_s / spent))
            bench.short_round(min(short, 100), args.short_threads)
            bench.short_round(min(short, 100), args.short_threads, sink)

            def events(name: str) -> Callable[[], tuple[float, int]]:
                shape, apart, to_bare = VARIANTS[name]
                return lambda: bench.events_round(shape, passes[name], apart=apart, bare=sink if to_bare else None)

            variants = {name: events(name) for name in VARIANTS}
            variants["short"] = lambda: bench.short_round(short, args.short_threads)
            variants["short bare"] = lambda: bench.short_round(short, args.short_threads, sink)
            results = interleave(variants, rounds=rounds, warmup=0)
            health = coll.healthz()
            if coll.process.poll() is not None:
                print(f"the collector exited with {coll.process.returncode}", file=sys.stderr)
                return 1

    per = {name: [spent / n for spent, n in runs] for name, runs in results.items()}
    rows: list[Sequence[object]] = []
    for name, (shape, apart, _) in VARIANTS.items():
        stream = streams[shape]
        rows.append(
            (
                f"{name} frames ({stream.avg_frame_bytes:,.0f} B, {stream.event_count / stream.frames:,.1f} events"
                f"{', a send each' if apart else ''})",
                median(per[name]) * 1e9,
                min(per[name]) * 1e9,
                max(per[name]) * 1e9,
                f"{median([n for _, n in results[name]]):,.0f} events",
                median([s for s, _ in results[name]]),
            )
        )
    for name, what in (("short", "collector"), ("short bare", "bare sink")):
        rows.append(
            (
                f"short connection, {what} ({SHORT_FRAMES} small frames)",
                median(per[name]) * 1e9,
                min(per[name]) * 1e9,
                max(per[name]) * 1e9,
                f"{short:,} connections",
                median([s for s, _ in results[name]]),
            )
        )
    print()
    print(
        table(
            ["collector CPU", "ns per unit", "min", "max", "round", "CPU s"],
            rows,
            title=f"bench_ingest_cpu: {rounds} interleaved rounds, medians (CPU from /proc/PID/stat, user + system)",
        )
    )
    short_us = median(per["short"]) * 1e6
    figures: list[Sequence[object]] = []
    for name in ("small", "small apart"):
        ratio = median(per[name]) / median(per["large"])
        figures.append(
            (
                f"CPU per event, {name} / large frames",
                f"{ratio:.2f}x",
                f"<= {TARGET_SMALL_RATIO:g}x  {verdict(ratio <= TARGET_SMALL_RATIO)}",
            )
        )
    large_bare = median(per["large"]) / median(per["large, bare sink"])
    figures.append(("CPU per event, large: collector / bare sink", f"{large_bare:.2f}x", "(none)"))
    apart_bare = median(per["small apart"]) / median(per["small apart, bare sink"])
    figures.append(("CPU per event, small apart: collector / bare sink", f"{apart_bare:.2f}x", "(none)"))
    bare_us = median(per["short bare"]) * 1e6
    figures.append(("CPU per short connection, collector / bare sink", f"{short_us / bare_us:.2f}x", "(none)"))
    figures.append(
        (
            "CPU per short connection",
            f"{short_us:.0f} us",
            f"<= {TARGET_SHORT_US:g} us  {verdict(short_us <= TARGET_SHORT_US)}",
        )
    )
    print()
    print(table(["figure", "value", "target"], figures))
    print(f"/healthz after the rounds: stored {health.get('stored_events')}, overwritten "
          f"{health.get('overwritten_events')}, protocol errors {health.get('protocol_errors')}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
