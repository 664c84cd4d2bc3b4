"""Sources, as GaBIEn's TimeLogger has them: a named activity on a track of its own, opened and closed from any thread.

    gpu = tl.source("GPU queue")     # once, at startup: the slow part
    gpu.open()                       # then cheaply, from any thread; a source may move between threads
    ...
    gpu.close()

A source's *activity* starts at 0 and goes up by one at each ``open()`` and down by one at each ``close()``. The
snapshot shows each open..close as a slice on the source's track; activity above 1 shows as nested slices flagged
with their activity, and a close with nothing open is counted (``source_anomalies``) and shown as an instant, never
raised. ``open`` and ``close`` are one ``list.extend`` each on the source's own buffer, which is atomic, so no lock
is taken whatever thread calls them; a buffer holding its timeline's ``max_buffered_events`` refuses the event,
counted as dropped, as a thread's does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.wire.model import SOURCE_CLOSE, SOURCE_OPEN, SOURCE_TRACK, THREAD_TRACK, TrackInfo, new_track_id

if TYPE_CHECKING:
    from types import TracebackType

    from ringtrace.client.recording.tracks import Recording

__all__ = ["Source"]

_now = time.monotonic_ns
_wake_flusher = FLUSHER.wake


class Source:
    """A named activity on its own track; made by ``Timeline.source(name)``.

    Usable as a context manager too: ``with gpu:`` opens and closes it.
    """

    __slots__ = ("__weakref__", "_label", "_recording", "track")

    def __init__(self, name: str, recording: Recording, thread_id: int = 0) -> None:
        self._label = name
        #: With a ``thread_id``, a track that shows with that OS thread's (a sampler's samples of it).
        kind = THREAD_TRACK if thread_id else SOURCE_TRACK
        self.track = TrackInfo(new_track_id(), kind, name, thread_id)
        #: How it records into its buffer in its timeline (``tracks.Recording``), or into nothing while nothing
        #: listens; its timeline sets it.
        self._recording = recording

    @property
    def name(self) -> str:
        return self._label

    def open(self) -> None:
        """The activity goes up by one, now."""
        sink, limit, wake_at, count_full = self._recording  # as close(): a shared helper would cost a call
        held = len(sink)
        if held < limit:
            now = _now()
            sink.extend((SOURCE_OPEN, self._label, now, now, None))
            if held == wake_at:
                _wake_flusher()
        else:
            count_full()

    def close(self) -> None:
        """The activity goes down by one, now (a close with nothing open is counted by the collector)."""
        sink, limit, wake_at, count_full = self._recording
        held = len(sink)
        if held < limit:
            now = _now()
            sink.extend((SOURCE_CLOSE, self._label, now, now, None))
            if held == wake_at:
                _wake_flusher()
        else:
            count_full()

    def __enter__(self) -> Source:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Source({self._label!r})"
