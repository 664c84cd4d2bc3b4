"""Fuzzing the C writer of Perfetto packets (``collector/export/_perfetto.c``, ``frame_packets``) against the Python
writer.

An input is one EVENTS frame, as ``fuzz_events_json.py`` takes it (the first byte the event count, the rest its
msgpack payload, on a stream that declares spans, instants and counters). ``check`` writes the Perfetto trace of that
stream with the C writer and without, and fails unless the two are the same bytes. ``scripts/fuzz frame_packets``
runs it under atheris; the tests run every input of ``corpus/frame_packets/`` through ``check``
(``tests/unit/test_fuzz_corpus.py``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import Events, encode

try:
    from fuzz.fuzz_events_json import FIRST_TS, STREAM_HEAD, TRACK
except ImportError:  # run as a script (scripts/fuzz): its own directory is on the path, not tests/
    from fuzz_events_json import FIRST_TS, STREAM_HEAD, TRACK  # type: ignore[no-redef]


def trace(path: Path, accelerated: bool) -> bytes:
    return b"".join(perfetto_chunks(load_file(path).view, accelerated=accelerated))


def check(data: bytes) -> None:
    """Fail (AssertionError) unless the trace of the frame ``data`` is the same bytes with the C writer and
    without."""
    if len(data) < 2:
        return
    try:
        frame = encode(Events(TRACK.track_id, data[0], FIRST_TS, FIRST_TS + 10, data[1:]))
    except ProtocolError:
        return  # no such frame reaches a store (a count of 0, or more events than payload bytes)
    descriptor, name = tempfile.mkstemp(suffix=".rttrace")
    path = Path(name)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(STREAM_HEAD + frame)
        fast, slow = trace(path, True), trace(path, False)
    finally:
        path.unlink()
    assert fast == slow, (fast, slow)


def main() -> None:
    import atheris  # only where fuzzing: the tests run check() without it

    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
