"""Paired events to slices, for every snapshot format: Gecko markers and TimeLogger source activity.

A marker START pairs with the next END of the same name on its track, nesting counted (a stack per name); a source
OPEN pairs with the next CLOSE on the source's track (a stack: activity above 1 nests, each slice flagged with the
activity it opened at). Pairs become slices (``X``) when their end arrives; what is still open at the end of a
snapshot is shown open-ended (``B``, no end). An END or CLOSE with nothing open is an anomaly: shown as an instant,
and counted per process (``unmatched_marker_ends``, ``source_anomalies``), never raised; with a ``window``, only one
in the window is (one outside it may have its start in a frame the walk did not read: no anomaly).

Frames are walked in the order they arrived, so each track's events reach one ``Pairing`` in the order recorded,
whatever their timestamps (a marker made after the fact carries an earlier one). State is kept per track, keyed by
process uid and track id (not by thread id: a thread id may be reused by a later thread), and counts per process uid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ringtrace.collector.read.frame_walk import Shown
from ringtrace.collector.read.selection import EventFilter

__all__ = ["Pairing", "TrackKey"]

#: (process uid, track id)
TrackKey = tuple[int, int]


@dataclass
class _Open:
    ts: int
    name: str
    args: dict[str, Any] | None


@dataclass
class Pairing:
    """Per-track state across the frames of one snapshot."""

    _markers: dict[TrackKey, dict[str, list[_Open]]] = field(default_factory=dict)
    _sources: dict[TrackKey, list[_Open]] = field(default_factory=dict)
    #: Anomalies per process uid.
    unmatched_marker_ends: dict[int, int] = field(default_factory=dict)
    source_anomalies: dict[int, int] = field(default_factory=dict)
    #: A snapshot's window, if it has one: an end with nothing open outside it is left out, not counted.
    window: EventFilter | None = None

    def marker(
        self, shape: str, name: str, ts: int, args: dict[str, Any] | None, track: TrackKey, process: int
    ) -> Shown | None:
        """What a ``marker_start``/``marker_end`` on ``track`` completes (None while a start waits for its end)."""
        stacks = self._markers.setdefault(track, {})
        if shape == "marker_start":
            stacks.setdefault(name, []).append(_Open(ts, name, args))
            return None
        opened = stacks.get(name)
        if not opened:
            if self.window is not None and not self.window.in_window(ts):
                return None
            self.unmatched_marker_ends[process] = self.unmatched_marker_ends.get(process, 0) + 1
            extra = {"ringtrace": "marker end without a start (counted in unmatched_marker_ends)"}
            return ("i", name, ts, 0, {**(args or {}), **extra}, "", "")
        start = opened.pop()
        return _slice(start, ts, _merged(start.args, args))

    def source(self, shape: str, name: str, ts: int, track: TrackKey, process: int) -> Shown | None:
        """What a ``source_open``/``source_close`` on ``track`` completes (None while an open waits)."""
        opened = self._sources.setdefault(track, [])
        if shape == "source_open":
            activity = len(opened) + 1
            opened.append(_Open(ts, name, {"activity": activity, "overlap": True} if activity > 1 else None))
            return None
        if not opened:
            if self.window is not None and not self.window.in_window(ts):
                return None
            self.source_anomalies[process] = self.source_anomalies.get(process, 0) + 1
            return ("i", name, ts, 0, {"ringtrace": "close without an open (counted in source_anomalies)"}, "", "")
        start = opened.pop()
        return _slice(start, ts, start.args)

    def carried(self) -> Pairing:
        """What stays open, for the next walk (``POST /pop``: a start not yet ended waits for the next pop), with the
        anomaly counts of the next walk starting at zero."""
        return Pairing(self._markers, self._sources)

    def forget(self, processes: set[int]) -> None:
        """Drop what is open of processes that are gone."""
        for table in (self._markers, self._sources):
            for track in [track for track in table if track[0] in processes]:
                del table[track]

    def overflow(self, keep: int) -> list[tuple[TrackKey, Shown]]:
        """Take out the oldest open slices past ``keep``, open-ended (what a pop cannot carry on without bound)."""
        opened = [(start.ts, track, name, start) for track, stacks in self._markers.items()
                  for name, starts in stacks.items() for start in starts]  # fmt: skip
        opened += [(start.ts, track, "", start) for track, starts in self._sources.items() for start in starts]
        if len(opened) <= keep:
            return []
        opened.sort(key=lambda item: item[0])
        taken = []
        for _, track, name, start in opened[: len(opened) - keep]:
            starts = self._markers[track][name] if name else self._sources[track]
            starts.remove(start)
            taken.append((track, _begin(start)))
        return taken

    def still_open(self) -> list[tuple[TrackKey, Shown]]:
        """What never ended by the snapshot's end: open-ended slices, each with its track."""
        events = []
        for track, stacks in self._markers.items():
            for opened in stacks.values():
                events += [(track, _begin(start)) for start in opened]
        for track, opened in self._sources.items():
            events += [(track, _begin(start)) for start in opened]
        return events


def _merged(start: dict[str, Any] | None, end: dict[str, Any] | None) -> dict[str, Any] | None:
    if not end:
        return start
    return {**(start or {}), **end}


def _slice(start: _Open, end_ts: int, args: dict[str, Any] | None) -> Shown:
    return ("X", start.name, start.ts, max(end_ts - start.ts, 0), args or None, "", "")


def _begin(start: _Open) -> Shown:
    args = {**(start.args or {}), "ringtrace": "not ended by the time of the snapshot"}
    return ("B", start.name, start.ts, 0, args, "", "")
