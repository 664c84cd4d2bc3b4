"""What the collector does with each frame a connection's decoder gives: one handler per frame type, in a table.

The decoder has checked the frame and applied it to the connection's tables already; a handler stores it through the
stream's ``SegmentWriter`` (EVENTS undecoded), answers it, or both. HELLO is answered with WELCOME (after the token
check) and opens the stream; a FLUSH is acknowledged once everything before it is stored (and synced, in a data dir),
at the end of the batch it came in (``end_batch``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from ringtrace.collector.auth import AuthenticationFailed, Authenticator
from ringtrace.collector.ingest.acks import ReplicatedAcks, Syncer
from ringtrace.collector.ingest.hello import rewritten_hello
from ringtrace.collector.ingest.lending import IngestDecoder
from ringtrace.collector.ingest.traffic import ConnectionLines, ControlBudget, Traffic
from ringtrace.collector.store.clocks import Arrival
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Store
from ringtrace.collector.store.writer import SegmentWriter
from ringtrace.wire.errors import LimitExceeded
from ringtrace.wire.frame_types import FrameType
from ringtrace.wire.frames import Events, Flush, FlushAck, Frame, Goodbye, Refused, SetPriority, Stats, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.table_frames import Schema, Strings, Track

__all__ = ["FrameHandlers", "FrameSink"]

log = logging.getLogger("ringtrace.collector.ingest")

#: FLUSH tokens of the flushes the collector asks for, unique across connections.
_tokens = itertools.count(1)


class FrameSink(Protocol):
    """What the handlers need of the collector: its limits and version, the token check, the registry, the store, the
    heap trimmer and the traffic counters."""

    @property
    def limits(self) -> Limits: ...

    @property
    def version(self) -> str: ...

    @property
    def auth(self) -> Authenticator: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def store(self) -> Store: ...

    @property
    def heap(self) -> HeapTrimmer: ...

    @property
    def traffic(self) -> Traffic: ...

    def process_crashed(self, process: ProcessRecord) -> None:
        """A connection of ``process`` was ended by the peer without a GOODBYE (the incidents' crash rules)."""


class FrameHandlers:
    """The handlers of one connection's frames, and what they keep: the process, its stream's writer, the FLUSHes
    to acknowledge, the flushes the collector asked for.

    Args:
        sink: the collector.
        session: the connection's decoder (its tables, and the bytes of the frame it gave last).
        accepted_ns: when the connection was accepted (``Arrival``).

    Nothing here refers back to the connection (no bound method of it, no table of bound methods of this object):
    a connection and its tables are freed as soon as asyncio lets go of it, not at the next garbage collection.
    """

    __slots__ = (
        "_accepted_ns", "_refused", "_replicated", "_session", "_sink", "_stats_refused", "_syncer", "_tokens",
        "control", "flushes", "peer", "process", "said_goodbye", "says_goodbye", "transport", "writer",
    )  # fmt: skip

    def __init__(self, sink: FrameSink, session: IngestDecoder, accepted_ns: int) -> None:
        self._sink, self._session, self._accepted_ns = sink, session, accepted_ns
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.process: ProcessRecord | None = None
        self.writer: SegmentWriter | None = None
        self._syncer: Syncer | None = None
        self._replicated: ReplicatedAcks | None = None
        #: Events the store refused since the last FLUSH.
        self._refused = 0
        #: FLUSH tokens of the current batch, acknowledged at its end.
        self._tokens: list[int] = []
        self._stats_refused = False
        #: Flushes the collector asked for, by token: True once the client's FLUSH_ACK came.
        self.flushes: dict[int, asyncio.Future[bool]] = {}
        #: Control frames it may still send now (FLUSH, STATS); below zero, the connection reads more slowly.
        self.control = ControlBudget()
        #: The client said GOODBYE: it closes on purpose (an end without one, by the peer, is a crash).
        self.said_goodbye = False
        #: Its HELLO promised a GOODBYE on every clean close, and is not a recording sent again (``ringtrace replay``,
        #: whose end says nothing of the process's life): only then can an end without one be a crash.
        self.says_goodbye = False

    def _control_frame(self) -> None:
        """A FLUSH or STATS arrived: take it from the budget."""
        self.control.take(asyncio.get_running_loop().time())

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def who(self) -> str:
        return f"{self.process.name} (pid {self.process.pid})" if self.process else "before HELLO"

    def handle(self, frame: Frame) -> None:
        """Store, answer or act on ``frame``, the frame the decoder gave last."""
        writer = self.writer
        if type(frame) is Events:
            assert writer is not None
            if not writer.events(
                frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns, self._session.last_frame()
            ):
                self._refused += frame.count
            return
        if writer is not None:
            writer.taken()  # stored where it is, when read into a segment
        handler = _HANDLERS.get(frame.TYPE)
        if handler is not None:
            handler(self, frame)

    # -- session frames -------------------------------------------------------------------------------------------

    def _track(self, frame: Track) -> None:
        assert self.process is not None and self.writer is not None
        if frame.ended:  # frames stored before name it in their own segments
            self.process.end_track(frame.track_id)
            self._sink.store.track_ended(self.process.uid, frame.track_id)
        else:
            self.process.tracks[frame.track_id] = self._session.tables.tracks[frame.track_id]
        self.writer.session_frame(self._session.last_frame(), "track", track_id=frame.track_id, ended=frame.ended)
        self._charge_tables(self.writer, frame)

    # What every new segment replays holds what the tables hold, once: a frame that repeats known strings or kinds
    # (the protocol allows it) is stored with only what it added, so the limits on the tables bound it too.

    def _strings(self, frame: Strings) -> None:
        writer, added = self.writer, self._session.added_strings
        assert writer is not None
        if frame.reset:  # every string of it is new: the table started again
            writer.session_frame(self._session.last_frame(), "strings_reset")
        elif len(added) == len(frame.strings):
            writer.session_frame(self._session.last_frame(), "strings")
        else:
            runs: list[tuple[int, list[str]]] = []
            for string_id, text in added:
                if runs and runs[-1][0] + len(runs[-1][1]) == string_id:
                    runs[-1][1].append(text)
                else:
                    runs.append((string_id, [text]))
            for first_id, texts in runs:
                writer.session_frame(encode(Strings(first_id, tuple(texts))), "strings")
        added.clear()  # (taken: the texts of a frame, up to 1 MiB of them, would live as long as the connection)
        self._charge_tables(writer, frame)

    def _stacks(self, frame: Stacks) -> None:
        """Kept for every new segment to replay (a STACKS frame only adds to the table, or starts it again); one that
        does neither is not, so that what is kept is bounded by the table's limits."""
        writer = self.writer
        assert writer is not None
        if frame.reset or frame.frames or frame.stacks:
            writer.session_frame(self._session.last_frame(), "stacks_reset" if frame.reset else "stacks")
        self._charge_tables(writer, frame)

    def _schema(self, frame: Schema) -> None:
        writer, added = self.writer, self._session.added_kinds
        assert writer is not None
        declared = writer.stream.schema
        if len(added) == len(frame.kinds) and (added or not declared):  # the first one declares the columns
            writer.session_frame(self._session.last_frame(), "schema")
        elif added or not declared:
            writer.session_frame(encode(Schema(tuple(added), frame.columns)), "schema")
        self._charge_tables(writer, frame)

    def _charge_tables(self, writer: SegmentWriter, frame: Frame) -> None:
        """The tables grew: their memory counts against the capacity and the process's share of it
        (``Store.charge_tables``).

        Raises:
            LimitExceeded: they do not fit: the connection ends (its segments stay stored); its ``limit_name`` is
                one of ``TABLE_LIMITS``.
        """
        refusal = writer.charge_tables(self._session.table_bytes)
        if refusal is not None:
            this_one = self._session.table_bytes + writer.stream.memory_bytes
            raise LimitExceeded(
                f"{frame.TYPE.name} frame: tables (this connection's {this_one} bytes) past what they may take "
                f"({refusal.basis})",
                refusal.limit_name, refusal.limit, refusal.needed,
            )  # fmt: skip

    def _stats(self, frame: Stats) -> None:
        assert self.process is not None and self.writer is not None
        self._control_frame()
        why = self.process.report(frame)
        if why is not None and not self._stats_refused:
            self._stats_refused = True
            log.warning("connection from %s, %s: STATS not taken as sent: %s (logged once)", self.peer, self.who(),
                        why)  # fmt: skip
        self.writer.session_frame(self._session.last_frame(), "stats")

    # -- flushes --------------------------------------------------------------------------------------------------

    def _flush(self, frame: Flush) -> None:
        """Everything before it is stored; acknowledged at the end of the batch."""
        assert self.writer is not None and self.transport is not None
        self._control_frame()
        if self._refused:  # what was not stored, so that the client's flush() does not report success
            self.transport.write(encode(Refused(self._refused)))
            self._refused = 0
        self._tokens.append(frame.token)

    def _flush_ack(self, frame: FlushAck) -> None:
        future = self.flushes.pop(frame.token, None)
        if future is not None and not future.done():
            future.set_result(True)

    def end_batch(self) -> None:
        """Everything received is stored: checksum it (data dir), and acknowledge the batch's FLUSHes (after a sync,
        as ``--fsync`` says)."""
        writer, tokens = self.writer, self._tokens
        if writer is None:
            return
        always = self._sink.store.buffers.fsync == "always"
        writer.commit(force=bool(tokens) or always)
        if self._replicated is not None:
            for token in tokens:
                self._replicated.request(token)
        elif self._syncer is not None:
            for token in tokens:
                self._syncer.request(token)
            if always:
                self._syncer.request(None)
        else:
            for token in tokens:
                self._acknowledge(token)
        tokens.clear()

    def _settle(self) -> Awaitable[int]:
        """Seal the stream's open segment; what is done once the replica settled all it sealed (``ReplicatedAcks``)."""
        writer, replication = self.writer, self._sink.store.replication
        assert writer is not None and replication is not None
        writer.seal()
        return replication.settled(writer.stream)

    def seal(self, opened_before_ns: int | None = None) -> None:
        """Seal the stream's open segment if it holds events (opened before ``opened_before_ns``): JetStream
        publishes it, ``--max-age`` counts from then."""
        if self.writer is not None:
            self.writer.seal(opened_before_ns)

    def _refuse(self, events: int) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(encode(Refused(events)))

    def _acknowledge(self, token: int) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(encode(FlushAck(token)))

    def lost(self, by_peer: bool = False) -> None:
        """The connection ended (``by_peer``: the peer closed or reset it): the flushes asked for are not answered;
        the stream closes. A peer that ended it without the GOODBYE its HELLO promised crashed, or was killed (or
        reconnects: the incidents' engine waits a moment to tell)."""
        self.close_stream()
        for future in self.flushes.values():  # (first: a crash's capture waits for no flush of this connection)
            if not future.done():
                future.set_result(False)
        self.flushes.clear()
        if self.process is not None:
            self._sink.registry.disconnected(self.process)
            if by_peer and self.says_goodbye and not self.said_goodbye:
                self._sink.process_crashed(self.process)

    def close_stream(self) -> None:
        """The store's part of the connection ends (what it stored stays); its tables are no longer charged."""
        if self.writer is not None:
            # Its tables go with it: many small objects, whose pages glibc keeps unless trimmed (``heap.py``).
            self._sink.heap.freed(self.writer.close())
            self.writer = None

    def _goodbye(self, frame: Goodbye) -> None:
        self.said_goodbye = True

    # -- requests to the client -----------------------------------------------------------------------------------

    def request_flush(self) -> asyncio.Future[bool]:
        """Ask the client to send everything it holds; the future is True once all of it is stored."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        transport = self.transport
        if transport is None or transport.is_closing() or self.process is None:
            future.set_result(False)
            return future
        token = next(_tokens)
        flushes = self.flushes
        flushes[token] = future
        future.add_done_callback(lambda _: flushes.pop(token, None))  # answered, cancelled or lost
        transport.write(encode(Flush(token)))
        return future

    def set_priority(self, priority: str, timeline: str = "") -> bool:
        """Ask the client to record messages up to ``priority`` (on ``timeline``, or all); False: not connected."""
        transport = self.transport
        if transport is None or transport.is_closing() or self.process is None:
            return False
        transport.write(encode(SetPriority(priority, timeline)))
        return True

    # -- HELLO ----------------------------------------------------------------------------------------------------

    def _hello(self, hello: Hello) -> None:
        sink = self._sink
        refusal = sink.auth.refusal(hello.token)  # first: a peer without the token learns nothing more
        if refusal is not None:
            raise AuthenticationFailed(refusal)
        welcome = self._session.welcome(sink.version)  # raises UnsupportedVersion: GOODBYE, then close
        assert self.transport is not None
        arrival = Arrival.now(self._accepted_ns, self.transport.get_extra_info("socket"))
        self.process = process = sink.registry.hello(hello, arrival)
        self.says_goodbye = hello.says_goodbye and not hello.recorded
        store = sink.store
        # Every segment replays the HELLO, and snapshots and recovery read it: stored without the token, and with
        # the clock pairing the collector applies (often another than the client's: clocks.py).
        paired_wall_ns = hello.monotonic_ns + process.clock_offset_ns
        frame: bytes | memoryview = self._session.last_frame()
        if hello.token or paired_wall_ns != hello.wall_ns:
            frame = rewritten_hello(frame, token="", wall_ns=paired_wall_ns)
        stream = store.open_stream(process.uid, frame)
        self.writer = writer = SegmentWriter(store, stream, self._session.reader, self._session.limits.max_frame_bytes)
        if store.replication is not None:
            self._replicated = ReplicatedAcks(self._settle, self._acknowledge, self._refuse)
        elif store.buffers.fsync in ("flush", "always"):
            self._syncer = Syncer(writer.sync_job, self._acknowledge, self._abort, f"{self.peer}, {self.who()}")
        self.transport.write(preamble() + encode(welcome))
        # A process refused for its tables lately comes back about once a second: its refusals say so, once a minute.
        # A crowd of connections is logged at INFO a few at a time (``ConnectionLines``), the others counted.
        refused_lately = sink.traffic.capacity_refusals_logged.recent(process.uid)
        unlogged = None if refused_lately else sink.traffic.connection_lines.take()
        level = logging.DEBUG if unlogged is None else logging.INFO
        log.log(
            level,
            "connection from %s: process %r pid %d on %s (protocol %d)%s",
            self.peer,
            hello.process_name,
            hello.pid,
            hello.host or "a host it did not name",
            welcome.protocol_version,
            ConnectionLines.since(unlogged or 0),
        )


#: Frame type -> its handler (EVENTS has its own path: ``FrameHandlers.handle``); a type not here is only stored past.
_HANDLERS: Final[dict[int, Callable[[FrameHandlers, Any], None]]] = {
    FrameType.HELLO: FrameHandlers._hello,
    FrameType.TRACK: FrameHandlers._track,
    FrameType.STRINGS: FrameHandlers._strings,
    FrameType.SCHEMA: FrameHandlers._schema,
    FrameType.STACKS: FrameHandlers._stacks,
    FrameType.FLUSH: FrameHandlers._flush,
    FrameType.FLUSH_ACK: FrameHandlers._flush_ack,
    FrameType.STATS: FrameHandlers._stats,
    FrameType.GOODBYE: FrameHandlers._goodbye,
}
