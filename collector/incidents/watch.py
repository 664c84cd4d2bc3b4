"""The rules watched on what is stored: the events that meet a rule's condition, as ``Firing``s, found off the event
loop after ingest stored them (clients pay nothing).

Theory of operation
-------------------
A ``RuleWatch`` follows the stored segments as the live tail does (``read/tail.py``): a cursor per segment, how far it
has read and the session decoder of its tables (a segment decodes alone). At each ``step`` (the engine runs one every
~100 ms on a worker thread, the segments it reads pinned: ``to_read``) it reads what each segment gained since, up to
about ``max_step_bytes`` in all (the rest waits for the next step): the segment's index says where its EVENTS frames
are, the decoder is given the bytes between them (session frames: strings, kinds, tracks) and each EVENTS frame is
judged where it is stored, in two passes. The first (``frame_match.py``, in C where built, without the GIL) finds the
frame's candidates from its kind, name and duration columns (and counters' values) against the segment's compiled
criteria (``criteria.py``), without an object per event, a run of frames at once (``match_run``: the frames between two
gaps of session frames, one call), so that the Python work of a step grows with the candidates and the gaps, not with
the events or frames. A run's candidates are then judged rule by rule where no Python is needed (``rule_verdicts.py``,
in C where built, without the GIL: durations, error statuses, ``tl.incident`` calls, messages' text globs on their
rendered text (``text_match.py``), each rule's place among its firings of the step, and what is past it counted), so
that Python sees the firings made and what it alone can judge; the second pass (``judge.py``) decodes those candidates'
args and judges them (a message whose values only Python renders, counters' crossings where the verdicts did not judge
them), and makes each firing.

A new segment begins with its process's tables replayed: where those bytes are the ones its previous segment began
with and that segment's decoder read nothing more, the new segment takes that decoder over (``_decoder``) instead of
decoding the same tables again.

Segments stored before the watch began start at their end; their decoder reads the session frames before the cursor
only once the segment grows. Newer segments are read from their start. A segment that leaves (the ring overwrote it,
or it was removed on request) before the watch read it whole has its events not read counted in ``unread_events``,
never silent (exactly where ``step`` is given the store's ``kept`` counts); a frame that cannot be decoded counts its
events in ``undecodable_events``; segments numbered between two the watch saw, that it never saw (stored and gone
between two steps), count in ``unseen_segments``.

A step reads at most ``max_step_bytes``: a watch slower than ingest falls behind (what the ring overwrote is kept
for it within a bound: ``watch_hold.py``) and what leaves before it reads it is counted, rather than holding up ingest.

Crashes and ``POST /incidents`` are not stored events: the engine makes their firings. The engine holds each rule to
its limit; a step makes no more than ``max_per_minute`` firings of a rule, and counts the rest (``take_surplus``).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any, Final

import msgpack
from ringtrace.collector.incidents.criteria import RulePlan, SegmentCriteria
from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.incidents.frame_match import RUN_SLOTS, candidates, match_frame, match_run
from ringtrace.collector.incidents.judge import StoredEvent
from ringtrace.collector.incidents.rule_verdicts import LOG_SLOTS, MADE, rule_verdicts, verdicts
from ringtrace.collector.incidents.rules import RuleSet
from ringtrace.collector.incidents.watch_progress import Cursor, Progress, advance, feed, let_go, to_read
from ringtrace.collector.read.frame_walk import MAX_WALL_NS, ProcessView
from ringtrace.collector.store.ring import SegmentView
from ringtrace.collector.store.segments import INDEX_ENTRY
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frame_types import FRAME_HEADER
from ringtrace.wire.frames import Events
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["MAX_STEP_BYTES", "RuleWatch"]

MAX_STEP_BYTES: Final = 8 * 1024 * 1024


class RuleWatch:
    """See the module docstring. ``step`` runs on a worker thread, one at a time.

    Args:
        rules: the rules in force.
        limits: what a segment's session decoder allows (the collector's stream limits).
        max_step_bytes: stored bytes a step reads at most.
    """

    def __init__(self, rules: RuleSet, limits: Limits, *, max_step_bytes: int = MAX_STEP_BYTES) -> None:
        self._plan = RulePlan(rules)
        self._limits = limits
        self._max_step_bytes = max_step_bytes
        self._progress = Progress()
        #: The last step left stored bytes to read: it stopped at ``max_step_bytes``, or some were not pinned for it.
        self.behind = False

    @property
    def rules(self) -> RuleSet:
        return self._plan.rules

    @property
    def unread_events(self) -> int:
        """Events stored since the watch began that left (overwritten, or removed on request) before it read them:
        exact where ``step`` is given ``kept``, else those of the segments it saw, as it last saw them."""
        progress = self._progress
        owners = progress.missed.keys() | progress.departed_unread.keys()
        return sum(max(progress.missed.get(o, 0), progress.departed_unread.get(o, 0)) for o in owners)

    @property
    def undecodable_events(self) -> int:
        """Events of frames that could not be decoded (not judged)."""
        return self._progress.undecodable_events

    def unread_of(self, seq: int, events: int) -> int:
        """Of the segment ``seq``, holding ``events``, the events the watch has yet to read (none before it began)."""
        cursor = self._progress.cursors.get(seq)
        if cursor is None:  # (stored since the last step: the watch has not seen it)
            return events if self._progress.began else 0
        return 0 if cursor.broken else max(0, events - cursor.read_events)

    def take_surplus(self) -> dict[str, int]:
        """Per rule, the firings not made since last taken: past its ``max_per_minute`` in a step (``judge.py``),
        to be counted suppressed."""
        judge = self._progress.judge
        judge.fold_surplus()
        surplus, judge.surplus = judge.surplus, {}
        return surplus

    @property
    def unseen_segments(self) -> int:
        """Segments numbered between two the watch saw that it never saw (stored and gone between two steps)."""
        return self._progress.unseen_segments

    def with_rules(self, rules: RuleSet) -> RuleWatch:
        """A watch of ``rules`` that goes on from where this one is (its cursors, counters' last values and counts):
        a reload. Called between two steps (not while one runs); this one is not to be stepped again. Events stored
        before the reload and not read yet are judged by the new rules."""
        watch = RuleWatch(rules, self._limits, max_step_bytes=self._max_step_bytes)
        watch._progress = self._progress
        for cursor in self._progress.cursors.values():
            cursor.criteria = None  # compiled for the old rules
        return watch

    def step(
        self, segments: Iterable[tuple[ProcessView, SegmentView]], kept: Mapping[int, int] | None = None
    ) -> list[Firing]:
        """The firings of the events stored since the last step, segment by segment (oldest first).

        Args:
            segments: every stored segment with its process, oldest first, pinned (those ``to_read`` chose at
                least: the others without their bytes).
            kept: per process, the events the store has kept of it so far (``Store.kept_events``), taken with the
                segments: what the watch has read or can still read must add up to what was kept since it began,
                the rest left before it read it (``unread_events``). Without it, only what it saw is counted.
        """
        segments = list(segments)
        progress = self._progress
        if not progress.began:
            self.begin(segments, kept)
            return []
        self._depart({segment.seq for _, segment in segments})
        progress.judge.new_step(time.time_ns(), self._plan.rules.rules)
        firings: list[Firing] = []
        budget = self._max_step_bytes
        self.behind = False
        accounted = dict(progress.departed_read)
        for process, segment in segments:
            cursor = progress.cursors.get(segment.seq)
            if cursor is None:
                cursor = progress.cursors[segment.seq] = Cursor(segment.owner, 0, None, 0, 0)
            cursor.seen_events = segment.events
            accounted[segment.owner] = accounted.get(segment.owner, 0) + segment.events - cursor.counted_from
            if cursor.broken:  # frames after one that could not be decoded cannot be either
                progress.undecodable_events += segment.events - cursor.read_events
                cursor.read_events, cursor.read_entries = segment.events, segment.entries
                continue
            if cursor.offset >= segment.used:  # (nothing new)
                continue
            if not segment.size:  # not pinned (``to_read``: past what a step reads): the next step's
                self.behind = True
                continue
            if self._plan.empty:  # nothing to judge: skip ahead (the decoder catches up if rules come)
                cursor.offset, cursor.decoder, cursor.criteria = segment.used, None, None
                advance(cursor, segment)
                continue
            if budget <= 0:
                self.behind = True
                continue
            end = min(segment.used, cursor.offset + budget)
            budget -= end - cursor.offset
            self.behind = self.behind or end < segment.used
            self._read(process, segment, cursor, end, firings)
        for owner, count in (kept or {}).items():
            missed = count - progress.baseline.get(owner, 0) - accounted.get(owner, 0)
            progress.missed[owner] = max(progress.missed.get(owner, 0), missed)
        progress.judge.fold_surplus()
        let_go(segments, progress.cursors, progress.latest_criteria)
        for owner in progress.prefixed.keys() - progress.latest_criteria.keys():
            del progress.prefixed[owner]
        return firings

    def to_read(self, segments: Iterable[tuple[int, int]]) -> set[int]:
        """Of the segments a ``step`` is to be given, ``(seq, used)`` each, oldest first, those whose bytes it reads:
        only they need be pinned (a view without bytes, ``size`` 0, is not read). Called between two steps."""
        return to_read(self._progress, self._plan.empty, self._max_step_bytes, segments)

    def begin(self, segments: Iterable[tuple[ProcessView, SegmentView]], kept: Mapping[int, int] | None = None) -> None:
        """What is stored now is not the watch's to judge: each segment starts at its end (a first ``step`` does
        this, if ``begin`` was not called). Cheap enough for the event loop: no frame is read."""
        progress = self._progress
        if progress.began:
            return
        segments = list(segments)
        self._depart({segment.seq for _, segment in segments})
        progress.began = True
        progress.baseline = dict(kept or {})
        for _, segment in segments:
            progress.cursors[segment.seq] = Cursor(
                segment.owner, segment.used, None, segment.events, segment.events, segment.entries, segment.events
            )

    def _depart(self, present: set[int]) -> None:
        """Count what the segments gone since the last step held that the watch had read, and had not."""
        progress = self._progress
        for seq, gone in list(progress.cursors.items()):
            if seq not in present:
                del progress.cursors[seq]
                owner = gone.owner
                read = gone.read_events - gone.counted_from
                progress.departed_read[owner] = progress.departed_read.get(owner, 0) + read
                unread = max(0, gone.seen_events - gone.read_events)
                progress.departed_unread[owner] = progress.departed_unread.get(owner, 0) + unread
        if progress.began:
            edge = progress.newest_seq
            for seq in sorted(seq for seq in present if seq > progress.newest_seq):
                progress.unseen_segments += seq - edge - 1
                edge = seq
        progress.newest_seq = max([progress.newest_seq, *present])

    def _read(
        self, process: ProcessView, segment: SegmentView, cursor: Cursor, end: int, firings: list[Firing]
    ) -> None:
        """Judge the segment's EVENTS frames that begin between the cursor and ``end``; the cursor moves past them.

        The decoder is given the session frames alone (the bytes between EVENTS frames, found by the segment's
        index): the EVENTS frames are read where they are stored, never copied, with the tables as they are then, a
        run of them at once (``match_run``: one call however many frames, until a gap of session frames).
        """
        buffer = memoryview(segment.buffer)
        size, step = segment.size, INDEX_ENTRY.size
        try:
            decoder = cursor.decoder
            if decoder is None:
                decoder = cursor.decoder = self._decoder(segment, cursor, buffer)
            position = cursor.offset
            while cursor.read_entries < segment.entries:
                entry = cursor.read_entries
                offset, length, _, count, _, _ = INDEX_ENTRY.unpack_from(buffer, size - step * (entry + 1))
                if offset >= end:  # (one that begins before the end is read whole: a step reads one at least)
                    break
                feed(cursor, buffer[position:offset])
                position = max(position, offset)
                criteria = self._criteria(cursor, decoder.tables)
                if criteria.columns is not None:
                    found, entries, events, position = match_run(
                        buffer, size, segment.entries, entry, position, end, criteria.columns, criteria.criteria
                    )
                    if entries:
                        cursor.read_entries += entries
                        cursor.read_events += events
                        self._judge(process, decoder.tables, criteria, buffer, found, firings)
                        continue
                frame = Events.decode_body(buffer[offset + FRAME_HEADER.size : offset + length])
                self._frame(process, criteria, decoder.tables, frame, firings)
                position = offset + length
                cursor.read_entries += 1
                cursor.read_events += count
            if end > position:  # session frames only: every EVENTS frame stored has its index entry
                feed(cursor, buffer[position:end])
                position = end
            cursor.offset = position
        except ProtocolError:  # the rest of the segment cannot be decoded: its events are counted, not judged
            self._progress.undecodable_events += segment.events - cursor.read_events
            cursor.read_events, cursor.read_entries = segment.events, segment.entries
            cursor.broken, cursor.decoder, cursor.criteria, cursor.prefix = True, None, None, None

    def _decoder(self, segment: SegmentView, cursor: Cursor, buffer: memoryview) -> SessionDecoder:
        """A decoder of the segment's session frames before the cursor (its events were there before, or it is
        new). A new segment begins with its process's tables replayed: where those bytes are the ones the
        process's previous segment began with, and its decoder read nothing more, that decoder is taken over
        instead of reading them again (the previous segment's cursor makes a new one if it ever needs one)."""
        progress = self._progress
        if cursor.offset == 0 and segment.entries:
            first = INDEX_ENTRY.unpack_from(buffer, segment.size - INDEX_ENTRY.size)[0]
            prefix = bytes(buffer[:first])
            holder = progress.prefixed.get(cursor.owner)
            progress.prefixed[cursor.owner] = cursor
            if holder is not None and holder is not cursor and holder.prefix == prefix and holder.decoder is not None:
                cursor.decoder, cursor.prefix, cursor.offset = holder.decoder, prefix, first
                holder.decoder = holder.criteria = holder.prefix = None
                return cursor.decoder
            cursor.decoder, cursor.prefix = SessionDecoder(self._limits, live=False), None
            feed(cursor, buffer[:first])
            cursor.prefix, cursor.offset = prefix, first
            return cursor.decoder
        decoder = cursor.decoder = SessionDecoder(self._limits, live=False)
        position = 0
        for offset, length, *_ in islice(segment.index(), cursor.read_entries):
            feed(cursor, buffer[position:offset])
            position = offset + length
        feed(cursor, buffer[position : cursor.offset])
        return decoder

    def _criteria(self, cursor: Cursor, tables: StreamTables) -> SegmentCriteria:
        """The cursor's criteria, up to date with ``tables``."""
        if cursor.criteria is None:
            latest = self._progress.latest_criteria.get(cursor.owner)
            cursor.criteria = SegmentCriteria.following(latest, self._plan, tables)
        criteria = cursor.criteria = cursor.criteria.sync(tables)
        self._progress.latest_criteria[cursor.owner] = criteria
        return criteria

    def _judge(
        self,
        process: ProcessView,
        tables: StreamTables,
        criteria: SegmentCriteria,
        buffer: memoryview,
        found: bytes,
        firings: list[Firing],
    ) -> None:
        """Judge a run's candidates (``match_run``): the rules' verdicts first, then the candidates they left to
        Python or made a firing of."""
        judge = self._progress.judge
        rows = memoryview(found).cast("q")
        count = len(rows) // RUN_SLOTS
        counters = judge.room_for_counters() >= count  # (so that none is forgotten during the run)
        known, known_values = judge.known(process.uid, criteria.counter_keys) if counters else (array("q"), array("d"))
        judged = rule_verdicts(
            found, buffer, criteria.rule_tables, judge.room, judge.surplus_counts, judge.now_ns,
            process.clock_offset_ns, known, known_values, counters,
        )  # fmt: skip
        by_candidate: dict[int, list[tuple[int, int]]] = {}
        for index, place, verdict in verdicts(judged.verdicts):
            by_candidate.setdefault(index, []).append((place, verdict))
        log, values = memoryview(judged.log).cast("q"), memoryview(judged.log_values).cast("d")
        names = {key: name for name, key in criteria.counter_keys.items()} if values else {}
        # The counters' values are remembered in order, each candidate's after its firings (they judged it against
        # the value before): between two candidates with verdicts, only the last value of each counter, in the order
        # of their last values, as remembering each would leave them (none is forgotten during a run: see above).
        logged_at, last = 0, dict[tuple[int, int], float]()
        for index in [*sorted(by_candidate), count]:
            while logged_at < len(values) and log[logged_at * LOG_SLOTS] < index:
                counter = (log[logged_at * LOG_SLOTS + 1], log[logged_at * LOG_SLOTS + 2])
                last.pop(counter, None)
                last[counter] = values[logged_at]
                logged_at += 1
            for (track_id, key), value in last.items():
                judge.remember((process.uid, track_id, names[key]), value)
            last.clear()
            rules = by_candidate.get(index)
            if rules is not None:
                kind_id, name_id, ts, dur, args_start, args_end, track_id, first_ts = rows[
                    index * RUN_SLOTS : (index + 1) * RUN_SLOTS
                ]
                self._candidate(
                    process, tables, criteria, track_id, kind_id, name_id, first_ts + ts, dur,
                    buffer[args_start:args_end], firings, rules, remember=not counters,
                )  # fmt: skip

    def _frame(
        self,
        process: ProcessView,
        criteria: SegmentCriteria,
        tables: StreamTables,
        frame: Events,
        firings: list[Firing],
    ) -> None:
        """Judge one frame a run did not take (``match_frame`` decides it, the Python twin where the C one cannot)."""
        found = None
        if criteria.columns is not None:
            found = match_frame(frame.payload, frame.count, criteria.columns, frame.track_id, criteria.criteria)
        if found is None:
            self._progress.undecodable_events += frame.count
            return
        payload = memoryview(frame.payload)
        for _, kind_id, name_id, ts, dur, args_start, args_end in candidates(found):
            self._candidate(
                process, tables, criteria, frame.track_id, kind_id, name_id, frame.first_ts_ns + ts, dur,
                payload[args_start:args_end], firings,
            )  # fmt: skip

    def _candidate(
        self,
        process: ProcessView,
        tables: StreamTables,
        criteria: SegmentCriteria,
        track_id: int,
        kind_id: int,
        name_id: int,
        ts: int,
        dur: int,
        args: memoryview,
        firings: list[Firing],
        verdicts: list[tuple[int, int]] | None = None,
        *,
        remember: bool = True,
    ) -> None:
        """Judge a candidate for the rules it may meet, or for those of its ``verdicts`` (rule's place, verdict)
        only, those whose verdict is ``MADE`` made already."""
        kind = tables.kinds.get(kind_id)
        watchers = criteria.watchers(kind_id, name_id)
        made: set[int] = set()
        if verdicts is not None:
            places = {place for place, _ in verdicts}
            made = {place for place, verdict in verdicts if verdict == MADE}
            watchers = [watcher for watcher in watchers if watcher.order in places]
        wall_ns = ts + process.clock_offset_ns
        if kind is None or not watchers or not 0 <= wall_ns <= wall_ns + dur <= MAX_WALL_NS:
            return
        track = tables.tracks.get(track_id)
        track_name = process.tracks.get(track_id, track).name if track is not None else str(track_id)
        name = tables.strings.get(name_id)
        event = StoredEvent(
            process, tables, track_id, track_name, kind,
            name if name is not None else f"<unknown string {name_id}>", wall_ns, dur, _args(args),
        )  # fmt: skip
        firings += self._progress.judge.firings(watchers, event, made, remember=remember)


def _args(value: memoryview) -> Any:
    """A candidate's args, decoded alone (the first pass checked them: an error is not expected)."""
    try:
        return msgpack.unpackb(value, raw=False, strict_map_key=False)
    except Exception:
        return None
