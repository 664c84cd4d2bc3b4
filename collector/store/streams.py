"""A connection's stream in the store: the session frames each of its segments opens with, and its open segment.

A segment opens with the session frames the stream has declared so far (HELLO, SCHEMA, STRINGS, its live TRACKs,
the latest STATS), replayed verbatim, so that it decodes alone (``segments.py``). The stream keeps them here as they
come (``keep``), and knows what they take: the store counts it against the capacity (``Store.charge_tables``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Literal

from ringtrace.collector.store.accounts import TrackCounts
from ringtrace.collector.store.segments import Segment
from ringtrace.wire.frames import preamble

__all__ = ["MIN_SEGMENT_BYTES", "TRACK_FRAME_BYTES", "SessionKind", "Stream"]

#: The first segment of a stream; later ones double up to ``segment_bytes``.
MIN_SEGMENT_BYTES: Final = 64 * 1024
#: Memory a stored TRACK frame takes beside its bytes (the bytes object's header, its entry in a dict).
TRACK_FRAME_BYTES: Final = 100
_PREAMBLE: Final = preamble()

SessionKind = Literal["schema", "strings", "strings_reset", "stacks", "stacks_reset", "track", "stats"]


class Stream:
    """One connection's writer: the session frames a new segment of it replays, and its open segment."""

    __slots__ = (
        "charged", "counts", "direct", "hello", "next_size", "owner", "schema", "segment", "session_bytes", "stacks",
        "stats", "strings", "tracks", "unsynced",
    )  # fmt: skip

    def __init__(self, owner: int, counts: TrackCounts, hello: bytes, first_size: int) -> None:
        self.owner = owner
        #: The process's counts per track id.
        self.counts = counts
        self.hello = hello
        #: SCHEMA and STRINGS frames, each kind end to end in one buffer: tables only grow, and a hostile peer's
        #: thousands of small frames would cost an object each (``keep``).
        self.schema = bytearray()
        self.strings = bytearray()
        #: STACKS frames since the last that reset the stack table, end to end as the strings are.
        self.stacks = bytearray()
        self.tracks: dict[int, bytes] = {}
        self.stats = b""
        #: Bytes a new segment opens with: the preamble and every frame above.
        self.session_bytes = len(_PREAMBLE) + len(hello)
        self.segment: Segment | None = None
        #: The connection reads straight into ``segment`` (``Store.open_direct``): its frames are stored where they are.
        self.direct = False
        self.next_size = first_size
        #: Segments sealed since the last FLUSH, to sync at the next (``fsync`` flush).
        self.unsynced: list[Segment] = []
        #: Bytes of its connection's tables counted against the capacity (``Store.charge_tables``).
        self.charged = 0

    @property
    def memory_bytes(self) -> int:
        """About the memory its session frames take, at most what they take (a bytes object and a dict entry a
        track)."""
        return (
            self.session_bytes
            + TRACK_FRAME_BYTES * len(self.tracks)
            + len(self.schema) // 8
            + len(self.strings) // 8
            + len(self.stacks) // 8
        )

    def session_frames(self) -> Iterator[bytes | bytearray]:
        yield _PREAMBLE
        yield self.hello
        yield self.schema
        yield self.strings
        yield self.stacks
        yield from self.tracks.values()
        if self.stats:
            yield self.stats

    def keep(self, frame: bytes | memoryview, kind: SessionKind, track_id: int, ended: bool) -> bytes | memoryview:
        """Keep a SCHEMA, STRINGS, STACKS, TRACK or STATS frame (header included) for the stream's next segments to open
        with (a TRACK frame that ends its track takes the track's out, a STRINGS frame that resets the table the
        earlier ones); returns the bytes its open segment takes."""
        data = frame
        if kind == "schema":
            self.schema += frame
            self.session_bytes += len(frame)
        elif kind == "strings":
            self.strings += frame
            self.session_bytes += len(frame)
        elif kind == "strings_reset":  # the client started its table again: new segments replay only the new one
            self.session_bytes += len(frame) - len(self.strings)
            self.strings = bytearray(frame)
        elif kind == "stacks":
            self.stacks += frame
            self.session_bytes += len(frame)
        elif kind == "stacks_reset":  # the client started its stack table again: as a reset of the strings
            self.session_bytes += len(frame) - len(self.stacks)
            self.stacks = bytearray(frame)
        elif kind == "track":
            old = self.tracks.pop(track_id, b"")
            self.session_bytes -= len(old)
            if not ended:
                self.tracks[track_id] = data = bytes(frame)
                self.session_bytes += len(data)
        else:
            self.session_bytes += len(frame) - len(self.stats)
            self.stats = data = bytes(frame)
        return data

    def detach(self) -> None:
        """The stream writes into no segment (its open one was sealed, dropped or evicted)."""
        self.segment = None
        self.direct = False
