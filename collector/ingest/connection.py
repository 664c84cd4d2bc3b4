"""One asyncio BufferedProtocol per client connection: the thin part of ingest, that reads, paces and closes.

Bytes go to the connection's decoder (``IngestDecoder``), which checks each frame and applies it to the connection's
tables (it holds every rule of the stream); each complete frame goes to its handler (``handlers.py``), which stores it
through the stream's ``SegmentWriter`` (``store/writer.py``: straight into a segment, where the reader reads, or by
copy) and answers it. A protocol error closes this connection only, with a log line that names the peer and the broken
limit or field (``goodbyes.py``). What the connection itself decides: where each read goes, when reading pauses (a
peer that does not read our answers, control frames too fast, table frames waiting for their turn: ``turns.py``), and
when to give up on a peer (no HELLO in time, idle, or too slow).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol, cast

from ringtrace.collector.auth import AuthenticationFailed
from ringtrace.collector.ingest.goodbyes import Goodbyes
from ringtrace.collector.ingest.handlers import FrameHandlers, FrameSink
from ringtrace.collector.ingest.lending import IngestDecoder
from ringtrace.collector.ingest.traffic import (
    MAX_CONTROL_FRAMES_PER_S,
    MIN_FRAME_BYTES_PER_S,
    FrameArrival,
    counted_address,
    refusal,
    refuse,
)
from ringtrace.collector.ingest.turns import TABLE_FRAMES, TURN_BYTES, DecodeTurns, ReadTurns
from ringtrace.collector.store.processes import ProcessRecord
from ringtrace.wire.errors import ProtocolError, UnsupportedVersion
from ringtrace.wire.frame_types import FRAME_HEADER
from ringtrace.wire.reader import Sentinel

__all__ = ["TURN_BYTES", "IngestProtocol", "IngestSink"]

log = logging.getLogger("ringtrace.collector.ingest")

#: Free room offered to each read: a few large frames per read, rather than a read per frame. Also the least memory
#: a connection holds; a frame larger than it grows the buffer to twice the frame.
READ_SIZE = 256 * 1024
_DRAIN_BUFFER = memoryview(bytearray(READ_SIZE))
#: The room a connection's own buffer offers until the HELLO is accepted and a read fills it: a HELLO is a few hundred
#: bytes, and a short connection's tables and first frames a few KiB (a larger frame grows the buffer). A connection
#: then costs no READ_SIZE of zeroed memory (most of its reads go to its stream's segment), and one that never sends
#: its HELLO holds this little.
HELLO_READ_SIZE = 4 * 1024


class IngestSink(FrameSink, Protocol):
    """What a connection needs of the collector: what its frame handlers need (``FrameSink``: limits, version, token
    check, registry, store, heap, traffic counters), and its connection limits, the set of connections and the decode
    turns."""

    @property
    def max_connections(self) -> int: ...

    @property
    def max_connections_per_address(self) -> int: ...

    @property
    def connections_by_address(self) -> dict[str, int]: ...

    @property
    def handshake_timeout_s(self) -> float: ...

    @property
    def connections(self) -> set[IngestProtocol]: ...

    @property
    def decode_turns(self) -> DecodeTurns: ...

    @property
    def read_turns(self) -> ReadTurns: ...


class IngestProtocol(asyncio.BufferedProtocol):
    __slots__ = (
        "_address", "_arrival", "_filled", "_frames", "_goodbyes", "_granted", "_handled", "_handshake_timer",
        "_last_read_s", "_members", "_offered", "_peer_ended", "_pending", "_reader", "_session", "_sink", "_slowed",
        "_throttle", "_traffic", "_transport", "_turn_bytes", "_waiting_turn", "_write_paused", "_write_paused_s",
    )  # fmt: skip

    def __init__(self, sink: IngestSink, loopback: set[IngestProtocol] | None = None) -> None:
        """``loopback``: the set it joins, not the sink's ``connections``, uncounted against ``max_connections``: the
        OTLP receiver's loopback connections, which the receiver bounds itself (``--otlp-max-processes``)."""
        self._sink = sink
        #: The peer ended its stream (EOF): with a reset, how a connection ends that we did not end.
        self._peer_ended = False
        #: The connections it is one of (the native ones, or the OTLP receiver's), once accepted.
        self._members = loopback
        self._traffic = sink.traffic
        self._session = IngestDecoder(sink.limits, borrow=True, read_size=HELLO_READ_SIZE, keep_strings=False)
        #: Its reader (the decoder's), which the stream's writer lends segments to.
        self._reader = self._session.reader
        #: Made as its connection is accepted: a bound on how long its HELLO's clock readings took to arrive.
        accepted_ns = time.monotonic_ns()
        self._frames = FrameHandlers(sink, self._session, accepted_ns)
        self._transport: asyncio.Transport | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._throttle: asyncio.TimerHandle | None = None
        self._slowed = False
        #: The peer's host, when it counts against max_connections_per_address.
        self._address: str | None = None
        self._last_read_s = time.monotonic()
        #: The peer does not read our answers: reading stays paused until it does (whatever the throttle says).
        self._write_paused = False
        self._write_paused_s = 0.0
        #: Bytes still to come of the frame being received (0: unknown, or none): reads before then only add bytes.
        self._pending = 0
        #: The room the last read was offered, and whether it took all of it.
        self._offered = 0
        self._filled = False
        #: Bytes read since the connection last let the others read (``_end_turn``).
        self._turn_bytes = 0
        #: Its turn to read came (``next_turn``): its next read takes all the room there is, whatever the others read.
        self._granted = False
        #: Table frames are next, and wait for a later loop turn (``turns.py``): reading stays paused till then.
        self._waiting_turn = False
        #: When the frame being received began, for ``close_if_idle``.
        self._arrival = FrameArrival()
        #: Offset in the reader's buffer past the frames handled: where a frame that breaks a rule begins.
        self._handled = 0
        #: How it ends when it breaks a rule, and whether it is draining after a GOODBYE (``goodbyes.py``).
        self._goodbyes = Goodbyes(sink, self._frames)

    @property
    def process(self) -> ProcessRecord | None:
        """The client process, once its HELLO was accepted."""
        return self._frames.process

    @property
    def buffer_bytes(self) -> int:
        """Memory of its own read buffer (``READ_SIZE``, more while a larger frame arrives)."""
        return self._reader.buffer_bytes

    @property
    def _peer(self) -> str:
        return self._frames.peer

    # -- asyncio callbacks (kept thin) ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports do not subclass asyncio's.
        self._transport = self._frames.transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._frames.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        sink, by_address = self._sink, self._sink.connections_by_address
        if self._members is None:
            why = refusal(
                peer, len(sink.connections), sink.max_connections, by_address, sink.max_connections_per_address
            )
            if why is not None:
                refuse(self._traffic, transport, self._peer, why)
                return
            self._address = address = counted_address(peer)
            if address is not None:
                by_address[address] = by_address.get(address, 0) + 1
            self._members = sink.connections
            self._traffic.connections_accepted += 1
        self._members.add(self)
        loop = asyncio.get_running_loop()
        self._handshake_timer = loop.call_later(sink.handshake_timeout_s, self._check_handshake)

    def pause_writing(self) -> None:
        # Our writes are small answers (FLUSH_ACK); a peer that lets them pile up must not get more read.
        self._write_paused = True
        self._write_paused_s = time.monotonic()
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._goodbyes.draining:
            return _DRAIN_BUFFER
        view = self._room(sizehint)
        transport = self._transport
        if self._sink.read_turns.spent and not self._granted and transport is not None and transport.is_reading():
            view = view[: FRAME_HEADER.size]  # the others read this turn's share: a frame header's worth, then in line
        self._offered = len(view)
        return view

    def _room(self, sizehint: int) -> memoryview:
        """Where the next read goes: the stream's open segment, or the reader's own buffer: HELLO_READ_SIZE of it
        until, past the HELLO, a read takes all it is offered (more is waiting), READ_SIZE from then on."""
        writer = self._frames.writer
        view = writer.read_buffer(self._filled) if writer is not None else None
        if view is not None:
            return view
        reader = self._reader
        if reader.read_size < READ_SIZE:
            if writer is None or not self._filled:  # (a short connection's tables and first frames fit in it)
                return self._session.get_buffer(HELLO_READ_SIZE)
            reader.read_size = READ_SIZE
        return self._session.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self._goodbyes.draining:
            return
        self._granted = False
        self._filled = nbytes == self._offered
        self._traffic.bytes_received += nbytes
        self._arrival.received(nbytes)
        self._last_read_s = time.monotonic()
        self._session.buffer_updated(nbytes)
        self._pending -= nbytes
        if self._pending <= 0:  # (a read that does not complete the frame being received has nothing to handle)
            self._process_frames()
        self._turn_bytes += nbytes
        if self._sink.read_turns.spend(nbytes) or self._turn_bytes >= TURN_BYTES:
            self._end_turn()

    def eof_received(self) -> bool:
        if self._goodbyes.draining:  # the peer read our GOODBYE, or at least has sent all it had
            return False
        self._peer_ended = True
        # (Not while waiting for a turn: nothing is read then. What is left is decoded now: it is all there is.)
        self._session.receive_data(b"")
        self._process_frames(last=True)
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._members is not None:
            self._members.discard(self)
        self._sink.read_turns.forget(self)
        if self._address is not None:
            by_address = self._sink.connections_by_address
            by_address[self._address] -= 1
            if not by_address[self._address]:
                del by_address[self._address]
            self._address = None
        for timer in (self._handshake_timer, self._throttle):  # they would keep it alive till then
            if timer is not None:
                timer.cancel()
        self._handshake_timer = self._throttle = None
        self._goodbyes.lost()
        if self._session.skipped_frames:
            log.info(
                "connection from %s skipped %d frames of types this collector does not know (ignorable)",
                self._peer,
                self._session.skipped_frames,
            )
        # Ended by the peer (its end of stream, or a reset), not by us: without a GOODBYE, that is a crash.
        self._frames.lost(by_peer=(self._peer_ended or exc is not None) and not self._goodbyes.draining)

    def _check_handshake(self) -> None:
        transport = self._transport
        if self.process is None and transport is not None and not transport.is_closing():
            timeout_s = self._sink.handshake_timeout_s
            log.warning("closing connection from %s: no HELLO within handshake_timeout_s=%s", self._peer, timeout_s)
            transport.abort()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def close_if_idle(self, now_s: float, idle_timeout_s: float) -> bool:
        """Close a connection past its HELLO that sent nothing for ``idle_timeout_s`` (clients send a heartbeat every
        15 s), whose frame being received is still incomplete ``idle_timeout_s`` after its first byte and came at
        less than MIN_FRAME_BYTES_PER_S on average, or that has not read what we sent it for ``idle_timeout_s``:
        each would hold a max_connections slot for nothing. Returns whether it did."""
        transport = self._transport
        if self.process is None or transport is None or transport.is_closing():
            return False
        if self._write_paused and now_s - self._write_paused_s >= idle_timeout_s:
            log.warning(
                "closing connection from %s, %s: it has not read what was sent to it (acknowledgements) for "
                "idle_timeout_s=%s", self._peer, self._who(), idle_timeout_s,
            )  # fmt: skip
            self._traffic.too_slow += 1
            transport.abort()
            return True
        if self._write_paused or self._throttle is not None or self._waiting_turn:  # we are the ones not reading
            return False
        if now_s - self._last_read_s >= idle_timeout_s:
            log.info("closing connection from %s, %s: nothing received for idle_timeout_s=%s", self._peer,
                     self._who(), idle_timeout_s)  # fmt: skip
            transport.close()
            return True
        return self._close_if_too_slow(transport, now_s, idle_timeout_s)

    def _close_if_too_slow(self, transport: asyncio.Transport, now_s: float, idle_timeout_s: float) -> bool:
        reader = self._reader
        received = reader.end - reader.position
        arriving_s = self._arrival.too_slow(now_s, idle_timeout_s, received)
        if arriving_s is None:
            return False
        header = reader.next_frame_header()
        log.warning(
            "closing connection from %s, %s: a frame of %s bytes still incomplete %.1f s after its first byte, %d "
            "bytes of it received (less than min_frame_bytes_per_s=%d past idle_timeout_s=%s)", self._peer,
            self._who(), header[0] if header is not None else "?", arriving_s, received, MIN_FRAME_BYTES_PER_S,
            idle_timeout_s,
        )  # fmt: skip
        self._traffic.too_slow += 1
        transport.abort()
        return True

    @property
    def unsent_bytes(self) -> int:
        """Bytes of our answers the client has not read yet."""
        return self._transport.get_write_buffer_size() if self._transport is not None else 0

    # -- requests to the client -----------------------------------------------------------------------------------

    def request_flush(self) -> asyncio.Future[bool]:
        """Ask the client to send everything it holds; the future is True once all of it is stored."""
        return self._frames.request_flush()

    def seal_segment(self, opened_before_ns: int | None = None) -> None:
        """Seal its stream's open segment if it holds events (opened before ``opened_before_ns``, the collector's
        monotonic ns): JetStream publishes what is sealed; ``--max-age`` counts from the seal."""
        self._frames.seal(opened_before_ns)

    def set_priority(self, priority: str, timeline: str = "") -> bool:
        """Ask the client to record messages up to ``priority`` (on ``timeline``, or all); False: not connected."""
        return self._frames.set_priority(priority, timeline)

    # -- frames ---------------------------------------------------------------------------------------------------

    def _process_frames(self, *, last: bool = False) -> None:
        """Handle every complete frame read, but table frames past this loop turn's share (``turns.py``): those
        wait for a later turn, and reading pauses till then; ``last``: the peer sent everything, none waits."""
        transport = self._transport
        if transport is None or transport.is_closing() or self._waiting_turn or self._goodbyes.draining:
            return
        try:
            self._handle_frames(transport, last)
            self._frames.end_batch()
            if self._frames.control.left < 0 and self._throttle is None:
                self._slow_down(transport)
            reader = self._reader
            reader.shrink()  # (the frames read are handled: a buffer grown for a large one goes back)
            header = reader.next_frame_header()  # (checked against the limits when it is read whole)
            self._pending = header[0] - (reader.end - reader.position) if header is not None else 0
            self._arrival.taken(reader.end - reader.position, self._last_read_s)
        except AuthenticationFailed as exc:  # the peer learns only that; the log says why
            self._goodbyes.authentication_failed(transport, exc)
        except UnsupportedVersion as exc:
            self._goodbyes.unsupported_version(transport, exc)
        except ProtocolError as exc:
            self._goodbyes.protocol_error(transport, exc, self._handled)

    def _handle_frames(self, transport: asyncio.Transport, last: bool) -> None:
        """The frames read, each to its handler; runs of EVENTS frames read into a segment are stored where they
        are, in one go. Stops at a table frame that must wait for its turn (reading pauses)."""
        session, reader, turns, frames = self._session, self._reader, self._sink.decode_turns, self._frames
        if frames.writer is not None:
            frames.writer.begin()
        self._handled = reader.position  # the frames before it are handled (stored in place, in a segment)
        events_run = session.events_run
        while True:
            writer = frames.writer
            if writer is not None:  # the fast path: runs of EVENTS frames, stored where they were read
                writer.store_runs(events_run)
                self._handled = reader.position
            header = reader.next_frame_header()
            table = header is not None and header[1] in TABLE_FRAMES and header[0] <= reader.end - reader.position
            if table and not last and not turns.may_decode(self):
                self._waiting_turn = True
                transport.pause_reading()
                return
            frame = session.next_frame()
            if isinstance(frame, Sentinel):
                return
            frames.handle(frame)
            if header is not None and table:
                turns.spend(header[0])
            self._handled = reader.position

    # -- pacing ---------------------------------------------------------------------------------------------------

    def _slow_down(self, transport: asyncio.Transport) -> None:
        """Control frames came faster than MAX_CONTROL_FRAMES_PER_S: read nothing more until the bucket is back at
        zero (each is answered or stored, so a flood of them would cost the collector without bound)."""
        if not self._slowed:  # once per connection
            self._slowed = True
            log.info("reading more slowly from %s, %s: control frames past max_control_frames_per_s=%d",
                     self._peer, self._who(), MAX_CONTROL_FRAMES_PER_S)  # fmt: skip
        self._traffic.throttled += 1
        transport.pause_reading()
        self._throttle = asyncio.get_running_loop().call_later(self._frames.control.wait_s, self._resume_after_throttle)

    def _end_turn(self) -> None:
        """TURN_BYTES were read since the last turn ended, or all connections read their share of this loop turn:
        read on in a later turn, when the connections in line before it have (``turns.py``). (The loop reads a
        socket again and again while it fills every read, up to 32 times: 100 busy connections held it for 300 ms
        a turn, and everything else waited, new connections, FLUSH_ACKs and HTTP requests included.)"""
        busy, self._turn_bytes = self._turn_bytes >= TURN_BYTES, 0
        transport = self._transport
        if transport is not None and not transport.is_closing() and transport.is_reading():
            transport.pause_reading()
            self._sink.read_turns.wait(self, busy=busy)

    def next_turn(self) -> None:
        """Its turn to read on (``turns.py``)."""
        self._granted = True
        self._resume_reading()

    def _resume_after_throttle(self) -> None:
        self._throttle = None
        self._resume_reading()

    def decode_turn(self) -> None:
        """Its turn to decode the table frames it read (``turns.py``); then it reads on."""
        self._waiting_turn = False
        self._process_frames()
        self._resume_reading()

    def _resume_reading(self) -> None:
        """Read on, unless something else holds reading paused: the peer not reading our answers, the throttle, or
        table frames waiting for their turn."""
        transport, paused = self._transport, self._write_paused or self._throttle is not None or self._waiting_turn
        if transport is not None and not transport.is_closing() and not paused:
            transport.resume_reading()

    def _who(self) -> str:
        return self._frames.who()
