"""Fuzzing the C writer of Chrome JSON (``collector/export/_chrome.c``, ``events_json``) against the Python event walk.

An input is one EVENTS frame: its first byte is the event count, the rest its msgpack payload, on a track whose
stream declares spans, instants and counters (named "a", "b", "c") as a real encoder does. ``check`` writes the
snapshot of that stream with the C writer and without, and fails unless both hold the same events and the same
counts. ``scripts/fuzz`` runs it under atheris with the C module built for coverage and AddressSanitizer; the tests
run every input of ``corpus/events_json/`` through ``check`` (``tests/unit/test_fuzz_corpus.py``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import Events, Hello, encode, preamble
from ringtrace.wire.model import COUNTER, INSTANT, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder

TRACK = TrackInfo(7, THREAD_TRACK, "main", 1)
FIRST_TS = 10**18


def _stream_head() -> bytes:
    """A stream up to its first frame of fuzzed events: HELLO, the encoder's declarations and one frame of its own."""
    encoder = StreamEncoder()
    records = [SPAN, "a", FIRST_TS, FIRST_TS + 5, {"k": 1}, INSTANT, "b", FIRST_TS, FIRST_TS, None]
    batch = encoder.encode(TRACK, [*records, COUNTER, "c", FIRST_TS, FIRST_TS, {"c": 1.5}])
    frames = [preamble(), encode(Hello(1, "host", "fuzz", "i1", "boot", 1, 2, "test")), *encoder.prefix()]
    frames += [*batch.control, *(frame for frame, _ in batch.events)]
    return b"".join(frames)


STREAM_HEAD = _stream_head()


def snapshot(path: Path, accelerated: bool) -> dict[str, Any]:
    return json.loads(b"".join(chrome_trace_chunks(load_file(path).view, accelerated=accelerated)))  # type: ignore[no-any-return]


def check(data: bytes) -> None:
    """Fail (AssertionError) unless the snapshot of the frame ``data`` is the same with the C writer and without."""
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
        fast, slow = snapshot(path, True), snapshot(path, False)
    finally:
        path.unlink()

    def key(event: dict[str, Any]) -> str:
        return json.dumps(event, sort_keys=True)

    assert sorted(fast["traceEvents"], key=key) == sorted(slow["traceEvents"], key=key), (fast, slow)
    assert fast["otherData"] == slow["otherData"], (fast["otherData"], slow["otherData"])


def main() -> None:
    import atheris  # only where fuzzing: the tests run check() without it

    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
