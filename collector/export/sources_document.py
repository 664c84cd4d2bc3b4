"""The ``GET /sources`` document: every process (connected or not) with its tracks, what is held of each and when,
and every loss counter, from the facts ``read/inventory.py`` gathers; with ``--jetstream``, the fleet's totals too
(``sources_totals``).

Pure functions: times are wall-clock ns (the process's clock offset applied, within what JSON takes: a client may
send any u64); a track with nothing stored has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from ringtrace.collector.read.event_walk import client_counts, store_counts
from ringtrace.collector.read.frame_walk import MAX_WALL_NS
from ringtrace.collector.read.inventory import ProcessFacts, TrackTimes
from ringtrace.collector.store.accounts import FOLDED_TRACK
from ringtrace.collector.store.ring import Counts
from ringtrace.wire.frames import Stats
from ringtrace.wire.model import ASYNC_TRACK, COUNTER_TRACK, SOURCE_TRACK, THREAD_TRACK

__all__ = ["sources_document", "sources_totals"]

_TRACK_KINDS: Final = {THREAD_TRACK: "thread", SOURCE_TRACK: "source", ASYNC_TRACK: "task", COUNTER_TRACK: "counter"}
#: The counters of a process's entry that a fleet's totals sum.
_SUMMED: Final = (*store_counts(Counts()), *client_counts(Stats(0, 0)))


def sources_document(
    processes: Iterable[ProcessFacts],
    counts: Mapping[tuple[int, int], Counts],
    times: Mapping[tuple[int, int], TrackTimes],
    rates: Mapping[int, tuple[float, float] | None],
) -> list[dict[str, Any]]:
    """Every process (connected or not) with its tracks: what is held, when, and every loss counter."""
    return [
        _process_entry(facts, counts, times, rates.get(facts.view.uid))
        for facts in sorted(processes, key=lambda p: p.view.uid)
    ]


def _process_entry(
    facts: ProcessFacts,
    counts: Mapping[tuple[int, int], Counts],
    times: Mapping[tuple[int, int], TrackTimes],
    rate: tuple[float, float] | None,
) -> dict[str, Any]:
    process = facts.view
    total = Counts()
    tracks = []
    track_ids = {track_id for uid, track_id in counts if uid == process.uid} | set(process.tracks)
    for track_id in sorted(track_ids):
        track_counts = counts.get((process.uid, track_id), Counts())
        total.add(track_counts)
        if track_id != FOLDED_TRACK:  # (tracks long gone, counted in their process's total alone)
            tracks.append(_track_entry(facts, track_id, track_counts, times.get((process.uid, track_id))))
    return {
        "pid": process.trace_pid,
        "os_pid": process.pid,
        "host": process.host,
        "process_name": process.name,
        "via": facts.via,
        "connections": facts.connections,
        "last_seen_wall_ns": facts.last_seen_wall_ns,
        "held_bytes": facts.held_bytes,
        **store_counts(total),
        **client_counts(process.client_stats),
        "events_per_s": None if rate is None else round(rate[0], 3),
        "bytes_per_s": None if rate is None else round(rate[1], 3),
        "first_wall_ns": min((t["first_wall_ns"] for t in tracks if t["first_wall_ns"] is not None), default=None),
        "last_wall_ns": max((t["last_wall_ns"] for t in tracks if t["last_wall_ns"] is not None), default=None),
        "tracks": tracks,
    }


def _track_entry(facts: ProcessFacts, track_id: int, counts: Counts, held: TrackTimes | None) -> dict[str, Any]:
    process = facts.view
    info = process.tracks.get(track_id) or (held.info if held else None) or facts.ended_tracks.get(track_id)
    entry: dict[str, Any] = {
        "track": track_id,
        "name": info.name if info else None,
        "kind": _TRACK_KINDS.get(info.kind, str(info.kind)) if info else None,
        "live": track_id in process.tracks and facts.live,
        **store_counts(counts),
        "first_wall_ns": None,
        "last_wall_ns": None,
    }
    if info is not None and info.kind == THREAD_TRACK:
        entry["thread_id"] = info.thread_id
    if held is not None:
        entry["first_wall_ns"] = min(max(held.first_ns + process.clock_offset_ns, 0), MAX_WALL_NS)
        entry["last_wall_ns"] = min(max(held.last_ns + process.clock_offset_ns, 0), MAX_WALL_NS)
    return entry


def sources_totals(
    entries: Iterable[Mapping[str, Any]], collectors: int, connections: int, capacity_bytes: int
) -> dict[str, Any]:
    """A fleet's totals (``--jetstream``), named as ``/stats`` names one collector's: its live ``collectors`` and
    their client ``connections``; the processes ``entries`` lists (``sources_document``), their bytes held
    (``used_bytes``) and every counter, summed; the stream's ``capacity_bytes``."""
    entries = list(entries)
    return {
        "collectors": collectors,
        "connections": connections,
        "processes": len(entries),
        "used_bytes": sum(entry["held_bytes"] for entry in entries),
        "capacity_bytes": capacity_bytes,
        **{key: sum(entry[key] for entry in entries) for key in _SUMMED},
    }
