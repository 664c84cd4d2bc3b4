"""Recordings of other tracing systems, as ringtrace streams: what ``ringtrace convert`` and ``dump`` read besides
ringtrace's own files.

A reader of a foreign format (``hawktracer.py``, ``timelogger.py``) fills a ``Recording``: the kinds, tracks and
events of the file in ringtrace's terms, in the order the file holds them, and why reading stopped early. ``to_stream``
then writes it as the stream a ``FileListener`` would have written (preamble, HELLO, SCHEMA, STRINGS, TRACK, EVENTS,
STATS), with the client's own encoder, so that ``offline.load_file`` serves it exactly as a ringtrace file.

Neither foreign format says who recorded it or when on the wall clock, so the HELLO says what is known: the process
is named after the file, its pid is 0 and its host empty, and the recording's last timestamp is paired with the
file's modification time (a recorder writes its last event shortly before the file is last changed).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import Hello, KindSpec, Stats, encode, preamble
from ringtrace.wire.model import (
    RECORD_FIELDS,
    KindRegistry,
    TrackInfo,
    display_text,
    normalise_values,
)
from ringtrace.wire.stream_encoder import StreamEncoder

__all__ = ["ForeignFormatError", "Recording", "to_stream"]

#: Timestamps a stream carries: HELLO's clock reading is a signed 64-bit field.
_MAX_NS: Final = 2**63 - 1
#: Distinct labels a translated stream may hold before new ones show as the overflow label (and are counted).
_MAX_STRINGS: Final = 1 << 20


class ForeignFormatError(ProtocolError):
    """A foreign recording that no ringtrace stream can carry (its timestamps span more than 2^63 ns)."""


@dataclass
class Recording:
    """A foreign file in ringtrace's terms: kinds, tracks, and events per track in the order recorded.

    ``error`` says why reading stopped early (None: the file was read to its end); ``torn`` that it is a torn tail
    (the file ends inside a record), which costs only that record.
    """

    #: The recording system as HELLO's ``client_version`` names it (``HawkTracer 0.11.0``).
    system: str
    kinds: KindRegistry = field(default_factory=KindRegistry)
    tracks: dict[int, TrackInfo] = field(default_factory=dict)
    #: Per track id: ``RECORD_FIELDS`` values per event (kind, label, start_ns, end_ns, args), as a timeline drains.
    records: dict[int, list[Any]] = field(default_factory=dict)
    error: str | None = None
    torn: bool = False
    #: Who recorded it, where the format says (else the file is named and pid 0 is shown).
    process_name: str | None = None
    pid: int = 0
    #: The wall-clock ns of its last timestamp, where the format says (else the file's modification time).
    last_wall_ns: int | None = None
    #: Entries of the file that no snapshot shows: counted as dropped in the stream's STATS.
    skipped: int = 0

    def track(self, kind: int, name: str, thread_id: int = 0) -> int:
        """A new track's id."""
        track_id = len(self.tracks) + 1
        self.tracks[track_id] = TrackInfo(track_id, kind, display_text(name), thread_id)
        self.records[track_id] = []
        return track_id

    def rename(self, track_id: int, name: str) -> None:
        old = self.tracks[track_id]
        self.tracks[track_id] = TrackInfo(track_id, old.kind, display_text(name), old.thread_id)

    def typed_kind(self, name: str, fields: tuple[tuple[str, str], ...]) -> KindSpec:
        """A typed kind (shape ``instant``): ``fields`` after the ``id`` every typed event carries first."""
        return self.kinds.register(display_text(name), "instant", (("id", "u64"), *fields), normalise_values)

    def add(self, track_id: int, kind: int, label: str, start_ns: int, end_ns: int, args: Any = None) -> None:
        self.records[track_id].extend((kind, label, start_ns, end_ns, args))

    @property
    def last_ns(self) -> int:
        """The last timestamp recorded (an event's end), 0 if there is none."""
        return max((max(records[3::RECORD_FIELDS]) for records in self.records.values() if records), default=0)


def to_stream(recording: Recording, process_name: str, wall_ns: int, identity: bytes) -> bytes:
    """``recording`` as a ringtrace stream, its last timestamp paired with ``wall_ns``.

    Args:
        process_name: HELLO's process name (the file's name).
        wall_ns: the wall-clock time of the recording's last timestamp (the file's modification time).
        identity: bytes that tell this recording from others (the file's content): HELLO's ``instance_id`` is
            derived from them, so that converting the same file twice gives the same output.

    Raises:
        ForeignFormatError: the timestamps span more than a stream can carry (2^63 ns).
    """
    _rebase(recording)
    last_ns = recording.last_ns
    hello = Hello(
        pid=recording.pid,
        host="",
        process_name=display_text(process_name),
        instance_id=hashlib.blake2b(identity, digest_size=16).hexdigest(),
        boot_id="",  # a clock domain of its own
        monotonic_ns=last_ns,
        wall_ns=max(wall_ns, 0),
        client_version=display_text(recording.system),
    )
    encoder = StreamEncoder(max_strings=_MAX_STRINGS, registry=recording.kinds)
    encoder.max_kinds = len(recording.kinds)
    frames = [preamble(), encode(hello), *encoder.prefix()]
    dropped = 0
    for track_id, track in recording.tracks.items():
        batch = encoder.encode(track, recording.records[track_id])
        frames += batch.control
        frames += (frame for frame, _ in batch.events)
        dropped += batch.dropped_events
    dropped += recording.skipped
    stats = Stats(dropped, dropped, encoder.label_overflow_events, encoder.clipped_args, encoder.rejected_events)
    frames.append(encode(stats))
    return b"".join(frames)


def _rebase(recording: Recording) -> None:
    """Shift every timestamp so that the first is 0 if one is negative (Java's ``nanoTime`` may be) or one is past
    what HELLO can carry (HawkTracer's are unsigned)."""
    starts = [min(records[2::RECORD_FIELDS]) for records in recording.records.values() if records]
    ends = [max(records[3::RECORD_FIELDS]) for records in recording.records.values() if records]
    if not starts:
        return
    first_ns, last_ns = min(starts), max(ends)
    shift = -first_ns if first_ns < 0 or last_ns > _MAX_NS else 0
    if last_ns + shift > _MAX_NS:
        raise ForeignFormatError(
            f"the timestamps run from {first_ns} to {last_ns} ns, more than the {_MAX_NS} ns a stream can carry"
        )
    if shift:
        for records in recording.records.values():
            records[2::RECORD_FIELDS] = [ts + shift for ts in records[2::RECORD_FIELDS]]
            records[3::RECORD_FIELDS] = [ts + shift for ts in records[3::RECORD_FIELDS]]
