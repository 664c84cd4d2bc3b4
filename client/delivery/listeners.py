"""Listeners: where a timeline's events go. Object listeners get decoded events; serialized ones get wire frames.

    Listener (protocol, recording/timeline_listeners.py)
    ├── ObjectListener          receives ``DecodedEvent`` objects (``on_events``)
    │   └── MemoryListener      keeps them in memory, for tests and local inspection
    └── SerializedListener      owns a StreamEncoder; receives framed bytes (``write``)
        ├── FileListener        the wire format, to a file that ``read_trace_file`` reads back
        └── Streamer            to a collector over TCP (streaming/streamer.py)

A listener may be attached to many timelines: track ids are unique within the process. ``receive`` runs on the
flusher thread (or on a thread calling ``flush()``), one run of one track at a time, never concurrently; ``flush``
and ``close`` may run on any thread. None of them raises into the host program: failures are counted and logged once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringtrace.client.delivery.owned_fds import OwnedFile
from ringtrace.client.delivery.process_identity import ProcessIdentity
from ringtrace.wire.arg_values import display_text, normalise_args
from ringtrace.wire.call_records import CallRun, call_args, event_count
from ringtrace.wire.errors import ConfigError, ProtocolError
from ringtrace.wire.frame_types import DEFAULT_MAX_FRAME_BYTES
from ringtrace.wire.frames import Events, Frame, Stats, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.message_format import render
from ringtrace.wire.model import CALL_KINDS, KINDS, RECORD_FIELDS, SAMPLE, DecodedEvent, TrackInfo
from ringtrace.wire.stream_encoder import EncodedBatch, StreamEncoder
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.stream_tables import typed_args

if TYPE_CHECKING:
    from ringtrace.wire.decoder import SessionDecoder

__all__ = [
    "FileListener",
    "MemoryListener",
    "ObjectListener",
    "SerializedListener",
    "TraceFile",
    "default_process_name",
    "name_process",
    "read_trace_file",
    "read_trace_streams",
]

log = logging.getLogger("ringtrace.client")


_FILE_FRAME_BYTES = 64 * 1024


#: The name ``connect`` gave this process (None before it is called): its other listeners' default name too, so that
#: a file it records shows under the name its streamed events do.
_connected_name: str | None = None


def name_process(name: str) -> None:
    """``connect`` named this process ``name``: listeners made after it without a name of their own take it."""
    global _connected_name
    _connected_name = name


def default_process_name() -> str:
    """The name ``connect`` gave this process; before it is called, the script's name."""
    import sys

    if _connected_name is not None:
        return _connected_name
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return argv0 if argv0 not in ("", "-", "-c") else "python"  # a script from stdin or -c has no name


class ObjectListener:
    """Receives events as ``DecodedEvent`` objects; subclasses implement ``on_events``."""

    #: Events recorded for this listener that it never received (see ``lost``).
    dropped_events = 0
    #: Typed events left out because a field's value did not fit its type.
    rejected_events = 0
    #: dropped_events + rejected_events at the previous flush.
    _lost_at_flush = 0

    def receive(self, track: TrackInfo, records: list[Any] | CallRun) -> None:
        if not isinstance(records, list):  # traced calls, compact records: their flat records define their events
            records = records.as_flat()
        if not records:
            return
        kinds, labels, starts, ends, args = (records[c::RECORD_FIELDS] for c in range(RECORD_FIELDS))
        events = []
        specs = KINDS.by_id
        for kind, label, start, end, arg in zip(kinds, labels, starts, ends, args, strict=True):
            name = display_text(label)
            spec = specs.get(kind)
            if kind == SAMPLE:  # a sampled stack, code locations root first
                arg = {"stack": arg if type(arg) is tuple else ()}
            elif kind in CALL_KINDS:  # a traced call's one-frame stack: its file and first line
                arg = call_args(arg[0] if type(arg) is tuple and arg else None)
            elif arg is not None and type(arg) is not dict:  # a typed event, or a message's values
                try:
                    values = KINDS.converters[kind](arg)[0]  # as the encoder sends them
                except Exception as exc:  # a value that does not fit its type: this event, not the others
                    self.rejected_events += 1
                    log.warning("ringtrace: %s; the event is dropped", exc)
                    continue
                if spec is not None and spec.shape == "message":
                    name, arg = render(spec, values)
                elif spec is not None:  # always: a kind with a converter is registered
                    arg = typed_args(spec, values, specs)
            elif arg is not None:
                arg = normalise_args(arg)[0]
            events.append(DecodedEvent(spec.name if spec else "unknown", name, start, end - start, arg, track))
        self.on_events(events)

    def on_events(self, events: list[DecodedEvent]) -> None:
        raise NotImplementedError

    def lost(self, events: int) -> None:
        self.dropped_events += events

    def retire(self, track: TrackInfo) -> None:
        pass

    def flush(self, timeout_s: float) -> bool:
        """True unless events were dropped or rejected since the previous flush."""
        lost = self.dropped_events + self.rejected_events
        clean, self._lost_at_flush = lost == self._lost_at_flush, lost
        return clean

    def close(self, timeout_s: float) -> bool:
        return True

    def after_fork(self) -> ObjectListener | None:
        return self


class MemoryListener(ObjectListener):
    """Keeps received events in memory: for tests, and for looking at a trace from inside the process.

    Args:
        max_events: keep at most this many (the oldest go first, and are counted in ``dropped_events``);
            None keeps everything.
    """

    def __init__(self, max_events: int | None = None) -> None:
        if max_events is not None and (type(max_events) is not int or max_events < 1):
            raise ConfigError(f"max_events must be a positive int or None, got {max_events!r}")
        self._events: deque[DecodedEvent] = deque(maxlen=max_events)
        self._lock = threading.Lock()
        self.dropped_events = 0

    def on_events(self, events: list[DecodedEvent]) -> None:
        with self._lock:
            room = None if self._events.maxlen is None else self._events.maxlen - len(self._events)
            if room is not None and len(events) > room:
                self.dropped_events += len(events) - room
            self._events.extend(events)

    def flush(self, timeout_s: float) -> bool:
        """True unless events were evicted (past ``max_events``) or rejected since the previous flush."""
        with self._lock:
            return super().flush(timeout_s)

    @property
    def events(self) -> list[DecodedEvent]:
        """Every event kept, in the order received (per track, oldest first)."""
        with self._lock:
            return list(self._events)

    def clear(self) -> list[DecodedEvent]:
        """Take every event kept, leaving none."""
        with self._lock:
            events = list(self._events)
            self._events.clear()
        return events

    def after_fork(self) -> MemoryListener:
        """A child keeps its own events: the parent's are not its own."""
        self._lock = threading.Lock()
        self._events.clear()
        return self


class SerializedListener:
    """Encodes what it receives into the wire format (its own stream: string table, schema, tracks) and hands
    the frames to ``write``.

    Counters: ``dropped_events`` (never delivered), ``dropped_frames``, ``unacknowledged_events``.
    """

    #: Its encoder packs the C recorder's instant arguments as they are, and keeps no record list (see
    #: keyword_args.py). A subclass whose ``receive`` reads or keeps the records sets it to False: it then gets dicts.
    packs_keywords = True

    def __init__(
        self,
        process_name: str | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_strings: int = 100_000,
    ) -> None:
        self.process_name = display_text(process_name or default_process_name())
        self.identity = ProcessIdentity(self.process_name)
        self.encoder = StreamEncoder(max_frame_bytes=max_frame_bytes, max_strings=max_strings)
        self._state_lock = threading.Lock()
        self.dropped_events = 0
        self.dropped_frames = 0
        #: Sent, and the peer never acknowledged them (a streamer whose connection broke): see ``Stats``.
        self.unacknowledged_events = 0
        #: Of ``dropped_events``: lost to an unexpected error in a pass of the client's own threads.
        self.internal_error_events = 0

    def receive(self, track: TrackInfo, records: list[Any] | CallRun) -> None:
        with self._state_lock:
            left = event_count(records)
            try:
                for batch, events in self.encoder.encode_pieces(track, records):  # each written before the next
                    if batch.dropped_events:
                        self.dropped_events += batch.dropped_events
                        self.dropped_frames += batch.dropped_events
                    self.write(batch)
                    left -= events
            except Exception:  # the encoder cleans what users pass; this is the last line of defence
                log.exception("ringtrace: could not encode %d events; dropped", left)
                self.dropped_events += left
                self.dropped_frames += 1

    def lost(self, events: int) -> None:
        with self._state_lock:
            self.dropped_events += events

    def lost_to_error(self, events: int) -> None:
        """``events`` meant for this listener were lost to an unexpected error on their way to it (a sweep failed)."""
        with self._state_lock:
            self.dropped_events += events
            self.internal_error_events += events

    def retire(self, track: TrackInfo) -> None:
        with self._state_lock:
            frame = self.encoder.retire(track)
            if frame is not None:
                batch = EncodedBatch()
                batch.control.append(frame)
                self.write(batch)

    def stats(self) -> Stats:
        return self.encoder.stats(
            self.dropped_events, self.dropped_frames, self.unacknowledged_events, self.internal_error_events
        )

    def write(self, batch: EncodedBatch) -> None:
        """Called under the state lock with the frames of one run: control frames first, then EVENTS."""
        raise NotImplementedError


class FileListener(SerializedListener):
    """Writes the wire format to a file: preamble, HELLO, the stream's tables, then events as they come.

    The file needs no terminator and survives a torn tail: ``read_trace_file`` reads everything before it.

    Args:
        path: the file; created, or truncated if it exists.
        process_name: named in the file's HELLO; defaults to the name ``connect`` gave this process, else the
            script's name.
        fsync: also ``os.fsync`` the file on every ``flush()``.
    """

    def __init__(self, path: str | os.PathLike[str], *, process_name: str | None = None, fsync: bool = False) -> None:
        # Small frames: a torn tail (a process killed mid-write) costs at most one frame.
        super().__init__(process_name, max_frame_bytes=_FILE_FRAME_BYTES)
        self.encoder.strings.recycles = True  # written in order, read by this version: a full table starts again
        self.encoder.stacks.recycles = True  # and so does a full stack table
        self.path = Path(path)
        self.fsync = fsync
        self._stats_written: Stats | None = None
        self._lost_at_flush = 0
        try:
            # Unbuffered: a forked child's copy of a buffer would write the parent's bytes a second time. A
            # descriptor, checked before each use: a daemon may close it and reuse its number (owned_fds).
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o666)
        except OSError as exc:
            raise ConfigError(f"FileListener: cannot open {str(self.path)!r} for writing: {exc}") from None
        self._file: OwnedFile | None = OwnedFile(fd)
        self._write_bytes(preamble() + encode(self.identity.hello()) + b"".join(self.encoder.prefix()), 0)

    def write(self, batch: EncodedBatch) -> None:
        self._write_bytes(b"".join([*batch.control, *(frame for frame, _ in batch.events)]), batch.event_count)

    def _write_bytes(self, data: bytes, events: int) -> None:
        file = self._file
        if file is None:
            self.dropped_events += events
            return
        try:
            file.write(data)
        except OSError as exc:
            log.warning("ringtrace: cannot write %s (%s); this file listener stops", self.path, exc)
            self.dropped_events += events
            self._file = None
            file.close()

    def flush(self, timeout_s: float) -> bool:
        with self._state_lock:
            stats = self.stats()
            if stats != self._stats_written:
                self._write_bytes(encode(stats), 0)
                self._stats_written = stats
            lost = self.dropped_events + self.encoder.rejected_events
            lost_since, self._lost_at_flush = lost - self._lost_at_flush, lost
            file = self._file
            if file is None:
                return False
            try:
                if self.fsync and file.holds():
                    os.fsync(file.fd)
            except OSError as exc:
                log.warning("ringtrace: cannot flush %s (%s)", self.path, exc)
                return False
            return lost_since == 0

    def close(self, timeout_s: float) -> bool:
        delivered = self.flush(timeout_s)
        with self._state_lock:
            file, self._file = self._file, None
            if file is not None:
                file.close()
        return delivered

    def after_fork(self) -> None:
        """A forked child does not write into its parent's file (the two would interleave)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()  # the child's own descriptor; the parent's stays open
        return None


@dataclass
class TraceFile:
    """What ``read_trace_file`` found: the writer's HELLO, its events, its loss counters, and a torn tail."""

    hello: Hello | None
    events: list[DecodedEvent] = field(default_factory=list)
    stats: Stats | None = None
    #: Why reading stopped early (a torn tail, a broken frame), or None when the file ended cleanly.
    error: str | None = None

    def __iter__(self) -> Iterator[DecodedEvent]:
        return iter(self.events)


def read_trace_file(path: str | os.PathLike[str], limits: Limits | None = None) -> TraceFile:
    """Read a file written by ``FileListener`` (or any stream of the wire format) with the session decoder.

    Everything before a torn tail or a broken frame is returned; ``error`` says what stopped the reading. A file of
    several streams (a collector's snapshot file) stops after the first: ``read_trace_streams`` reads them all.
    """
    streams = _read_streams(path, limits, first_only=True)
    if not streams:
        return TraceFile(hello=None, error="the file holds no HELLO frame: it is empty or not a ringtrace stream")
    return streams[0]


def read_trace_streams(path: str | os.PathLike[str], limits: Limits | None = None) -> list[TraceFile]:
    """Read every stream of a file of streams end to end (a collector's snapshot file, ``format=native``), each
    with its own HELLO, tables and events; a trace file gives one. A torn tail or a broken frame ends the reading,
    and the ``error`` of the last stream says why.
    """
    return _read_streams(path, limits, first_only=False)


def _read_streams(path: str | os.PathLike[str], limits: Limits | None, *, first_only: bool) -> list[TraceFile]:
    from ringtrace.wire.decoder import SessionDecoder  # (for reading files only: not at every recording start)

    decoder = SessionDecoder(limits or Limits(), live=False, concatenated=True)
    streams: list[TraceFile] = []
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            decoder.receive_data(chunk)
            if not _read_frames(decoder, streams, first_only):
                return streams
    decoder.receive_data(b"")
    _read_frames(decoder, streams, first_only)
    return streams


def _read_frames(decoder: SessionDecoder, streams: list[TraceFile], first_only: bool) -> bool:
    """Every complete frame buffered now into the stream it belongs to; False once the reading must stop."""
    try:
        return all(_file_frame(decoder, frame, streams, first_only) for frame in decoder)
    except ProtocolError as exc:
        if not streams:
            streams.append(TraceFile(hello=None))
        streams[-1].error = str(exc)
        return False


def _file_frame(decoder: SessionDecoder, frame: Frame, streams: list[TraceFile], first_only: bool) -> bool:
    """One frame of a file into its stream (a HELLO begins one); False once the reading must stop."""
    if isinstance(frame, Hello):
        if streams and first_only:
            streams[0].error = "a second stream follows the first: read_trace_streams reads them all"
            return False
        streams.append(TraceFile(hello=frame))
    elif isinstance(frame, Events):
        streams[-1].events.extend(decoder.tables.events(frame))
    elif isinstance(frame, Stats):
        streams[-1].stats = frame
    return True
