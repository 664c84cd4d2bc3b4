"""A client stream fed to a store as ingest feeds it, for the store's and the live tail's tests."""

from __future__ import annotations

import itertools
from typing import Any

from ringtrace.collector.store.ring import Store
from ringtrace.wire.frames import EVENTS_HEADER, FRAME_HEADER, FrameType, Hello, Strings, Track, encode
from ringtrace.wire.model import INSTANT, THREAD_TRACK, KindRegistry, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder


def hello(instance: str) -> bytes:
    return encode(Hello(100, "host", f"proc-{instance}", instance, "boot", 1, 2, "test"))


class Client:
    """One client stream, encoded by the real encoder and fed to the store as ingest feeds it."""

    def __init__(self, store: Store, owner: int, tracks: int = 2, instance: str | None = None) -> None:
        self.store, self.owner = store, owner
        self.stream = store.open_stream(owner, hello(f"i{owner}" if instance is None else instance))
        # Its own kinds (the built-in ones), not this process's: other tests' typed events would grow its SCHEMA, and
        # the tables charged for it.
        self.encoder = StreamEncoder(max_events_per_frame=64, registry=KindRegistry())
        self.tracks = [TrackInfo(owner * 100 + t, THREAD_TRACK, f"t{t}", t + 1) for t in range(tracks)]
        self.ts = itertools.count(10**15, 1000)
        #: Per track id: the event indices sent, in order.
        self.sent: dict[int, list[int]] = {t.track_id: [] for t in self.tracks}
        for frame in self.encoder.prefix():
            self.feed(frame)

    def record(self, track_index: int, events: int, labels: int = 3) -> None:
        """``events`` instants on one track, each with its index in ``args`` and one of ``labels`` labels, as one or
        more EVENTS frames."""
        track = self.tracks[track_index]
        sent = self.sent[track.track_id]
        records: list[Any] = []
        for _ in range(events):
            ts = next(self.ts)
            # The padding makes events, not session frames (which hold every kind the process declared), fill segments.
            records += [INSTANT, f"tick{len(sent) % labels}", ts, ts, {"i": len(sent), "pad": "x" * 100}]
            sent.append(len(sent))
        batch = self.encoder.encode(track, records)
        for frame in [*batch.control, *(frame for frame, _ in batch.events)]:
            self.feed(frame)
        self.store.commit(self.stream)

    def feed(self, frame: bytes) -> None:
        _, frame_type = FRAME_HEADER.unpack_from(frame)
        body = frame[FRAME_HEADER.size :]
        if frame_type == FrameType.EVENTS:
            _, _, track_id, count, first, last = EVENTS_HEADER.unpack_from(body)
            self.store.events(self.stream, track_id, count, first, last, frame)
        elif frame_type == FrameType.TRACK:
            track = Track.decode_body(body)
            self.store.session_frame(self.stream, frame, kind="track", track_id=track.track_id, ended=track.ended)
        elif frame_type == FrameType.STRINGS:
            kind = "strings_reset" if Strings.decode_body(body).reset else "strings"
            self.store.session_frame(self.stream, frame, kind=kind)
        else:
            kind = {FrameType.SCHEMA: "schema", FrameType.STATS: "stats"}[frame_type]
            self.store.session_frame(self.stream, frame, kind=kind)  # type: ignore[arg-type]
