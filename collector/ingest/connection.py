"""One asyncio BufferedProtocol per client connection, feeding the shared sans-I/O session decoder.

Each complete frame comes out of the decoder checked and applied to the connection's tables (the decoder holds every
rule of the stream), and is handled synchronously: HELLO is answered with WELCOME (or GOODBYE naming both version
ranges); what follows is stored verbatim in the connection's stream in the store, EVENTS undecoded. A FLUSH is
acknowledged once everything before it is stored (and synced, in a data dir), at the end of the batch it came in. A
protocol error closes this connection only, with a log line that names the peer and the broken limit or field.

Zero copy: once the stream has an open segment, the decoder reads straight into it (``LendingFrameReader.lend``): the
kernel writes each frame where it is stored, and storing it is an index entry. Each read takes most of the room left
in the segment, and a run of frames stops where their index entries would not fit: the unread bytes move to the next
segment, as they do when the segment is full; when the store refuses a segment, or evicts the one being read
into, the connection reads into the decoder's own buffer and stores by copy until the store opens a segment again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from ringtrace.client.wire.decoder import Limits
from ringtrace.client.wire.errors import LimitExceeded, ProtocolError, UnsupportedVersion
from ringtrace.client.wire.frames import (
    AUTHENTICATION_FAILED,
    FRAME_HEADER,
    Events,
    Flush,
    FlushAck,
    Frame,
    FrameType,
    Goodbye,
    Hello,
    Refused,
    Schema,
    SetPriority,
    Stats,
    Strings,
    Track,
    encode,
    preamble,
)
from ringtrace.client.wire.reader import Sentinel
from ringtrace.collector.auth import AuthenticationFailed, Authenticator, is_loopback
from ringtrace.collector.ingest.hello import rewritten_hello
from ringtrace.collector.ingest.lending import IngestDecoder
from ringtrace.collector.ingest.turns import TABLE_FRAMES, DecodeTurns
from ringtrace.collector.log_repeats import Repeats
from ringtrace.collector.store.clocks import Arrival
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Store, Stream
from ringtrace.collector.store.segments import CHECKSUM_FRAME, INDEX_ENTRY, EventsRun, Segment

__all__ = ["IngestProtocol", "IngestSink", "Traffic"]

log = logging.getLogger("ringtrace.collector.ingest.connection")

_tokens = itertools.count(1)
#: Free room offered to each read: a few large frames per read, rather than a read per frame. Also the least memory
#: a connection holds; a frame larger than it grows the buffer to twice the frame.
READ_SIZE = 256 * 1024
#: The most a read into a segment takes (and at most half of the next segment, which takes what it leaves).
DIRECT_READ_SIZE = 512 * 1024
#: The least room a read into a segment gets; with less, the next segment opens (the unread bytes move there).
MIN_DIRECT_READ = 16 * 1024
#: A read into a segment leaves a 1/INDEX_SHARE of the room for the index entries of the frames it brings (frames of
#: 1 KiB or more on average): frames whose entries do not fit move on to the next segment (a copy).
INDEX_SHARE = 32
#: In a data dir, a frame with this much still to come is read to its end exactly, so that a batch ends between
#: frames and its checksum goes in without moving unread bytes.
EXACT_READ = 64 * 1024
#: Unread bytes moved past a checksum at the end of a batch at most; with more, the checksum waits (a FLUSH does not).
MAX_MOVE = 16 * 1024
#: Bytes a connection reads before it lets every other connection read once (a loop turn).
TURN_BYTES = 512 * 1024
#: Control frames (FLUSH, STATS) a connection may send a second, on average; a connection past it is read more slowly.
MAX_CONTROL_FRAMES_PER_S = 1000.0
#: The least rate, on average since its first byte, at which a frame still incomplete after the idle timeout must have
#: arrived (a peer that sends a byte now and then is never idle): a frame over a steady 10 kbit/s link is never cut.
MIN_FRAME_BYTES_PER_S = 1024


@dataclass(slots=True)
class Traffic:
    """What every connection together received and how connections ended, since the collector started."""

    bytes_received: int = 0
    connections_accepted: int = 0
    #: Refused at once: ``max_connections`` reached.
    connections_refused: int = 0
    #: Closed for breaking the protocol (a log line each says why).
    protocol_errors: int = 0
    #: Times a connection's reading was paused for sending control frames faster than MAX_CONTROL_FRAMES_PER_S.
    throttled: int = 0
    #: Refused at HELLO: no token, or another one (``auth.py``).
    authentication_failures: int = 0
    #: Closed for a frame arriving too slowly (``IngestProtocol.close_if_idle``).
    too_slow: int = 0
    #: Refused connections logged, per kind of refusal (``_refuse``).
    refusals_logged: Repeats = field(default_factory=Repeats)


class IngestSink(Protocol):
    """What a connection needs of the collector: its limits, the registry, the store, the set of connections, and
    the traffic counters."""

    @property
    def traffic(self) -> Traffic: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def max_connections(self) -> int: ...

    @property
    def max_connections_per_address(self) -> int: ...

    @property
    def connections_by_address(self) -> dict[str, int]: ...

    @property
    def handshake_timeout_s(self) -> float: ...

    @property
    def version(self) -> str: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def auth(self) -> Authenticator: ...

    @property
    def store(self) -> Store: ...

    @property
    def connections(self) -> set[IngestProtocol]: ...

    @property
    def decode_turns(self) -> DecodeTurns: ...

    @property
    def heap(self) -> HeapTrimmer: ...


class _Syncer:
    """A connection's syncs under ``--fsync flush|always``: run one after another on a worker thread, so that a slow
    disk stalls this connection's FLUSH_ACKs, not the event loop; each FLUSH_ACK goes out once the sync that follows
    its FLUSH is done, in order. Requests that arrive while a sync runs share the next one."""

    def __init__(
        self, store: Store, stream: Stream, acknowledge: Callable[[int], None], abort: Callable[[], None], who: str
    ) -> None:
        self._store, self._stream, self._acknowledge, self._abort, self._who = store, stream, acknowledge, abort, who
        self._waiting: list[int | None] = []  # FLUSH tokens, or None for a sync after a batch (fsync always)
        self._task: asyncio.Task[None] | None = None

    def request(self, token: int | None) -> None:
        self._waiting.append(token)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                tokens, self._waiting = self._waiting, []
                job = self._store.sync_job(self._stream)
                if job is not None:
                    try:
                        await loop.run_in_executor(None, job.run)
                    except OSError as exc:
                        # Not durable, and a retry proves nothing (the kernel marks the pages clean after an error):
                        # no acknowledgement; the client's flush() fails, and it sends again on a new connection.
                        log.error("cannot sync the data dir for %s: %s; closing its connection", self._who, exc)
                        self._waiting.clear()
                        self._abort()
                        return
                for token in tokens:
                    if token is not None:
                        self._acknowledge(token)
        finally:
            self._task = None


class IngestProtocol(asyncio.BufferedProtocol):
    __slots__ = (
        "_accepted_ns",
        "_address",
        "_control_budget",
        "_control_time",
        "_filled",
        "_flushes",
        "_frame_begun_s",
        "_handshake_timer",
        "_last_read_s",
        "_lent",
        "_offered",
        "_peer",
        "_pending",
        "_received",
        "_refused",
        "_session",
        "_sink",
        "_slowed",
        "_stats_refused",
        "_stream",
        "_syncer",
        "_taken",
        "_throttle",
        "_tokens",
        "_traffic",
        "_transport",
        "_turn_bytes",
        "_waiting_turn",
        "_write_paused",
        "_write_paused_s",
        "process",
    )  # fmt: skip

    def __init__(self, sink: IngestSink) -> None:
        self._sink = sink
        self._traffic = sink.traffic
        #: Made as its connection is accepted: a bound on how long its HELLO's clock readings took to arrive.
        self._accepted_ns = time.monotonic_ns()
        self._session = IngestDecoder(sink.limits, borrow=True, read_size=READ_SIZE, keep_strings=False)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self.process: ProcessRecord | None = None
        self._stream: Stream | None = None
        self._syncer: _Syncer | None = None
        #: Events the store refused since the last FLUSH.
        self._refused = 0
        self._flushes: dict[int, asyncio.Future[bool]] = {}
        self._handshake_timer: asyncio.TimerHandle | None = None
        #: The segment the decoder reads into (pinned), or None: it reads into its own buffer.
        self._lent: Segment | None = None
        #: FLUSH tokens of the current batch, acknowledged at its end.
        self._tokens: list[int] = []
        self._stats_refused = False
        #: Control frames it may still send now (a token bucket refilled at MAX_CONTROL_FRAMES_PER_S), and when the
        #: bucket was last refilled; below zero, reading pauses until it is back at zero.
        self._control_budget = MAX_CONTROL_FRAMES_PER_S
        self._control_time = 0.0
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
        #: Table frames are next, and wait for a later loop turn (``turns.py``): reading stays paused till then.
        self._waiting_turn = False
        #: Bytes received, and of them those taken as frames when the frame being received began, and when that
        #: was (None: between frames), for ``close_if_idle``.
        self._received = 0
        self._taken = 0
        self._frame_begun_s: float | None = None

    # -- asyncio callbacks (kept thin) ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports do not subclass asyncio's.
        self._transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        connections = self._sink.connections
        limit = self._sink.max_connections
        if len(connections) >= limit:
            self._refuse(transport, f"max_connections={limit} reached")
            return
        if isinstance(peer, tuple) and not is_loopback(peer[0]):  # (local processes all share one address)
            by_address, per_address = self._sink.connections_by_address, self._sink.max_connections_per_address
            if by_address.get(peer[0], 0) >= per_address:
                self._refuse(transport, f"max_connections_per_address={per_address} reached for {peer[0]}")
                return
            self._address = peer[0]
            by_address[peer[0]] = by_address.get(peer[0], 0) + 1
        connections.add(self)
        self._traffic.connections_accepted += 1
        loop = asyncio.get_running_loop()
        self._handshake_timer = loop.call_later(self._sink.handshake_timeout_s, self._check_handshake)

    def _refuse(self, transport: asyncio.Transport, reason: str) -> None:
        """No room for this connection: a GOODBYE says why (the client logs it and retries later), and so does a log
        line, repeated at most once a minute per kind of refusal (``repeats.py``)."""
        self._traffic.connections_refused += 1
        unlogged = self._traffic.refusals_logged.due(reason.partition("=")[0])
        if unlogged is not None:
            log.warning("refusing connection from %s: %s%s", self._peer, reason, Repeats.since(unlogged, "refused so"))
        transport.write(preamble() + encode(Goodbye(f"{reason}: try again later")))
        transport.close()

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
        if self._stream is not None:
            view = self._direct_view()
            if view is not None:
                self._offered = len(view)
                return view
        buffer: memoryview = self._session.get_buffer(sizehint)
        self._offered = len(buffer)
        return buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._filled = nbytes == self._offered
        self._traffic.bytes_received += nbytes
        self._received += nbytes
        self._last_read_s = time.monotonic()
        self._session.buffer_updated(nbytes)
        self._pending -= nbytes
        if self._pending <= 0:  # (a read that does not complete the frame being received has nothing to handle)
            self._process_frames()
        self._turn_bytes += nbytes
        if self._turn_bytes >= TURN_BYTES:
            self._end_turn()

    def eof_received(self) -> bool:
        # (Not while waiting for a turn: nothing is read then. What is left is decoded now: it is all there is.)
        self._session.receive_data(b"")
        self._process_frames(last=True)
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._sink.connections.discard(self)
        if self._address is not None:
            by_address = self._sink.connections_by_address
            by_address[self._address] -= 1
            if not by_address[self._address]:
                del by_address[self._address]
            self._address = None
        for timer in (self._handshake_timer, self._throttle):  # they would keep this connection alive till then
            if timer is not None:
                timer.cancel()
        self._handshake_timer = self._throttle = None
        if self._session.skipped_frames:
            log.info(
                "connection from %s skipped %d frames of types this collector does not know (ignorable)",
                self._peer,
                self._session.skipped_frames,
            )
        if self._stream is not None:
            self._end_direct()
            # Its tables go with it: many small objects, whose pages glibc keeps unless trimmed (``heap.py``).
            self._sink.heap.freed(self._stream.charged)
            self._sink.store.close_stream(self._stream)
            self._stream = None
        if self.process is not None:
            self._sink.registry.disconnected(self.process)
        for future in self._flushes.values():
            if not future.done():
                future.set_result(False)
        self._flushes.clear()

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
        begun_s, reader = self._frame_begun_s, self._session.reader
        received = reader.end - reader.position
        if begun_s is None or now_s - begun_s < idle_timeout_s or received >= MIN_FRAME_BYTES_PER_S * (now_s - begun_s):
            return False
        header = reader.next_frame_header()
        log.warning(
            "closing connection from %s, %s: a frame of %s bytes still incomplete %.1f s after its first byte, %d "
            "bytes of it received (less than min_frame_bytes_per_s=%d past idle_timeout_s=%s)", self._peer,
            self._who(), header[0] if header is not None else "?", now_s - begun_s, received, MIN_FRAME_BYTES_PER_S,
            idle_timeout_s,
        )  # fmt: skip
        self._traffic.too_slow += 1
        transport.abort()
        return True

    @property
    def unsent_bytes(self) -> int:
        """Bytes of our answers the client has not read yet."""
        return self._transport.get_write_buffer_size() if self._transport is not None else 0

    # -- flush ----------------------------------------------------------------------------------------------------

    def request_flush(self) -> asyncio.Future[bool]:
        """Ask the client to send everything it holds; the future is True once all of it is stored."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        transport = self._transport
        if transport is None or transport.is_closing() or self.process is None:
            future.set_result(False)
            return future
        token = next(_tokens)
        self._flushes[token] = future
        future.add_done_callback(lambda _: self._flushes.pop(token, None))  # answered, cancelled or lost
        transport.write(encode(Flush(token)))
        return future

    def set_priority(self, priority: str, timeline: str = "") -> bool:
        """Ask the client to record messages up to ``priority`` (on ``timeline``, or all); False: not connected."""
        transport = self._transport
        if transport is None or transport.is_closing() or self.process is None:
            return False
        transport.write(encode(SetPriority(priority, timeline)))
        return True

    # -- frames ---------------------------------------------------------------------------------------------------

    def _process_frames(self, *, last: bool = False) -> None:
        """Handle every complete frame read, but table frames past this loop turn's share (``turns.py``): those
        wait for a later turn, and reading pauses till then; ``last``: the peer sent everything, none waits."""
        transport = self._transport
        if transport is None or transport.is_closing() or self._waiting_turn:
            return
        session, store, reader, turns = self._session, self._sink.store, self._session.reader, self._sink.decode_turns
        taken = reader.position  # the frames before it are handled (stored in place, when reading into a segment)
        try:
            if self._lent is not None and self._lent.evicted:
                self._end_direct()
                taken = reader.position
            while True:
                if self._lent is not None:  # the fast path: runs of EVENTS frames, stored where they were read
                    assert self._stream is not None
                    run = session.events_run(self._top(self._lent))
                    unread = None
                    if run is not None:
                        if reader.end > self._top(self._lent) - len(run.entries):
                            unread = reader.unread()  # read past the run, into where its index entries go
                        store.events_in_place(self._stream, run)
                        taken = run.end
                    if unread is not None or not self._next_fits():  # the unread bytes move to the next segment
                        self._next_segment(unread)
                        taken = reader.position
                        continue
                header = reader.next_frame_header()
                table = header is not None and header[1] in TABLE_FRAMES and header[0] <= reader.end - reader.position
                if table and not last and not turns.may_decode(self):
                    self._waiting_turn = True
                    transport.pause_reading()
                    break
                frame = session.next_frame()
                if isinstance(frame, Sentinel):
                    break
                self._handle(frame)
                if header is not None and table:
                    turns.spend(header[0])
                taken = reader.position
            if self._stream is not None:
                self._end_batch(self._stream)
            if self._control_budget < 0 and self._throttle is None:
                self._slow_down(transport)
            header = reader.next_frame_header()  # (checked against the limits when it is read whole)
            self._pending = header[0] - (reader.end - reader.position) if header is not None else 0
            self._note_frame_begun()
        except AuthenticationFailed as exc:  # the peer learns only that; the log says why
            self._traffic.authentication_failures += 1
            self._sink.auth.log_refusal("connection", self._peer, exc.reason)
            transport.write(preamble() + encode(Goodbye(AUTHENTICATION_FAILED)))
            transport.close()
        except UnsupportedVersion as exc:
            log.warning("closing connection from %s, %s: %s", self._peer, self._who(), exc)
            transport.write(preamble() + encode(Goodbye(str(exc))))
            transport.close()
        except ProtocolError as exc:
            log.warning("closing connection from %s, %s: %s", self._peer, self._who(), exc)
            self._traffic.protocol_errors += 1
            if self._lent is not None:  # the frame that broke a rule was read into the segment: it ends before it
                self._let_go(taken)
                reader.reclaim(b"")
            if self._stream is not None:
                self._end_batch(self._stream)  # what came before it is stored: acknowledge its FLUSHes
            if isinstance(exc, LimitExceeded) and exc.limit_name == "capacity":  # within the WELCOME's limits: say so
                transport.write(encode(Goodbye(f"{exc}: the collector's --capacity is too small for these tables")))
                transport.close()
            else:
                transport.abort()

    def _note_frame_begun(self) -> None:
        """Frames were taken: the unread bytes, if any, begin a frame now, unless it is the one that was being
        received already (nothing more was taken since it began)."""
        reader = self._session.reader
        unread = reader.end - reader.position
        taken = self._received - unread
        if not unread:
            self._frame_begun_s = None
        elif self._frame_begun_s is None or taken != self._taken:
            self._frame_begun_s, self._taken = self._last_read_s, taken

    def _control_frame(self) -> None:
        """A FLUSH or STATS arrived: take it from the bucket (see ``_slow_down``)."""
        now = asyncio.get_running_loop().time()
        refill = (now - self._control_time) * MAX_CONTROL_FRAMES_PER_S
        self._control_budget = min(MAX_CONTROL_FRAMES_PER_S, self._control_budget + refill) - 1
        self._control_time = now

    def _slow_down(self, transport: asyncio.Transport) -> None:
        """Control frames came faster than MAX_CONTROL_FRAMES_PER_S: read nothing more until the bucket is back at
        zero (each is answered or stored, so a flood of them would cost the collector without bound)."""
        if not self._slowed:  # once per connection
            self._slowed = True
            log.info("reading more slowly from %s, %s: control frames past max_control_frames_per_s=%d",
                     self._peer, self._who(), MAX_CONTROL_FRAMES_PER_S)  # fmt: skip
        self._traffic.throttled += 1
        transport.pause_reading()
        self._throttle = asyncio.get_running_loop().call_later(
            -self._control_budget / MAX_CONTROL_FRAMES_PER_S, self._resume_after_throttle
        )

    def _end_turn(self) -> None:
        """TURN_BYTES were read since the last turn ended: read on in the loop's next turn. (The loop reads a
        socket again and again while it fills every read, up to 32 times: 100 busy connections held it for 300 ms
        a turn, and everything else waited, new connections, FLUSH_ACKs and HTTP requests included.)"""
        self._turn_bytes = 0
        transport = self._transport
        if transport is not None and not transport.is_closing() and transport.is_reading():
            transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
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
        return f"{self.process.name} (pid {self.process.pid})" if self.process else "before HELLO"

    def _end_batch(self, stream: Stream) -> None:
        """Everything received is stored: checksum it (data dir), and acknowledge the batch's FLUSHes (after a sync,
        as ``--fsync`` says)."""
        store, tokens = self._sink.store, self._tokens
        always = store.buffers.fsync == "always"
        self._commit(stream, force=bool(tokens) or always)
        if self._syncer is not None:
            for token in tokens:
                self._syncer.request(token)
            if always:
                self._syncer.request(None)
        else:
            for token in tokens:
                self._acknowledge(token)
        tokens.clear()

    def _commit(self, stream: Stream, *, force: bool) -> None:
        store = self._sink.store
        if self._lent is None:
            store.commit(stream)
            return
        reader = self._session.reader
        store.advance(stream, reader.position)
        unread = reader.end - reader.position
        if store.uncommitted(stream) and (force or unread <= MAX_MOVE):
            reader.make_room(CHECKSUM_FRAME.size)  # the checksum goes at the reader's position
            store.commit(stream, end_marker=not unread)

    # -- reading into segments ------------------------------------------------------------------------------------

    def _direct_view(self) -> memoryview | None:
        """Where the next read goes in the stream's open segment; None: into the decoder's own buffer."""
        stream, reader = self._stream, self._session.reader
        assert stream is not None
        if self._lent is not None and self._lent.evicted:
            self._end_direct()
            return None  # the next EVENTS frame opens the next segment, by copy
        if self._lent is None:
            if stream.segment is None:
                return None  # as above (or it is refused, and counted)
            if self._fits(stream.segment):
                self._lend(stream.segment)
        view = self._view() if self._lent is not None else None
        if view is None:
            if reader.end == reader.position and not self._filled:
                # Full, between frames: read the next frame's header alone, so that the segment it opens is read
                # into as well; none opens for a connection that sends nothing more. (After a read that took all
                # the room offered, more is likely waiting: the next segment opens at once.)
                self._end_direct()
                return self._session.get_buffer(-1)[: FRAME_HEADER.size]
            self._next_segment()  # a frame is arriving: into the next segment
            view = self._view() if self._lent is not None else None
            if view is None:
                self._end_direct()  # the next EVENTS frame opens the next segment, by copy
        return view

    def _view(self) -> memoryview | None:
        segment, reader, stream = self._lent, self._session.reader, self._stream
        assert segment is not None and stream is not None
        position, end, top = reader.position, reader.end, self._top(segment)
        # Leaving 1/INDEX_SHARE of the room for the index entries of what is read (a run stops where its entries
        # would not fit, and what is left moves to the next segment), and no more than the next segment takes.
        limit = min(end + DIRECT_READ_SIZE, end + stream.next_size // 2, top - (top - end) // INDEX_SHARE)
        if limit - end < MIN_DIRECT_READ:
            return None  # a read for what little room is left would cost as much as a full one: the next segment
        header = reader.next_frame_header()
        if header is not None and header[0] <= self._session.limits.max_frame_bytes:
            frame_end = position + header[0]  # the frame being received; the unread bytes are part of it
            if frame_end + INDEX_ENTRY.size > top:
                return None  # it does not fit: the next segment
            if self._sink.store.buffers.checksums and frame_end - end >= EXACT_READ:
                return reader.get_buffer(limit=frame_end)
            return reader.get_buffer(limit=max(limit, min(frame_end, end + DIRECT_READ_SIZE)))
        return reader.get_buffer(limit=limit)

    def _top(self, segment: Segment) -> int:
        """Where the lent segment's index entries begin, less the room kept for checksums: frames stored end before
        it, and so do the entries of the frames still to be indexed."""
        return segment.size - INDEX_ENTRY.size * segment.entries - self._sink.store.reserve

    def _next_fits(self) -> bool:
        """Whether the next frame, when it is complete, ends (with its index entry) before the lent segment's
        index."""
        reader = self._session.reader
        header = reader.next_frame_header()
        if header is None or header[0] > reader.end - reader.position:
            return True  # incomplete: it is read on into this segment only if it fits (``_view``)
        entry = INDEX_ENTRY.size if header[1] == FrameType.EVENTS else 0
        assert self._lent is not None
        return reader.position + header[0] + entry <= self._top(self._lent)

    def _fits(self, segment: Segment) -> bool:
        """Whether the unread bytes, and the frame they begin, fit in what is left of ``segment``."""
        reader = self._session.reader
        header = reader.next_frame_header()
        size = header[0] if header is not None and header[0] <= self._session.limits.max_frame_bytes else 0
        tail = segment.size - INDEX_ENTRY.size * (segment.entries + 1) - self._sink.store.reserve
        return segment.used + max(size, reader.end - reader.position) <= tail

    def _lend(self, segment: Segment, unread: bytes | None = None) -> None:
        assert self._stream is not None
        self._sink.store.pin(segment)
        self._sink.store.set_direct(self._stream, True)
        self._session.reader.lend(segment.buffer, segment.used, unread)
        self._lent = segment

    def _end_direct(self) -> None:
        """Read into the decoder's own buffer again (the unread bytes move there)."""
        if self._lent is not None:
            self._session.reader.reclaim(self._let_go())

    def _next_segment(self, unread: bytes | None = None) -> None:
        """The stream's open segment is full: read on into a new one (the unread bytes, or ``unread`` when the
        caller took them already, move there), if the store allows."""
        stream, reader = self._stream, self._session.reader
        assert stream is not None
        if unread is None:
            header = reader.next_frame_header()
        elif len(unread) >= FRAME_HEADER.size:  # (the reader's buffer past them holds index entries now)
            header = (FRAME_HEADER.size + FRAME_HEADER.unpack_from(unread)[0], 0)
        else:
            header = None
        size = header[0] if header is not None and header[0] <= self._session.limits.max_frame_bytes else 0
        if self._lent is not None:
            unread = self._let_go(unread=unread)
        if unread is not None:
            size = max(size, len(unread))
        segment = self._sink.store.open_direct(stream, size)
        if segment is not None:
            self._lend(segment, unread)
        elif unread is not None:
            reader.reclaim(unread)

    def _let_go(self, end: int | None = None, unread: bytes | None = None) -> bytes:
        """Stop reading into the lent segment, which holds everything before the unread bytes (or before ``end``);
        returns those (``unread`` when the caller took them already; the reader is lent or given back another buffer
        next)."""
        segment, stream, store, reader = self._lent, self._stream, self._sink.store, self._session.reader
        assert segment is not None
        unread = reader.unread() if unread is None else unread
        if stream is not None:
            store.advance(stream, reader.position if end is None else end)
            store.set_direct(stream, False)
        self._lent = None
        store.unpin([segment])
        return unread

    # -- frames ---------------------------------------------------------------------------------------------------

    def _handle(self, frame: Frame) -> None:
        stream = self._stream
        if isinstance(frame, Events):
            assert stream is not None
            if self._lent is not None:  # events_run takes these first; this one is in place all the same
                start, end = self._session.reader.frame_start, self._session.reader.position
                entry = INDEX_ENTRY.pack(
                    start, end - start, frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns
                )
                run = EventsRun(entry, frame.count, {frame.track_id: [frame.count, end - start]}, end)
                self._sink.store.events_in_place(stream, run)
            elif not self._sink.store.events(
                stream, frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns, self._session.last_frame()
            ):
                self._refused += frame.count
            elif stream.segment is not None and self._fits(stream.segment):
                self._lend(stream.segment)  # stored by copy (into the segment it opened, say): on in place
            return
        if self._lent is not None:
            assert stream is not None
            self._sink.store.advance(stream, self._session.reader.position)  # stored where it is
        if isinstance(frame, Track):
            assert self.process is not None and stream is not None
            if frame.ended:  # frames stored before name it in their own segments
                self.process.end_track(frame.track_id)
            else:
                self.process.tracks[frame.track_id] = self._session.tables.tracks[frame.track_id]
            self._sink.store.session_frame(
                stream, self._session.last_frame(), kind="track", track_id=frame.track_id, ended=frame.ended
            )
            self._charge_tables(stream, frame)
        elif isinstance(frame, Strings):
            assert stream is not None
            self._store_strings(stream, frame)
            self._charge_tables(stream, frame)
        elif isinstance(frame, Schema):
            assert stream is not None
            self._store_schema(stream, frame)
            self._charge_tables(stream, frame)
        elif isinstance(frame, Flush):  # everything before it is stored; acknowledged at the end of the batch
            assert stream is not None and self._transport is not None
            self._control_frame()
            if self._refused:  # what was not stored, so that the client's flush() does not report success
                self._transport.write(encode(Refused(self._refused)))
                self._refused = 0
            self._tokens.append(frame.token)
        elif isinstance(frame, FlushAck):
            future = self._flushes.pop(frame.token, None)
            if future is not None and not future.done():
                future.set_result(True)
        elif isinstance(frame, Stats):
            assert self.process is not None and stream is not None
            self._control_frame()
            why = self.process.report(frame)
            if why is not None and not self._stats_refused:
                self._stats_refused = True
                log.warning("connection from %s, %s: STATS not taken as sent: %s (logged once)", self._peer,
                            self._who(), why)  # fmt: skip
            self._sink.store.session_frame(stream, self._session.last_frame(), kind="stats")
        elif isinstance(frame, Hello):
            self._hello(frame)

    # What every new segment replays holds what the tables hold, once: a frame that repeats known strings or kinds
    # (the protocol allows it) is stored with only what it added, so the limits on the tables bound it too.

    def _store_strings(self, stream: Stream, frame: Strings) -> None:
        added = self._session.added_strings
        if len(added) == len(frame.strings):
            self._sink.store.session_frame(stream, self._session.last_frame(), kind="strings")
            return
        runs: list[tuple[int, list[str]]] = []
        for string_id, text in added:
            if runs and runs[-1][0] + len(runs[-1][1]) == string_id:
                runs[-1][1].append(text)
            else:
                runs.append((string_id, [text]))
        for first_id, texts in runs:
            self._sink.store.session_frame(stream, encode(Strings(first_id, tuple(texts))), kind="strings")

    def _store_schema(self, stream: Stream, frame: Schema) -> None:
        added = self._session.added_kinds
        if len(added) == len(frame.kinds) and (added or not stream.schema):  # the first one declares the columns
            self._sink.store.session_frame(stream, self._session.last_frame(), kind="schema")
        elif added or not stream.schema:
            self._sink.store.session_frame(stream, encode(Schema(tuple(added), frame.columns)), kind="schema")

    def _charge_tables(self, stream: Stream, frame: Frame) -> None:
        """The tables grew: their memory counts against the capacity (``Store.charge_tables``).

        Raises:
            LimitExceeded: they do not fit: the connection ends (its segments stay stored).
        """
        store = self._sink.store
        needed = store.charge_tables(stream, self._session.table_bytes)
        if needed is not None:
            raise LimitExceeded(
                f"{frame.TYPE.name} frame: every connection's tables (this one's "
                f"{self._session.table_bytes + stream.memory_bytes} bytes) and the segments the store may not "
                "overwrite for them",
                "capacity", store.capacity_bytes, needed,
            )  # fmt: skip

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _acknowledge(self, token: int) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(encode(FlushAck(token)))

    def _hello(self, hello: Hello) -> None:
        refusal = self._sink.auth.refusal(hello.token)  # first: a peer without the token learns nothing more
        if refusal is not None:
            raise AuthenticationFailed(refusal)
        welcome = self._session.welcome(self._sink.version)  # raises UnsupportedVersion: GOODBYE, then close
        assert self._transport is not None
        arrival = Arrival.now(self._accepted_ns, self._transport.get_extra_info("socket"))
        self.process = self._sink.registry.hello(hello, arrival)
        store = self._sink.store
        # Every segment replays the HELLO, and snapshots and recovery read it: stored without the token, and with
        # the clock pairing the collector applies (often another than the client's: clocks.py).
        paired_wall_ns = hello.monotonic_ns + self.process.clock_offset_ns
        frame: bytes | memoryview = self._session.last_frame()
        if hello.token or paired_wall_ns != hello.wall_ns:
            frame = rewritten_hello(frame, token="", wall_ns=paired_wall_ns)
        self._stream = store.open_stream(self.process.uid, frame)
        if store.buffers.fsync in ("flush", "always"):
            self._syncer = _Syncer(store, self._stream, self._acknowledge, self._abort, f"{self._peer}, {self._who()}")
        self._transport.write(preamble() + encode(welcome))
        log.info(
            "connection from %s: process %r pid %d on %s (protocol %d)",
            self._peer,
            hello.process_name,
            hello.pid,
            hello.host,
            welcome.protocol_version,
        )
