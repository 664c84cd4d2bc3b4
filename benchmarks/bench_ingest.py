"""Collector ingest: wire MB/s into the real collector against a bare asyncio sink, and the collector's memory when
pushed far past its capacity.

Throughput (default, and ``--quick``)
  The benchmark records real client streams once (spans with a few labels and small args on several threads, through
  the client's own stream encoder), then replays them from raw sockets in a separate "blaster" process (plain
  blocking sockets, one thread per connection, ``sendall`` of pre-built chunks), so that the client is not the limit
  and the server under test has a core of its own. Each connection sends preamble + HELLO (its own instance_id),
  waits for WELCOME, and then, timed: SCHEMA, STRINGS, TRACK once, the EVENTS frames over and over (cut at a frame
  boundary) until its share of the round's bytes is sent, and a FLUSH; the clock stops at the last FLUSH_ACK.
  MB/s = wire bytes sent after the handshakes (10**6 B) / time from the first of them to the last FLUSH_ACK.

  collector   ``python -m ringtrace.collector --capacity 256MiB`` (it overwrites once full; that is fine), one
              subprocess per variant (``COLLECTOR_VARIANTS``, ``--collector-arg``, ``--data-dir``)
  bare        the baseline: an asyncio BufferedProtocol on a uvloop loop in its own subprocess that only counts what it
              reads into a 256 KiB buffer per connection; the same bytes are sent, then the blaster shuts down its
              write side and the sink answers the byte count (checked), which stops the clock
  bare ring   (``--ring-sink``) the same sink, every connection reading on into one ring of ``--capacity`` bytes, as a
              store that keeps what it reads in memory must: what keeping the bytes costs by itself, with no Python

  After a warm-up round, rounds of all targets are interleaved (rotating the order), each sized to take >= 1 s, for 1,
  8 and 100 concurrent connections and for busy (~150 KB: a streamer's defaults, 1 MiB frames of up to 8192 events),
  large (~47 KB: up to 3400 events, within 64 KiB) and small (~2 KB: 128 events) EVENTS frames; medians and the
  ratios collector / bare (target >= 0.7x) and data-dir / bare and / in memory (>= 0.5x) are reported. Three data-dir
  variants: the default ``--fsync never`` (the OS writes back; what the ring overwrites soon may never reach the disk),
  ``--fsync interval`` (everything written is synced every second in the background; acknowledgements do not wait)
  and ``--fsync flush`` (each round's FLUSH waits until what it acknowledges is on disk). Both syncing variants are
  bound by the disk's write speed, which is measured first, in the same run. While its rounds run, each collector's
  longest event-loop lag (its own ``ringtrace_event_loop_lag_seconds``, read before and after: the bucket bound that
  holds it); target for a data dir kept saturated by 100 connections: <= 20 ms. Next to it, the share of those
  rounds' time the collector's event loop waited for a core (/proc's schedstat of its main thread): on a machine the
  blaster and others keep busy, that wait makes most of the lag. And each target's CPU time (user and system, /proc's
  stat of its process) per wire byte of its rounds: what the server spends, steadier than MB/s on a machine whose
  other work takes cores from the blaster and the servers by turns.

Memory (default run after the throughput part, or ``--rss`` alone; not with ``--quick`` unless ``--rss`` is given)
  A collector with ``--capacity 64MB`` gets 10x its capacity from 8 connections, paced over 60 s; its VmRSS is read
  from /proc every 0.5 s (and VmHWM, the kernel's peak, at the end). Target: max RSS <= capacity + 64 MB.

Everything listens on and connects to 127.0.0.1; subprocesses are stopped in ``finally`` blocks.

Examples:
  python benchmarks/bench_ingest.py --quick
  python benchmarks/bench_ingest.py --connections 8 --frames small --mb 256
  python benchmarks/bench_ingest.py --collector-arg='--max-frame-size 4MiB'
  python benchmarks/bench_ingest.py --no-data-dir     # the in-memory collector against the bare sink only
  python benchmarks/bench_ingest.py --rss
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    Collector,
    collector,
    core_wait_share,
    interleave,
    longest_lag,
    median,
    process_cpu_s,
    read_status_kb,
    recorder,
    serve_until_signalled,
    stop_process,
    table,
    verdict,
)

HERE = Path(__file__).resolve()
MB = 10**6

#: Target: collector MB/s / bare sink MB/s (medians), for every connection count and frame size.
TARGET_RATIO = 0.7
#: Target: data dir MB/s / in memory MB/s, and / bare sink MB/s (medians).
DATA_DIR_TARGET_RATIO = 0.5
#: Target: the longest event-loop lag of a data dir kept saturated by this many connections <= TARGET_LAG_S.
LAG_CONNECTIONS = 100
TARGET_LAG_S = 0.020
#: The throughput table's columns.
HEADERS = [
    "target", "MB/s", "min", "max", "Mevents/s", "MB/round", "round s", "handshake ms", "vs bare", "CPU ns/B",
    "lag ms", "loop waits",
]  # fmt: skip
#: Target: the collector's max RSS <= its capacity + this.
RSS_HEADROOM_BYTES = 64 * MB

#: Collector variants: (name, extra command-line arguments), each measured against the same bare sink. A variant is
#: one line, e.g. ("frame-4MiB", ("--max-frame-size", "4MiB")); ``--data-dir`` adds ("data-dir", ("--data-dir", tmp)).
COLLECTOR_VARIANTS: list[tuple[str, tuple[str, ...]]] = [
    ("collector", ()),
]
THROUGHPUT_CAPACITY = "256MiB"
#: A measured round sends at most this many bytes, however fast its target was in the warm-up.
MAX_ROUND_BYTES = 16 * 10**9
RSS_CAPACITY = "64MB"
RSS_CONNECTIONS = 8
RSS_SAMPLE_S = 0.5

#: Frame sizes of the recorded streams: name -> (max_frame_bytes, max_events_per_frame) of the client's encoder.
#: "busy" is what a busy client's streamer sends with its defaults (1 MiB frames of up to 8192 events); "large" a
#: client with 64 KiB frames (the file listener's); "small" what a quiet client sends (128 events a frame).
FRAME_SHAPES: dict[str, tuple[int, int]] = {
    "busy": (1024 * 1024, 8192),
    "large": (64 * 1024, 3400),
    "small": (64 * 1024, 128),
}

SINK_READ_BYTES = 256 * 1024
_PACED_CHUNK = 256 * 1024
_SOCKET_TIMEOUT_S = 600.0

# Wire constants (wire/PROTOCOL.md); the blaster and sink subprocesses do not import the client for these.
_FRAME = struct.Struct("<IB")
_PREAMBLE_BYTES = 8
_WELCOME, _SCHEMA, _STRINGS, _TRACK, _EVENTS, _FLUSH_ACK = 2, 3, 4, 5, 6, 9
_EVENTS_COUNT_AT = _FRAME.size + 8  # header_size u16, flags u16, track u32, then count u32
_COUNT = struct.Struct("<Q")


# -- the streams ----------------------------------------------------------------------------------------------------


@dataclass
class Stream:
    """One recorded client stream, split for replay: the tables once, then EVENTS frames that may repeat."""

    shape: str
    prefix: bytes
    events: bytes
    frames: int
    event_count: int
    directory: Path

    @property
    def avg_frame_bytes(self) -> float:
        return len(self.events) / self.frames


def record_stream(
    shape: str, spans: int, threads: int, directory: Path, frame_shape: tuple[int, int] | None = None
) -> Stream:
    """Record ``spans`` spans on ``threads`` threads through the client's stream encoder and keep its frames
    (``frame_shape``: the encoder's (max_frame_bytes, max_events_per_frame), else ``FRAME_SHAPES[shape]``'s)."""
    from ringtrace.client import Timeline
    from ringtrace.client.delivery.flusher import FLUSHER
    from ringtrace.client.delivery.listeners import SerializedListener
    from ringtrace.wire.stream_encoder import EncodedBatch

    max_frame_bytes, events_per_frame = frame_shape or FRAME_SHAPES[shape]

    class Capture(SerializedListener):
        """A serialized listener (as the file listener and the streamer) that keeps its frames in memory."""

        def __init__(self) -> None:
            super().__init__("bench_ingest", max_frame_bytes=max_frame_bytes)
            self.encoder.max_events_per_frame = events_per_frame
            self.frames: list[bytes] = []

        def write(self, batch: EncodedBatch) -> None:
            self.frames += batch.control
            self.frames += [frame for frame, _ in batch.events]

        def flush(self, timeout_s: float) -> bool:
            return True

        def close(self, timeout_s: float) -> bool:
            return True

        def after_fork(self) -> None:
            return None

    capture = Capture()
    tl = Timeline("bench_ingest", [capture], max_buffered_events=spans + 1)
    FLUSHER.unregister(tl)  # nothing drains while recording: frames are cut by the encoder's limits alone
    labels = ("db.query", "http.request", "render", "parse", "cache.get", "io.read", "io.write", "auth")
    tables = ("users", "orders", "items")
    release = threading.Event()
    recorded = threading.Semaphore(0)

    def work(seed: int, n: int) -> None:
        scope = tl.scope
        for i in range(n):
            label = labels[(i + seed) % len(labels)]
            if i % 3 == 0:
                with scope(label):
                    pass
            elif i % 3 == 1:
                with scope(label, n=i % 1000):
                    pass
            else:
                with scope(label, table=tables[i % 3], rows=i % 97, ok=True):
                    pass
        recorded.release()
        release.wait()  # alive until the flush: no TRACK "ended" frames among the ones we keep

    workers = [threading.Thread(target=work, args=(t, spans // threads)) for t in range(threads)]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            recorded.acquire()
        if not tl.flush(timeout_s=120):
            raise RuntimeError("could not hand the recorded events to the capture listener")
        frames = list(capture.frames)
    finally:
        release.set()
        for worker in workers:
            worker.join()
        tl.remove_listener(capture)
    return stream_of(shape, frames, directory)


def stream_of(shape: str, frames: list[bytes], directory: Path) -> Stream:
    """The stream of a client's ``frames`` split for replay (kept in ``directory / shape``): its tables up front,
    then its EVENTS frames."""
    from ringtrace.wire.table_frames import Track

    prefix, events, count = [], [], 0
    for frame in frames:
        _, frame_type = _FRAME.unpack_from(frame)
        if frame_type == _EVENTS:
            events.append(frame)
            count += struct.unpack_from("<I", frame, _EVENTS_COUNT_AT)[0]
        elif frame_type in (_SCHEMA, _STRINGS) or (
            frame_type == _TRACK and not Track.decode_body(frame[_FRAME.size :]).ended
        ):
            prefix.append(frame)  # tables only grow: all of them up front is a valid stream
    stream = Stream(shape, b"".join(prefix), b"".join(events), len(events), count, directory / shape)
    stream.directory.mkdir()
    (stream.directory / "prefix.bin").write_bytes(stream.prefix)
    (stream.directory / "events.bin").write_bytes(stream.events)
    return stream


# -- the blaster (a subprocess: ``--blast SPEC``) -----------------------------------------------------------------


class _FrameSocket:
    """Reads frames from a blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            data = self.sock.recv(max(65536, n - len(self.buf)))
            if not data:
                raise ConnectionError(f"peer closed the connection ({len(self.buf)} of {n} bytes read)")
            self.buf += data
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_frame(self) -> tuple[int, bytes]:
        length, frame_type = _FRAME.unpack(self.read_exact(_FRAME.size))
        return frame_type, self.read_exact(length)


def _frame_index(events: bytes) -> tuple[list[int], list[int]]:
    """End offset of each EVENTS frame in ``events`` and the events up to it."""
    ends, counts = [], []
    offset = total = 0
    while offset < len(events):
        length, _ = _FRAME.unpack_from(events, offset)
        total += struct.unpack_from("<I", events, offset + _EVENTS_COUNT_AT)[0]
        offset += _FRAME.size + length
        ends.append(offset)
        counts.append(total)
    return ends, counts


def blast(spec: dict[str, Any]) -> dict[str, Any]:
    """Replay the stream in ``spec["stream"]`` over ``spec["connections"]`` connections; returns the timing."""
    from ringtrace.wire.frames import Flush, encode, preamble
    from ringtrace.wire.handshake_frames import Hello

    directory = Path(spec["stream"])
    prefix = (directory / "prefix.bin").read_bytes()
    events = (directory / "events.bin").read_bytes()
    ends, counts = _frame_index(events)
    n = int(spec["connections"])
    collector_mode = spec["mode"] == "collector"
    rate = float(spec.get("rate", 0.0)) / n  # bytes/s per connection; 0: as fast as possible

    # Each connection's timed bytes: the tables, the EVENTS frames `full` times and then up to a frame boundary.
    share = max(int(spec["bytes"]) // n - len(prefix), ends[0])
    full, rest = divmod(share, len(events))
    last = bisect.bisect_right(ends, rest) - 1
    cut, cut_events = (ends[last], counts[last]) if last >= 0 else (0, 0)
    segments: list[bytes | memoryview] = [prefix, *([events] * full), memoryview(events)[:cut]]
    events_per_conn = full * counts[-1] + cut_events
    frames_per_conn = full * len(ends) + (last + 1)

    host, port = spec["address"].rsplit(":", 1)
    socks: list[socket.socket] = []
    readers: list[_FrameSocket] = []
    handshake: list[int] = []
    try:
        t_connect = time.perf_counter()
        for i in range(n):
            sock = socket.create_connection((host, int(port)), timeout=_SOCKET_TIMEOUT_S)
            socks.append(sock)
            readers.append(_FrameSocket(sock))
            hello = Hello(
                pid=1_000_000 + i,
                host="bench-ingest",
                process_name=f"bench_ingest-{i}",
                instance_id=uuid.uuid4().hex,
                boot_id="",
                monotonic_ns=time.monotonic_ns(),
                wall_ns=time.time_ns(),
                client_version="bench",
            )
            first = preamble() + encode(hello)
            sock.sendall(first)
            handshake.append(len(first))
        if collector_mode:
            for reader in readers:
                reader.read_exact(_PREAMBLE_BYTES)
                frame_type, body = reader.read_frame()
                if frame_type != _WELCOME:
                    raise RuntimeError(f"expected WELCOME, got frame type {frame_type:#x}: {body[:200]!r}")
        handshake_s = time.perf_counter() - t_connect

        start = threading.Event()
        finished = [0.0] * n
        errors: list[BaseException] = []
        tokens = [1000 + i for i in range(n)]
        flushes = [encode(Flush(token)) for token in tokens]
        t0 = 0.0

        def connection(i: int) -> None:
            sock, reader = socks[i], readers[i]
            try:
                start.wait()
                if rate > 0:  # paced: chunks of 256 KiB, each sent when the schedule says
                    sent = 0
                    for segment in segments:
                        with memoryview(segment) as view:
                            for offset in range(0, len(view), _PACED_CHUNK):
                                delay = t0 + sent / rate - time.perf_counter()
                                if delay > 0:
                                    time.sleep(delay)
                                chunk = view[offset : offset + _PACED_CHUNK]
                                sock.sendall(chunk)
                                sent += len(chunk)
                else:
                    for segment in segments:
                        sock.sendall(segment)
                sock.sendall(flushes[i])
                if collector_mode:
                    while True:
                        frame_type, body = reader.read_frame()
                        if frame_type == _FLUSH_ACK and _COUNT.unpack(body)[0] == tokens[i]:
                            break
                else:
                    sock.shutdown(socket.SHUT_WR)
                    counted = _COUNT.unpack(reader.read_exact(_COUNT.size))[0]
                    expected = handshake[i] + sum(len(s) for s in segments) + len(flushes[i])
                    if counted != expected:
                        raise RuntimeError(f"bare sink counted {counted:,} bytes, {expected:,} were sent")
                finished[i] = time.perf_counter()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=connection, args=(i,), daemon=True) for i in range(n)]
        for thread in threads:
            thread.start()
        t0 = time.perf_counter()
        start.set()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        elapsed = max(finished) - t0
    finally:
        for sock in socks:
            sock.close()
    timed_bytes = n * (sum(len(s) for s in segments) + len(flushes[0]))
    return {
        "bytes": timed_bytes,
        "seconds": elapsed,
        "events": n * events_per_conn,
        "frames": n * frames_per_conn,
        "handshake_s": handshake_s,
    }


def run_blaster(address: str, mode: str, connections: int, total_bytes: int, stream: Stream, rate: float = 0.0) -> Any:
    spec = {
        "address": address,
        "mode": mode,
        "connections": connections,
        "bytes": total_bytes,
        "stream": str(stream.directory),
        "rate": rate,
    }
    done = subprocess.run(
        [sys.executable, str(HERE), "--blast", json.dumps(spec)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"blaster ({mode}, {connections} connections) failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the bare sink (a subprocess: ``--bare-sink``) ------------------------------------------------------------------


def serve_bare_sink(ring_bytes: int = 0) -> int:
    """A BufferedProtocol that only counts bytes; at EOF it answers the count (u64) and closes. Prints its port.
    ``ring_bytes``: every connection reads on into one ring buffer of that size (allocated and touched first), as a
    store that keeps what it reads in memory must, rather than into a buffer of its own that stays in the cache."""
    import asyncio

    ring = memoryview(bytearray(b"\x01" * ring_bytes)) if ring_bytes else None
    at = [0]  # where the next read goes in the ring

    class Sink(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.count = 0
            self.buffer = memoryview(bytearray(SINK_READ_BYTES))
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

        def get_buffer(self, sizehint: int) -> memoryview:
            if ring is None:
                return self.buffer
            if at[0] + SINK_READ_BYTES > len(ring):
                at[0] = 0
            return ring[at[0] : at[0] + SINK_READ_BYTES]

        def buffer_updated(self, nbytes: int) -> None:
            self.count += nbytes
            at[0] += nbytes

        def eof_received(self) -> bool | None:
            assert self.transport is not None
            self.transport.write(_COUNT.pack(self.count))
            return None  # the transport closes once the count is written

    return serve_until_signalled(Sink)


@contextmanager
def bare_sink(ring_bytes: int = 0) -> Iterator[tuple[str, int]]:
    """Start the bare sink subprocess (``ring_bytes``: reading into a ring); yields its address and pid; always
    stopped on exit."""
    process = subprocess.Popen(
        [sys.executable, str(HERE), "--bare-sink", str(ring_bytes)],
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


# -- throughput -----------------------------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    address: str
    mode: str  # "collector" or "sink"
    coll: Collector | None = None
    #: The server's process, whose CPU time per byte each round reports (on a shared machine, steadier than MB/s).
    pid: int | None = None
    #: The collector's extra command-line arguments, for the report.
    command: str = ""
    results: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    #: The longest event-loop lag over the measured rounds of each (frames, connections) (a collector only).
    lags: dict[tuple[str, int], float] = field(default_factory=dict)
    #: The share of those rounds' time its event loop waited for a core (a collector only).
    core_waits: dict[tuple[str, int], float] = field(default_factory=dict)
    #: Events and bytes sent to this target, warm-up rounds included.
    sent_events: int = 0
    sent_bytes: int = 0

    def run(self, connections: int, total_bytes: int, stream: Stream) -> Any:
        cpu_s = process_cpu_s(self.pid) if self.pid is not None else math.nan
        result = run_blaster(self.address, self.mode, connections, total_bytes, stream)
        result["cpu_s"] = (process_cpu_s(self.pid) if self.pid is not None else math.nan) - cpu_s
        self.sent_events += result["events"]
        self.sent_bytes += result["bytes"]
        return result


def supports_data_dir() -> bool:
    """Whether ``python -m ringtrace.collector --help`` mentions ``--data-dir``."""
    done = subprocess.run(
        [sys.executable, "-m", "ringtrace.collector", "--help"], capture_output=True, text=True, timeout=60
    )
    return "--data-dir" in done.stdout


def disk_write_mb_s(directory: Path, size: int = 512 * 1024 * 1024) -> float:
    """MB/s of writing ``size`` bytes to a new file in ``directory`` and syncing it (the file is removed)."""
    block = os.urandom(1 << 20)
    path = directory / "disk-speed"
    started = time.perf_counter()
    with open(path, "wb") as out:
        for _ in range(size // len(block)):
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    seconds = time.perf_counter() - started
    path.unlink()
    return size / MB / seconds


def collector_variants(args: argparse.Namespace, stack: ExitStack) -> list[tuple[str, tuple[str, ...]]]:
    extra = tuple(arg for text in args.collector_arg for arg in shlex.split(text))
    variants = [(name, (*variant_args, *extra)) for name, variant_args in COLLECTOR_VARIANTS]
    if args.data_dir:
        if supports_data_dir():
            for name, fsync in (("data-dir", ()), ("data-dir interval", ("--fsync", "interval")),
                                ("data-dir flush", ("--fsync", "flush"))):  # fmt: skip
                data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_ingest-data-"))
                variants.append((name, ("--data-dir", data_dir, *fsync, *extra)))  # the first: --fsync never
            print(f"the disk under {data_dir}: {disk_write_mb_s(Path(data_dir)):,.0f} MB/s written and synced "
                  "(what --fsync flush waits for)")  # fmt: skip
        else:
            print(
                "note: this collector has no --data-dir flag (python -m ringtrace.collector --help); "
                "the data-dir variant is skipped"
            )
    return variants


def throughput(args: argparse.Namespace, streams: list[Stream], stack: ExitStack) -> int:
    targets = []
    for name, extra in collector_variants(args, stack):
        coll = stack.enter_context(collector("--capacity", args.capacity, *extra))
        command = shlex.join(("--capacity", args.capacity, *extra))
        targets.append(Target(name, coll.tcp, "collector", coll, coll.process.pid, command))
    if args.ring_sink:
        from ringtrace.wire.parsing import parse_size

        ring_address, ring_pid = stack.enter_context(bare_sink(parse_size(args.capacity)))
        targets.append(Target("bare ring", ring_address, "sink", pid=ring_pid))
    sink_address, sink_pid = stack.enter_context(bare_sink())
    targets.append(Target("bare", sink_address, "sink", pid=sink_pid))
    total_bytes = int(args.mb * MB)

    for stream in streams:
        for connections in args.connections:
            started = time.perf_counter()
            # Warm-up round at --mb; then each target gets the bytes it takes --round-s to send at that rate.
            sizes = {target.name: total_bytes for target in targets}
            if args.round_s > 0:
                for target in targets:
                    warm = target.run(connections, total_bytes, stream)
                    wanted = warm["bytes"] / warm["seconds"] * args.round_s
                    sizes[target.name] = int(min(max(total_bytes, wanted), MAX_ROUND_BYTES))

            def variant(target: Target, size: int, s: Stream = stream, c: int = connections) -> Callable[[], Any]:
                return lambda: target.run(c, size, s)

            lags_before = {t.name: t.coll.lag_buckets() for t in targets if t.coll is not None}
            waits_before = {t.name: t.coll.loop_core_wait() for t in targets if t.coll is not None}
            results = interleave({t.name: variant(t, sizes[t.name]) for t in targets}, rounds=args.rounds, warmup=0)
            for target in targets:
                target.results[(stream.shape, connections)] = results[target.name]
                if target.coll is not None:
                    lag = longest_lag(lags_before[target.name], target.coll.lag_buckets())
                    target.lags[(stream.shape, connections)] = lag
                    waited = core_wait_share(waits_before[target.name], target.coll.loop_core_wait())
                    target.core_waits[(stream.shape, connections)] = waited
            progress = ", ".join(
                f"{name} {median([r['bytes'] / r['seconds'] for r in rs]) / MB:,.0f}" for name, rs in results.items()
            )
            elapsed = time.perf_counter() - started
            print(f"  {stream.shape} frames, {connections} connections: {progress} MB/s ({elapsed:.1f}s)", flush=True)

    bare = targets[-1]
    rows: list[Sequence[object]] = []
    summary: list[Sequence[object]] = []
    for stream in streams:
        for connections in args.connections:
            key = (stream.shape, connections)
            bare_rate = median([r["bytes"] / r["seconds"] for r in bare.results[key]])
            for target in targets:
                runs = target.results[key]
                rates = [r["bytes"] / r["seconds"] for r in runs]
                rate = median(rates)
                ratio = rate / bare_rate
                rows.append(
                    (
                        f"{stream.shape} x{connections} {target.name}",
                        rate / MB,
                        min(rates) / MB,
                        max(rates) / MB,
                        median([r["events"] / r["seconds"] for r in runs]) / 1e6,
                        median([r["bytes"] for r in runs]) / MB,
                        median([r["seconds"] for r in runs]),
                        median([r["handshake_s"] for r in runs]) * 1e3,
                        f"{ratio:.2f}x",
                        f"{median([r['cpu_s'] / r['bytes'] * 1e9 for r in runs]):.3f}",
                        target.lags[key] * 1e3 if key in target.lags else "-",
                        f"{target.core_waits[key]:.0%}" if key in target.core_waits else "-",
                    )
                )
                if target.mode == "sink" and target is not bare:  # the ring: what keeping the bytes costs
                    summary.append(
                        (f"{stream.shape} frames, {connections:>3} conn: {target.name} / bare MB/s", f"{ratio:.3f}x",
                         "(none)")
                    )  # fmt: skip
                elif target is not bare:
                    wanted = DATA_DIR_TARGET_RATIO if target.name.startswith("data-dir") else TARGET_RATIO
                    summary.append(
                        (
                            f"{stream.shape} frames, {connections:>3} conn: {target.name} / bare MB/s",
                            f"{ratio:.3f}x",
                            f">= {wanted}x  {verdict(ratio >= wanted)}",
                        )
                    )
                if target.name.startswith("data-dir") and connections == LAG_CONNECTIONS:
                    lag = target.lags[key]
                    summary.append(
                        (
                            f"{stream.shape} frames, {connections:>3} conn: {target.name} event-loop lag",
                            f"<= {lag * 1e3:g} ms",
                            f"<= {TARGET_LAG_S * 1e3:g} ms  {verdict(lag <= TARGET_LAG_S)}",
                        )
                    )
                if target.name.startswith("data-dir"):  # the second ratio: a data dir against memory
                    memory_rate = median([r["bytes"] / r["seconds"] for r in targets[0].results[key]])
                    summary.append(
                        (
                            f"{stream.shape} frames, {connections:>3} conn: {target.name} / in memory MB/s",
                            f"{rate / memory_rate:.3f}x",
                            f">= {DATA_DIR_TARGET_RATIO}x  {verdict(rate / memory_rate >= DATA_DIR_TARGET_RATIO)}",
                        )
                    )
    sizing = f"{total_bytes / MB:,.0f} MB of wire bytes per round"
    if args.round_s > 0:
        sizing = f"wire bytes per round >= {total_bytes / MB:,.0f} MB and >= {args.round_s:g}s at the warm-up's rate"
    print()
    print(
        table(
            HEADERS,
            rows,
            title=(f"bench_ingest throughput: {sizing}, {args.rounds} interleaved rounds, medians (MB = 10**6 B)"),
        )
    )
    print()
    print(table(["ratio (medians)", "value", "target"], summary))
    print()
    for stream in streams:
        print(
            f"{stream.shape} frames: {stream.frames:,} EVENTS frames of {stream.avg_frame_bytes:,.0f} B on average "
            f"({len(stream.events) / stream.event_count:.1f} B/event, {stream.event_count:,} events per pass), "
            f"tables {len(stream.prefix):,} B"
        )
    for target in targets:
        if target.coll is not None:
            health = {k: v for k, v in target.coll.healthz().items() if k != "status"}
            print(
                f"{target.name} ({target.command}): sent {target.sent_events:,} events, "
                f"{target.sent_bytes:,} B after handshakes; /healthz {json.dumps(health)}"
            )
            watch = rule_watch_stats(target.coll)
            if isinstance(watch, dict) and watch.get("rules"):  # what the rule watch read of what was received
                unread = int(watch["unread_events"])  # (watch_hold_dropped_events among them)
                received = int(health["received_events"])  # type: ignore[call-overload]
                print(
                    f"{target.name}: the rule watch ({watch['rules']} rules) left {unread:,} of {received:,} received "
                    f"events unread ({unread / max(received, 1):.1%}; of them past what it may hold, "
                    f"watch_hold_dropped_events: {watch['watch_hold_dropped_events']:,})"
                )
                incidents = target.coll.stats()["incidents"]
                print(
                    f"{target.name}: incidents fired {incidents['fired']:,}, saved {incidents['saved']:,}, "
                    f"suppressed {incidents['suppressed']:,} (past max_per_minute, busy or refused), failed "
                    f"{incidents['failed']:,}"
                )
            if target.coll.process.poll() is not None:
                print(f"{target.name} exited with {target.coll.process.returncode}", file=sys.stderr)
                return 1
    return 0


def rule_watch_stats(coll: Collector, timeout_s: float = 60.0) -> Any:
    """The collector's ``incident_engine`` stats, once its rule watch has counted unread what its hold dropped (it
    counts at its next step, and paced to its share of the time, that may be seconds away): within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        watch = coll.stats().get("incident_engine")
        if not isinstance(watch, dict) or not watch.get("rules") or time.monotonic() > deadline:
            return watch
        if int(watch["unread_events"]) >= int(watch["watch_hold_dropped_events"]):
            return watch
        time.sleep(0.5)


# -- memory ---------------------------------------------------------------------------------------------------------


def sample_rss(pid: int, samples: list[int], stop: threading.Event) -> None:
    """Append the VmRSS of ``pid`` to ``samples`` every RSS_SAMPLE_S until ``stop`` is set."""
    while not stop.is_set():
        samples.append(read_status_kb(pid, "VmRSS"))
        stop.wait(RSS_SAMPLE_S)


def memory(args: argparse.Namespace, stream: Stream, stack: ExitStack, seconds: float, factor: float) -> int:
    from ringtrace.wire.parsing import parse_size

    rows: list[Sequence[object]] = []
    notes = []
    for name, extra in collector_variants(args, stack):
        with collector("--capacity", RSS_CAPACITY, *extra) as coll:
            pid = coll.process.pid
            capacity = parse_size(RSS_CAPACITY)
            idle = read_status_kb(pid, "VmRSS")
            samples: list[int] = []
            stop = threading.Event()
            sampler = threading.Thread(target=sample_rss, args=(pid, samples, stop), name="rss-sampler", daemon=True)
            sampler.start()
            total = int(factor * capacity)
            try:
                result = run_blaster(coll.tcp, "collector", RSS_CONNECTIONS, total, stream, rate=total / seconds)
            finally:
                stop.set()
                sampler.join()
            samples.append(read_status_kb(pid, "VmRSS"))
            peak = read_status_kb(pid, "VmHWM")
            health = {k: v for k, v in coll.healthz().items() if k != "status"}
        worst = max(max(samples), peak)
        limit = capacity + RSS_HEADROOM_BYTES
        ok = worst <= limit
        rows.append(
            (
                name,
                capacity / MB,
                result["bytes"] / MB,
                result["seconds"],
                idle / MB,
                max(samples) / MB,
                peak / MB,
                samples[-1] / MB,
                limit / MB,
                verdict(ok),
            )
        )
        notes.append(f"{name}: {len(samples)} samples; /healthz after the push {json.dumps(health)}")
    print()
    print(
        table(
            [
                "collector",
                "capacity MB",
                "pushed MB",
                "push s",
                "idle RSS",
                "max RSS",
                "VmHWM",
                "end RSS",
                "limit",
                "target",
            ],
            rows,
            title=(
                f"bench_ingest memory: {factor:g}x the capacity from {RSS_CONNECTIONS} connections, paced over "
                f"{seconds:g}s; VmRSS every {RSS_SAMPLE_S}s (MB = 10**6 B); target max RSS <= capacity + "
                f"{RSS_HEADROOM_BYTES // MB} MB"
            ),
        )
    )
    for note in notes:
        print(note)
    return 0


# -- command line ---------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke test of a few seconds (small rounds, no --rss)")
    parser.add_argument("--rss", action="store_true", help="the memory part only (short with --quick)")
    parser.add_argument("--no-rss", action="store_true", help="the throughput part only")
    parser.add_argument("--mb", type=float, help="MB (10**6 B) sent per round, over all connections (default 512)")
    parser.add_argument(
        "--round-s",
        type=float,
        help="after a warm-up round at --mb, each target gets enough bytes per round to take this long at its "
        "warm-up rate (default 1.0; --quick 0: no warm-up, --mb for all)",
    )
    parser.add_argument("--rounds", type=int, help="measured rounds per target (default 3)")
    parser.add_argument(
        "--connections", type=int, action="append", help="concurrent connections (repeatable; default 1, 8, 100)"
    )
    parser.add_argument(
        "--frames", choices=[*FRAME_SHAPES, "all"], action="append", help="EVENTS frame sizes (repeatable; default all)"
    )
    parser.add_argument("--spans", type=int, help="spans recorded per stream (default 200000)")
    parser.add_argument(
        "--capacity", default=THROUGHPUT_CAPACITY, help="collector --capacity for throughput (default %(default)s)"
    )
    parser.add_argument(
        "--collector-arg",
        action="append",
        default=[],
        metavar="ARGS",
        help="extra arguments for every collector variant, split like a shell (repeatable): "
        "--collector-arg='--max-frame-size 4MiB'",
    )
    parser.add_argument(
        "--no-data-dir",
        dest="data_dir",
        action="store_false",
        help="leave out the data-dir variant (--data-dir on a temporary directory, measured by default)",
    )
    parser.set_defaults(data_dir=True)
    parser.add_argument("--rss-seconds", type=float, help="memory part: push duration (default 60, --quick 8)")
    parser.add_argument("--rss-factor", type=float, help="memory part: bytes pushed / capacity (default 10, --quick 4)")
    parser.add_argument("--blast", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument(
        "--ring-sink",
        action="store_true",
        help="also the bare sink reading into one ring of --capacity bytes (what keeping the bytes costs by itself)",
    )
    parser.add_argument("--bare-sink", type=int, metavar="RING_BYTES", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.blast:
        print(json.dumps(blast(json.loads(args.blast))), flush=True)
        return 0
    if args.bare_sink is not None:
        return serve_bare_sink(args.bare_sink)

    quick = args.quick
    args.mb = args.mb or (64 if quick else 512)
    args.rounds = args.rounds or (2 if quick else 3)
    args.round_s = (0.0 if quick else 1.0) if args.round_s is None else args.round_s
    args.connections = args.connections or [1, 8, 100]
    frames = args.frames or (["busy"] if quick else ["all"])
    spans = args.spans or (40_000 if quick else 200_000)
    rss_seconds = args.rss_seconds or (8.0 if quick else 60.0)
    rss_factor = args.rss_factor or (4.0 if quick else 10.0)
    run_throughput = not args.rss
    run_memory = args.rss or not (quick or args.no_rss)

    print(f"recorder: {recorder()}")
    with ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_ingest-")))
        shapes = list(FRAME_SHAPES) if "all" in frames else frames
        if not run_throughput:
            shapes = ["large"]
        started = time.perf_counter()
        streams = [record_stream(shape, spans, threads=4, directory=directory) for shape in shapes]
        print(
            f"recorded {spans:,} spans on 4 threads into {', '.join(s.shape for s in streams)} frame streams "
            f"in {time.perf_counter() - started:.1f}s",
            flush=True,
        )
        code = 0
        if run_throughput:
            with ExitStack() as servers:
                code = throughput(args, streams, servers)
        if run_memory and code == 0:
            with ExitStack() as servers:
                code = memory(args, streams[0], servers, rss_seconds, rss_factor)
    return code


if __name__ == "__main__":
    sys.exit(main())
