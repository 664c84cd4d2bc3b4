"""GaBIEn TimeLogger streams, read into a ``Recording`` (``recording.py``).

The format (``gabien.uslx.append.TimeLogger``) is what Java's ``DataOutputStream`` writes, big-endian, with no header
and no terminator: records of ``type i8`` (0 new source, 1 open, 2 close), ``source_id i32``, ``time i64``
(``System.nanoTime()``), and for type 0 only the source's name as ``writeUTF`` writes it (u16 length, then modified
UTF-8). Source ids count up from 0 in the order sources are made, and each source's new-source record comes before
its opens and closes (one queue writes them all).

Each source becomes a ringtrace source track, and its opens and closes source_open and source_close events on it,
in the order recorded: the export pairs them into slices, flags the ones opened while the source was already open
(activity above 1) and counts a close with nothing open (``source_anomalies``), as for a ringtrace source.
"""

from __future__ import annotations

import struct
from typing import Final

from ringtrace.collector.foreign.recording import Recording
from ringtrace.wire.model import SOURCE_CLOSE, SOURCE_OPEN, SOURCE_TRACK

__all__ = ["SYSTEM", "looks_like", "read"]

SYSTEM: Final = "GaBIEn TimeLogger"
#: type, source id, time.
_RECORD: Final = struct.Struct(">biq")
_NAME_LENGTH: Final = struct.Struct(">H")
_TYPES: Final = {0: "new source", 1: "open", 2: "close"}


def looks_like(data: bytes) -> bool:
    """Whether ``data`` starts as a TimeLogger stream does: source 0's new-source record, its name valid modified
    UTF-8, then the end or another record's type.

    Its time may not be 0: an HTDUMP stream starts with 20 bytes of zeros, which would read as such a record.
    """
    if len(data) < _RECORD.size + _NAME_LENGTH.size:
        return False
    kind, source_id, time_ns = _RECORD.unpack_from(data)
    if time_ns == 0:
        return False
    (length,) = _NAME_LENGTH.unpack_from(data, _RECORD.size)
    start = _RECORD.size + _NAME_LENGTH.size
    end = start + length
    if kind != 0 or source_id != 0 or end > len(data) or b"\0" in data[start:end]:
        return False
    try:
        _modified_utf8(data[start:end])
    except UnicodeDecodeError:
        return False
    return end == len(data) or data[end] in _TYPES


def read(data: bytes) -> Recording:
    """The sources and their activity in ``data``, up to its end, a torn tail, or a record that breaks the format
    (``Recording.error`` says which)."""
    recording = Recording(SYSTEM)
    tracks: dict[int, int] = {}  # source id -> track id
    names: dict[int, str] = {}
    position, size = 0, len(data)
    while position < size:
        header = _RECORD.size + (_NAME_LENGTH.size if data[position] == 0 else 0)
        if size - position < header:
            return _torn(recording, position, f": {size - position} of its {header} header bytes are there")
        kind, source_id, time_ns = _RECORD.unpack_from(data, position)
        end = position + _RECORD.size
        if kind == 0:
            (length,) = _NAME_LENGTH.unpack_from(data, end)
            start = end + _NAME_LENGTH.size
            end = start + length
            if end > size:
                return _torn(
                    recording,
                    position,
                    f" (new source {source_id}): {size - position} of its {end - position} bytes are there",
                )
            name = _name(data[start:end])
            if source_id in tracks:  # not written by TimeLogger itself: the later name wins
                recording.rename(tracks[source_id], name)
            else:
                tracks[source_id] = recording.track(SOURCE_TRACK, name)
            names[source_id] = name
        elif kind in (1, 2):
            track_id = tracks.get(source_id)
            if track_id is None:
                recording.error = (
                    f"the TimeLogger record at offset {position} ({_TYPES[kind]}) has source_id {source_id}, "
                    "which no earlier new-source record (type 0) made"
                )
                return recording
            recording.add(track_id, SOURCE_OPEN if kind == 1 else SOURCE_CLOSE, names[source_id], time_ns, time_ns)
        else:
            recording.error = (
                f"the TimeLogger record at offset {position} has type {kind}: TimeLogger writes "
                + ", ".join(f"{code} {what}" for code, what in _TYPES.items())
            )
            return recording
        position = end
    return recording


def _torn(recording: Recording, position: int, what: str) -> Recording:
    recording.error = f"the file ends inside the TimeLogger record at offset {position}{what}"
    recording.torn = True
    return recording


def _name(raw: bytes) -> str:
    try:
        return _modified_utf8(raw)
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def _modified_utf8(raw: bytes) -> str:
    """Java's modified UTF-8: NUL as C0 80, characters past the BMP as two encoded surrogates (CESU-8).

    Raises:
        UnicodeDecodeError: ``raw`` is not modified UTF-8.
    """
    text = raw.replace(b"\xc0\x80", b"\0").decode("utf-8", "surrogatepass")
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
