"""Paired events to slices, for the Chrome export: Gecko markers and TimeLogger source activity.

A marker START pairs with the next END of the same name on its track, nesting counted (a stack per name); a source
OPEN pairs with the next CLOSE on the source's track (a stack: activity above 1 nests, each slice flagged with the
activity it opened at). Pairs become complete (``X``) slices when their end arrives; what is still open at the end
of a snapshot is shown open-ended (``B`` with no ``E``). An END or CLOSE with nothing open is an anomaly: shown as
an instant, and counted per process (``unmatched_marker_ends``, ``source_anomalies``), never raised.

Frames are exported in the order they arrived, so each track's events reach one ``Pairing`` in the order recorded,
whatever their timestamps (a marker made after the fact carries an earlier one). State is kept per track, keyed by
the caller (process and track id: a thread id may be reused by a later thread).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Pairing"]


@dataclass
class _Open:
    ts: float
    name: str
    args: dict[str, Any] | None


@dataclass
class Pairing:
    """Per-track state across the frames of one snapshot."""

    _markers: dict[object, tuple[int, int, dict[str, list[_Open]]]] = field(default_factory=dict)
    _sources: dict[object, tuple[int, int, list[_Open]]] = field(default_factory=dict)
    #: Anomalies per trace pid.
    unmatched_marker_ends: dict[int, int] = field(default_factory=dict)
    source_anomalies: dict[int, int] = field(default_factory=dict)

    def marker(
        self, shape: str, name: str, ts: float, pid: int, tid: int, args: Any, track: object = None
    ) -> dict[str, Any] | None:
        """The Chrome event a ``marker_start``/``marker_end`` completes (None while a start waits for its end)."""
        stacks = self._markers.setdefault((pid, tid) if track is None else track, (pid, tid, {}))[2]
        if shape == "marker_start":
            stacks.setdefault(name, []).append(_Open(ts, name, args))
            return None
        opened = stacks.get(name)
        if not opened:
            self.unmatched_marker_ends[pid] = self.unmatched_marker_ends.get(pid, 0) + 1
            extra = {"ringtrace": "marker end without a start (counted in unmatched_marker_ends)"}
            return _instant(name, ts, pid, tid, {**(args or {}), **extra})
        start = opened.pop()
        return _slice(start, ts, pid, tid, _merged(start.args, args))

    def source(
        self, shape: str, name: str, ts: float, pid: int, tid: int, track: object = None
    ) -> dict[str, Any] | None:
        """The Chrome event a ``source_open``/``source_close`` completes (None while an open waits)."""
        opened = self._sources.setdefault((pid, tid) if track is None else track, (pid, tid, []))[2]
        if shape == "source_open":
            activity = len(opened) + 1
            opened.append(_Open(ts, name, {"activity": activity, "overlap": True} if activity > 1 else None))
            return None
        if not opened:
            self.source_anomalies[pid] = self.source_anomalies.get(pid, 0) + 1
            extra = {"ringtrace": "close without an open (counted in source_anomalies)"}
            return _instant(name, ts, pid, tid, extra)
        start = opened.pop()
        return _slice(start, ts, pid, tid, start.args)

    def still_open(self) -> list[dict[str, Any]]:
        """What never ended by the snapshot's end: open-ended slices."""
        events = []
        for pid, tid, stacks in self._markers.values():
            for opened in stacks.values():
                events += [_begin(start, pid, tid) for start in opened]
        for pid, tid, opened in self._sources.values():
            events += [_begin(start, pid, tid) for start in opened]
        return events


def _merged(start: dict[str, Any] | None, end: dict[str, Any] | None) -> dict[str, Any] | None:
    if not end:
        return start
    return {**(start or {}), **end}


def _slice(start: _Open, end_ts: float, pid: int, tid: int, args: dict[str, Any] | None) -> dict[str, Any]:
    event = {"name": start.name, "ph": "X", "ts": start.ts, "dur": max(end_ts - start.ts, 0.0), "pid": pid, "tid": tid}
    if args:
        event["args"] = args
    return event


def _begin(start: _Open, pid: int, tid: int) -> dict[str, Any]:
    args = {**(start.args or {}), "ringtrace": "not ended by the time of the snapshot"}
    return {"name": start.name, "ph": "B", "ts": start.ts, "pid": pid, "tid": tid, "args": args}


def _instant(name: str, ts: float, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid, "args": args}
