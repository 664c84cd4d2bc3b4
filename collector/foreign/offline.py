"""Files read into a store of their own, so that the export serves them as it serves live data.

A trace file (the client's file listener) holds one stream, a snapshot file (``format=native``) a stream per segment;
each stream becomes one segment of a store sized to hold them all, its HELLO a process, exactly as the collector
recovers a data dir. Filters, Chrome export and snapshot files then work on files unchanged (``ringtrace convert``,
``ringtrace dump``). Reading stops at a torn tail or a broken frame, keeping everything before it, and says why.

Recordings of other systems are recognised by their first bytes (``FOREIGN_FORMATS``) and translated into a
ringtrace stream first (``recording.py``): a HawkTracer HTDUMP stream (``hawktracer.py``), a GaBIEn TimeLogger stream
(``timelogger.py``). From there on they are served as ringtrace files; a torn tail or a broken record of theirs is
reported as a ringtrace file's would be.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ringtrace.collector.foreign import chrome_json, hawktracer, timelogger
from ringtrace.collector.foreign.recording import Recording, to_stream
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.collector.store.segment_files import Recovered
from ringtrace.collector.store.segments import INDEX_ENTRY
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import BadPreamble, ProtocolError
from ringtrace.wire.frame_types import FRAME_HEADER, MAGIC, PREAMBLE
from ringtrace.wire.frames import Events, Stats, unpack_columns
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.stream_limits import Limits

__all__ = ["FOREIGN_FORMATS", "LoadedFile", "load_file", "read_stream"]

#: What decoding a file may meet: anything a collector could have stored.
FILE_LIMITS: Final = Limits(2**31, 2**32 - 1, 2**32 - 1, 2**32 - 1, max_stacks=2**32 - 1, max_stack_frames=2**32 - 1)
_DAY_NS: Final = 86_400 * 10**9
#: Foreign formats: (name, whether a file's first bytes are of it, its reader: a recording per process).
FOREIGN_FORMATS: Final[tuple[tuple[str, Callable[[bytes], bool], Callable[[bytes], list[Recording]]], ...]] = (
    ("HawkTracer HTDUMP", hawktracer.looks_like, lambda data: [hawktracer.read(data)]),
    ("GaBIEn TimeLogger", timelogger.looks_like, lambda data: [timelogger.read(data)]),
    ("Chrome trace JSON", chrome_json.looks_like, chrome_json.read),
)


@dataclass
class LoadedFile:
    """A file's streams as a snapshot view, and why reading stopped early (None: the file ended cleanly)."""

    view: SnapshotView
    streams: int
    events: int
    error: str | None
    #: The error is a torn tail (a writer killed mid-frame): expected of a file, nothing before it is lost.
    torn: bool = False
    #: Events of EVENTS frames whose payload does not decode (the frames are kept; exports count them too).
    undecodable: int = 0


@dataclass
class _Stream:
    hello: Hello | None
    data: bytes
    entries: list[tuple[int, int, int, int, int, int]]
    stats: Stats | None
    undecodable: int = 0


def load_file(path: str | os.PathLike[str]) -> LoadedFile:
    """Read a trace file or a snapshot file, or a recording of another system (``FOREIGN_FORMATS``).

    Raises:
        OSError: the file cannot be read.
        BadPreamble: it is of no format known here (it does not start with the magic, nor as a foreign format does).
        ForeignFormatError: a foreign recording that cannot be carried at all (its timestamps span too much).
    """
    file = Path(path)
    data = file.read_bytes()
    other: dict[str, object] = {"source_file": str(path)}
    foreign: list[Recording] = []
    if not data.startswith(MAGIC):
        data, foreign = _converted(file, data, other)
    streams, error = _streams(memoryview(data))
    store, registry, events = _stored(streams)
    view = _view(store, registry, other)
    torn = error is not None and error.startswith("the file ends inside")
    broken = next((recording for recording in foreign if recording.error is not None), None)
    if broken is not None:
        error, torn = broken.error, broken.torn
    undecodable = sum(stream.undecodable for stream in streams)
    return LoadedFile(view, len(streams), events, error, torn, undecodable)


def _converted(file: Path, data: bytes, other: dict[str, object]) -> tuple[bytes, list[Recording]]:
    """A recording of another system as streams of our own, and its recordings (``other`` says what it was)."""
    name, foreign = _foreign(data)
    other["source_format"] = name
    if any(recording.last_wall_ns is None for recording in foreign):
        other["wall_clock"] = "estimated: the recording's last timestamp is the file's modification time"
    # Where the recording does not say when it was, its last timestamp is the file's modification time (and its
    # processes keep their places to each other: one clock).
    last_ns = max((recording.last_ns for recording in foreign), default=0)  # (a file of no events: none)
    digest = hashlib.blake2b(data).digest()
    mtime_ns = file.stat().st_mtime_ns
    data = b"".join(
        to_stream(
            recording,
            recording.process_name or file.name,
            mtime_ns - (last_ns - recording.last_ns) if recording.last_wall_ns is None else recording.last_wall_ns,
            digest + b"%d" % n,  # the same file converts alike; each process an instance of its own
        )
        for n, recording in enumerate(foreign)
    )
    return data, foreign


def read_stream(data: bytes, seq: int) -> tuple[Recovered | None, str | None]:
    """One stream that a collector stored (a segment: preamble, session frames, EVENTS frames, checked on the way in)
    as segment ``seq`` to adopt into a store (None: it holds no HELLO), and why reading it stopped early (None: it did
    not). What cannot be decoded of its events is counted by the snapshots that read them, as of any stored segment."""
    stream, _, error = _stream(memoryview(data), 0, checked=True)
    if stream.hello is None:
        return None, error or "no HELLO frame"
    buffer = bytearray(stream.data + bytes(INDEX_ENTRY.size * len(stream.entries)))
    return Recovered(seq, buffer, len(stream.data), stream.hello, stream.entries, stream.stats, error), error


def _stored(streams: list[_Stream]) -> tuple[Store, Registry, int]:
    """A store holding each stream that has a HELLO as a segment of its process, and the events they hold."""
    store = Store(2**62, MIN_SEGMENT_BYTES)
    registry = Registry()
    events = 0
    for seq, stream in enumerate(streams):
        if stream.hello is None:
            continue
        process = registry.known(stream.hello)
        if stream.stats is not None:
            process.report(stream.stats)
        buffer = bytearray(stream.data + bytes(INDEX_ENTRY.size * len(stream.entries)))
        store.adopt(
            Recovered(seq, buffer, len(stream.data), stream.hello, stream.entries, stream.stats, None), process.uid
        )
        events += sum(count for _, _, _, count, _, _ in stream.entries)
    return store, registry, events


def _view(store: Store, registry: Registry, other: dict[str, object]) -> SnapshotView:
    """What a snapshot of the file reads, its ``ts`` 0 at midnight UTC before its first event."""
    processes = {p.uid: ProcessView.of(p) for p in registry.processes.values()}
    snapshot = store.snapshot()
    first_ns = min(
        (
            first + processes[segment.owner].clock_offset_ns
            for segment in snapshot.segments
            for *_, first, _ in segment.index()
        ),
        default=0,
    )
    return SnapshotView(
        snapshot,
        processes,
        store.track_counts(),
        other,
        limits=FILE_LIMITS,
        origin_ns=first_ns // _DAY_NS * _DAY_NS,  # midnight UTC before the first event: every ts is positive
    )


def _foreign(data: bytes) -> tuple[str, list[Recording]]:
    """The name of the foreign format ``data`` is in, and what it holds.

    Raises:
        BadPreamble: no format known here starts as ``data`` does.
    """
    for name, looks_like, read in FOREIGN_FORMATS:
        if looks_like(data):
            return name, read(data)
    known = ", ".join(name for name, _, _ in FOREIGN_FORMATS)
    raise BadPreamble(
        f"not a ringtrace file (it starts with {data[:8]!r}, not the magic {MAGIC!r}), nor one of {known}"
    )


def _streams(data: memoryview) -> tuple[list[_Stream], str | None]:
    """Each stream of ``data`` with the offsets of its EVENTS frames, and why reading stopped early."""
    streams: list[_Stream] = []
    position = 0
    while position < len(data):
        stream, position, error = _stream(data, position)
        streams.append(stream)
        if error is not None:
            return streams, error
    return streams, None


def _stream(data: memoryview, start: int, *, checked: bool = False) -> tuple[_Stream, int, str | None]:
    """The stream at ``start``: up to the next preamble, the end of ``data``, or the first frame that is torn or
    broken (then with why). ``checked``: its EVENTS frames were checked when a collector stored them, and are only
    indexed here (not decoded to count events that cannot be)."""
    decoder = SessionDecoder(FILE_LIMITS, live=False)
    stream = _Stream(None, b"", [], None)
    position = start + PREAMBLE.size
    error: str | None = None
    try:
        decoder.receive_data(data[start:position])
        decoder.next_frame()  # checks the preamble
        while position < len(data) and bytes(data[position : position + len(MAGIC)]) != MAGIC:  # (the next stream)
            end, error = _frame_end(data, position)
            if error is not None:
                break
            decoder.receive_data(data[position:end])
            frame = decoder.next_frame()
            take = _index_events if checked and type(frame) is Events else _TAKE.get(type(frame))
            if take is not None:
                take(stream, decoder, frame, position - start, end - position)
            position = end
    except ProtocolError as exc:
        error = f"the frame at offset {position} is broken: {exc}"
    stream.data = bytes(data[start:position])
    if error is None and len(data) < start + PREAMBLE.size:
        error = f"the file ends inside the preamble at offset {start} ({len(data) - start} of {PREAMBLE.size} bytes)"
    if error is None and stream.hello is None and position > start + PREAMBLE.size:
        error = f"the stream at offset {start} holds no HELLO frame"
    return stream, position, error


def _frame_end(data: memoryview, position: int) -> tuple[int, str | None]:
    """Where the frame at ``position`` ends, or why the file ends inside it."""
    if position + FRAME_HEADER.size > len(data):
        return position, f"the file ends inside a frame header at offset {position}"
    body_length, _ = FRAME_HEADER.unpack_from(data, position)
    end = position + FRAME_HEADER.size + body_length
    if end > len(data):
        return position, f"the file ends inside the frame at offset {position} ({end - len(data)} bytes missing)"
    return end, None


def _take_hello(stream: _Stream, decoder: SessionDecoder, frame: object, offset: int, length: int) -> None:
    assert isinstance(frame, Hello)
    stream.hello = frame


def _take_stats(stream: _Stream, decoder: SessionDecoder, frame: object, offset: int, length: int) -> None:
    assert isinstance(frame, Stats)
    stream.stats = frame


def _index_events(stream: _Stream, decoder: SessionDecoder, frame: object, offset: int, length: int) -> None:
    """An EVENTS frame a collector checked when it stored it: indexed."""
    assert isinstance(frame, Events)
    stream.entries.append((offset, length, frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns))


def _take_events(stream: _Stream, decoder: SessionDecoder, frame: object, offset: int, length: int) -> None:
    """An EVENTS frame indexed; a payload that does not decode, or events of kinds never declared, counted (a
    corrupt file, said)."""
    assert isinstance(frame, Events)
    stream.entries.append((offset, length, frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns))
    try:
        kinds = unpack_columns(frame, decoder.tables.columns)[decoder.tables.columns.index("kind")]
    except ProtocolError:
        stream.undecodable += frame.count
        return
    declared = decoder.tables.kinds
    stream.undecodable += sum(1 for kind in kinds if type(kind) is not int or kind not in declared)


#: What a stream keeps of its frames, by type: its HELLO, its last STATS, and the index of its EVENTS frames.
_TAKE: Final[dict[type, Callable[[_Stream, SessionDecoder, object, int, int], None]]] = {
    Hello: _take_hello,
    Stats: _take_stats,
    Events: _take_events,
}
