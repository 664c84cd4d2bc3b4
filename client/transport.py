"""The background sender: one daemon thread that batches, queues and streams a timeline to a collector.

Theory of operation
-------------------
The thread ``ringtrace-sender`` runs a select loop over a non-blocking socket and a wake-up socket pair. Every
``batch_interval_s`` (or at once when a flush is asked for) it drains the timeline's thread buffers, packs them into
frames (``BatchEncoder``) and appends them to the send queue. The queue is bounded in bytes: an EVENTS frame that does
not fit is dropped, and its events are counted. Control frames (strings, sources, stats, flush) are never dropped; they
are only queued while connected, since the handshake after every (re)connect sends the whole string table and source
list again, ahead of whatever the queue still holds.

Connecting blocks this thread for at most ``connect_timeout_s``; failures back off exponentially (with jitter) up to
``backoff_max_s``. A frame cut short by a broken connection is lost and counted.

``flush()`` (any thread) queues a FLUSH after everything recorded so far and waits for the collector's FLUSH_ACK,
which it sends once it has stored everything before it. A FLUSH from the collector is answered the same way: drain,
queue, then FLUSH_ACK. Nothing here raises into the host program, and nothing blocks it beyond the timeout it passed.
"""

from __future__ import annotations

import contextlib
import encodings.idna  # noqa: F401  # connecting by host name needs it; importing it from the sender thread can fail after fork
import itertools
import logging
import os
import random
import selectors
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass

from ._version import __version__
from .batch import BatchEncoder
from .errors import ConfigError, ProtocolError
from .model import KINDS, RECORD_FIELDS, StringTable, display_text
from .protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    MIN_MAX_FRAME_BYTES,
    Flush,
    FlushAck,
    FrameReader,
    Hello,
    Schema,
    Source,
    Stats,
    Welcome,
    encode,
    preamble,
)
from .timeline import ThreadBuffer, Timeline

__all__ = ["Transport", "TransportOptions", "parse_address"]

log = logging.getLogger("ringtrace.client")


@dataclass(frozen=True)
class TransportOptions:
    """Tuning of the sender; every field can be passed to ``connect`` by name."""

    process_name: str | None = None
    batch_interval_s: float = 0.05
    max_queue_bytes: int = 16 * 1024 * 1024
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_events_per_frame: int = 8192
    max_strings: int = 100_000
    connect_timeout_s: float = 1.0
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    exit_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("batch_interval_s", "connect_timeout_s", "backoff_initial_s", "backoff_max_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("max_queue_bytes", "max_frame_bytes", "max_events_per_frame", "max_strings"):
            if not getattr(self, name) >= 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.max_frame_bytes < MIN_MAX_FRAME_BYTES:
            raise ConfigError(f"max_frame_bytes must be >= {MIN_MAX_FRAME_BYTES}, got {self.max_frame_bytes}")
        if self.exit_timeout_s < 0:
            raise ConfigError(f"exit_timeout_s must be >= 0, got {self.exit_timeout_s!r}")


def parse_address(address: str, *, listen: bool = False) -> tuple[str, int]:
    """``"HOST:PORT"`` (``"[::1]:PORT"`` for IPv6) to ``(host, port)``.

    Args:
        listen: an address to bind, where port 0 means "any free port".

    Raises:
        ConfigError: not of that form, or the port is out of range.
    """
    lowest = 0 if listen else 1
    host, sep, port_text = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port_text.isdigit() or not lowest <= int(port_text) <= 65535:
        raise ConfigError(f"address must be HOST:PORT with a port in {lowest}..65535, got {address!r}")
    return host, int(port_text)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class _Waiter:
    __slots__ = ("done", "ok")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False

    def finish(self, ok: bool) -> None:
        self.ok = ok
        self.done.set()


class Transport:
    """Streams one timeline to one collector from a background thread.

    Counters (read from any thread): ``sent_events``, ``dropped_events`` (queue full, frame cut by a disconnect, or an
    event too large for a frame), ``dropped_frames``, ``connects``.
    """

    def __init__(self, timeline: Timeline, address: str, options: TransportOptions) -> None:
        self.address = parse_address(address)
        self.options = options
        self._timeline = timeline
        self._strings = StringTable(options.max_strings)
        self._encoder = BatchEncoder(self._strings, options.max_frame_bytes, options.max_events_per_frame)
        self._process_name = display_text(options.process_name or _default_process_name())
        self._instance_id = uuid.uuid4().hex
        self._tokens = itertools.count(1)

        # Shared with other threads: guarded by _lock.
        self._lock = threading.Lock()
        self._flush_requests: deque[tuple[int, _Waiter]] = deque()
        self._stopping = False
        self._started = False
        self.sent_events = 0
        self.dropped_events = 0
        self.dropped_frames = 0
        self.connects = 0

        # Owned by the sender thread.
        self._sock: socket.socket | None = None
        self._reader: FrameReader | None = None
        self._queue: deque[tuple[bytes, int, int]] = deque()  # (frame, event count, source id); count 0: control
        self._queued_bytes = 0
        self._out: memoryview | None = None
        self._out_events = 0
        #: The collector's WELCOME has arrived: queued frames may go out.
        self._welcomed = False
        self._waiters: dict[int, _Waiter] = {}
        self._sources: dict[int, bytes] = {}
        self._stats_sent = (0, 0)
        #: dropped_events when the previous flush was acknowledged: a flush is clean only if it did not move.
        self._dropped_at_flush = 0
        self._backoff_s = options.backoff_initial_s
        self._next_connect = 0.0

        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="ringtrace-sender", daemon=True)

    # -- any thread -----------------------------------------------------------------------------------------------

    def start(self) -> bool:
        """Start the sender thread (once; later calls do nothing).

        Returns:
            False when the thread cannot be started (at interpreter shutdown, say).
        """
        with self._lock:
            if self._started or self._stopping:
                return self._thread.ident is not None and not self._stopping
            self._started = True
        try:
            self._thread.start()
        except RuntimeError as exc:
            log.warning("ringtrace: cannot start the sender thread (%s); tracing is off for this process", exc)
            return False
        return True

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def flush(self, timeout_s: float = 2.0) -> bool:
        """Queue everything recorded so far and wait up to ``timeout_s`` for the collector to acknowledge it.

        Returns:
            True when acknowledged with no event dropped since the previous acknowledged flush.
        """
        waiter = _Waiter()
        self.start()
        with self._lock:
            if self._stopping or not self._thread.is_alive():
                return False
            self._flush_requests.append((next(self._tokens), waiter))
        self._wake()
        waiter.done.wait(max(timeout_s, 0.0))
        return waiter.ok

    def close(self, timeout_s: float = 2.0) -> bool:
        """Flush within ``timeout_s``, then stop the sender thread and close the connection."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        delivered = self.flush(timeout_s) if self._started else False  # never start a sender only to stop it
        with self._lock:
            self._stopping = True
        self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(max(deadline - time.monotonic(), 0.05))
        return delivered

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # the pair is full (a wake-up is pending anyway) or closed
            self._wake_w.send(b"\0")

    # -- sender thread --------------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:
            log.exception("ringtrace sender stopped by an unexpected error; tracing is off for this process")
            self._timeline.detach(self)  # nobody drains the buffers any more: stop filling them
        finally:
            self._disconnect("sender stopped", retry=False)
            for _, waiter in self._take_flush_requests():
                waiter.finish(False)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _loop(self) -> None:
        next_sweep = time.monotonic()
        while True:
            with self._lock:
                stopping = self._stopping
            if stopping:
                return
            now = time.monotonic()
            if self._sock is None and now >= self._next_connect:
                self._connect()
            requests = self._take_flush_requests()
            if requests or now >= next_sweep:
                self._sweep()
                next_sweep = now + self.options.batch_interval_s
            for token, waiter in requests:
                if self._sock is None:
                    waiter.finish(False)
                else:
                    self._waiters[token] = waiter
                    self._queue_control(encode(Flush(token)))
            if self._sock is not None:
                self._write()
            timeout = next_sweep - time.monotonic()
            if self._sock is None:
                timeout = min(timeout, self._next_connect - time.monotonic())
            self._wait(max(timeout, 0.0))

    def _wait(self, timeout_s: float) -> None:
        sock = self._sock
        if sock is not None:
            writable = self._out is not None or (self._welcomed and self._queue)
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if writable else 0)
            self._selector.modify(sock, events)
        for key, mask in self._selector.select(timeout_s):
            if key.fileobj is self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    while self._wake_r.recv(4096):
                        pass
            elif mask & selectors.EVENT_READ:
                self._read()

    def _take_flush_requests(self) -> list[tuple[int, _Waiter]]:
        with self._lock:
            requests = list(self._flush_requests)
            self._flush_requests.clear()
        return requests

    def _sweep(self) -> None:
        """Drain every thread buffer into frames on the send queue."""
        if self._timeline.transport is not self:  # closed, and perhaps replaced: the buffers are not ours
            return
        for buffer, records in self._timeline.drain():
            if buffer.source_id not in self._sources:
                self._announce(buffer)
            try:
                batch = self._encoder.encode(buffer.source_id, records)
            except Exception:  # the encoder cleans what users pass; this is the last line of defence
                dropped = len(records) // RECORD_FIELDS
                log.exception("ringtrace: could not encode %d events; dropped", dropped)
                self._count_dropped(dropped, 1)
                continue
            self._count_dropped(batch.dropped_events, batch.dropped_events)
            for frame in batch.strings:
                self._queue_control(frame)
            for frame, count in batch.events:
                if self._queued_bytes + len(frame) > self.options.max_queue_bytes:
                    self._count_dropped(count, 1)
                else:
                    self._queue.append((frame, count, buffer.source_id))
                    self._queued_bytes += len(frame)
        for buffer in self._timeline.buffers():
            if buffer.thread.name != buffer.name:  # a thread renamed after it started recording
                buffer.name = buffer.thread.name
                self._announce(buffer)
        stats = (self.dropped_events, self.dropped_frames)
        if stats != self._stats_sent and self._sock is not None:
            self._queue_control(encode(Stats(*stats)))
            self._stats_sent = stats

    def _announce(self, buffer: ThreadBuffer) -> None:
        frame = encode(Source(buffer.source_id, display_text(buffer.name), buffer.thread_id))
        self._sources[buffer.source_id] = frame
        self._queue_control(frame)

    def _queue_control(self, frame: bytes) -> None:
        if self._sock is not None:  # when not connected, the next handshake carries the same information
            self._queue.append((frame, 0, 0))
            self._queued_bytes += len(frame)

    def _count_dropped(self, events: int, frames: int) -> None:
        if events or frames:
            with self._lock:
                self.dropped_events += events
                self.dropped_frames += frames

    def _handshake(self) -> bytes:
        hello = Hello(
            pid=os.getpid(),
            host=socket.gethostname(),
            process_name=self._process_name,
            instance_id=self._instance_id,
            boot_id=_boot_id(),
            monotonic_ns=time.monotonic_ns(),
            wall_ns=time.time_ns(),
            client_version=__version__,
        )
        # Sources of live threads, and of ended threads whose frames are still queued.
        live = {b.source_id for b in self._timeline.buffers()} | {source_id for _, _, source_id in self._queue}
        self._sources = {sid: frame for sid, frame in self._sources.items() if sid in live}
        self._stats_sent = (self.dropped_events, self.dropped_frames)
        parts = [
            preamble(),
            encode(hello),
            encode(Schema(KINDS)),
            *self._encoder.strings_frames(0, self._strings.strings),
            *self._sources.values(),
            encode(Stats(*self._stats_sent)),
        ]
        return b"".join(parts)

    def _connect(self) -> None:
        host, port = self.address
        try:
            sock = socket.create_connection((host, port), timeout=self.options.connect_timeout_s)
        except Exception as exc:  # refused, unreachable, unresolvable: all mean "try again later"
            self._schedule_reconnect(f"cannot connect to {host}:{port}: {exc}")
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        self._sock = sock
        self._welcomed = False
        self._reader = FrameReader("collector", self.options.max_frame_bytes)
        self._selector.register(sock, selectors.EVENT_READ)
        self._out = memoryview(self._handshake())
        self._out_events = 0
        with self._lock:
            self.connects += 1
        log.debug("ringtrace connected to %s:%d", host, port)

    def _schedule_reconnect(self, reason: str) -> None:
        delay = self._backoff_s * random.uniform(0.5, 1.0)
        self._backoff_s = min(self._backoff_s * 2, self.options.backoff_max_s)
        self._next_connect = time.monotonic() + delay
        log.debug("ringtrace: %s; retrying in %.2fs", reason, delay)

    def _disconnect(self, reason: str, retry: bool = True) -> None:
        sock = self._sock
        if sock is None:
            return
        self._sock = None
        self._reader = None
        self._selector.unregister(sock)
        sock.close()
        if self._out_events:  # a frame cut short is lost
            self._count_dropped(self._out_events, 1)
        self._out = None
        self._out_events = 0
        # Queued control frames are resent by the next handshake; keep only events.
        self._queue = deque(item for item in self._queue if item[1])
        self._queued_bytes = sum(len(item[0]) for item in self._queue)
        for waiter in self._waiters.values():
            waiter.finish(False)
        self._waiters.clear()
        if retry:
            self._schedule_reconnect(reason)

    def _write(self) -> None:
        sock = self._sock
        assert sock is not None
        while True:
            if self._out is None:
                if not self._queue or not self._welcomed:
                    return
                frame, count, _ = self._queue.popleft()
                self._queued_bytes -= len(frame)
                self._out = memoryview(frame)
                self._out_events = count
            try:
                sent = sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._disconnect(f"send failed: {exc}")
                return
            if sent < len(self._out):
                self._out = self._out[sent:]
                continue
            if self._out_events:
                with self._lock:
                    self.sent_events += self._out_events
            self._out = None
            self._out_events = 0

    def _welcome(self, welcome: Welcome) -> None:
        """Adopt the collector's frame limit, splitting again the frames packed before we knew it."""
        limit = min(self.options.max_frame_bytes, welcome.max_frame_bytes)
        self._encoder.max_frame_bytes = limit
        kept: deque[tuple[bytes, int, int]] = deque()
        for frame, count, source_id in self._queue:
            if len(frame) <= limit:
                kept.append((frame, count, source_id))
                continue
            batch = self._encoder.resplit(frame)
            self._count_dropped(batch.dropped_events, batch.dropped_events)
            kept.extend((part, part_count, source_id) for part, part_count in batch.events)
        self._queue = kept
        self._queued_bytes = sum(len(item[0]) for item in kept)
        self._welcomed = True
        self._backoff_s = self.options.backoff_initial_s  # the collector accepted us: the connection works

    def _read(self) -> None:
        sock, reader = self._sock, self._reader
        assert sock is not None and reader is not None
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._disconnect(f"receive failed: {exc}")
            return
        reader.receive_data(data)
        try:
            for frame in reader:
                if isinstance(frame, FlushAck):
                    waiter = self._waiters.pop(frame.token, None)
                    if waiter is not None:
                        waiter.finish(self.dropped_events == self._dropped_at_flush)
                        self._dropped_at_flush = self.dropped_events
                elif isinstance(frame, Flush):
                    self._sweep()
                    self._queue_control(encode(FlushAck(frame.token)))
                elif isinstance(frame, Welcome):
                    self._welcome(frame)
        except ProtocolError as exc:
            log.warning("ringtrace: collector broke the protocol: %s", exc)
            self._disconnect(str(exc))
            return
        if not data:
            self._disconnect("collector closed the connection")


def _default_process_name() -> str:
    import sys

    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return argv0 or "python"
