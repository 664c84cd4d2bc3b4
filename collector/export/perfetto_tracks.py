"""The tracks of a Perfetto trace (``PerfettoTracks``): a uuid each, and the descriptor of each written before the
first event on it: a process track per pid shown, a thread track per thread, a track per task lane and source, a counter
track per counter name under the track it was recorded on, a track per async slice name and id."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Final

import orjson
from ringtrace.collector.export import protobuf as pb
from ringtrace.collector.export.perfetto_protos import (
    COUNTER,
    PARENT_UUID,
    PID,
    PROCESS,
    PROCESS_LABELS,
    PROCESS_NAME,
    SIBLING_MERGE_BEHAVIOR,
    SIBLING_MERGE_BEHAVIOR_NONE,
    SIBLING_ORDER_RANK,
    THREAD,
    THREAD_NAME,
    TID,
    TRACK_DESCRIPTOR,
    TRACK_NAME,
    UUID,
    trace_packet,
)
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.frame_walk import ProcessView, first_showing, process_label
from ringtrace.wire.model import THREAD_TRACK, TrackInfo

__all__ = ["PerfettoTracks"]

#: Async tracks whose descriptor was written, remembered (one forgotten is described again, the same).
_MAX_ASYNC_TRACKS: Final = 4096
#: Uuids of async tracks, hashed from process, name and id, have the top bit set; other tracks count up from 1.
_HASHED_UUID: Final = 1 << 63
_MAX_INT32: Final = 2**31 - 1


class PerfettoTracks:
    """The tracks described so far (a uuid each), and the descriptors of those described since the last chunk."""

    def __init__(self, walk: EventWalk) -> None:
        self._walk = walk
        self._last_uuid = 0
        #: By the pid shown.
        self._process_uuids: dict[int, int] = {}
        #: The first known process showing each pid (made on first use).
        self._first_showing: dict[int, ProcessView] | None = None
        self._track_uuids: dict[tuple[int, int], int] = {}
        self._counter_uuids: dict[tuple[int, int, str], int] = {}
        self._async_uuids: OrderedDict[tuple[int, str, str], int] = OrderedDict()
        #: Pids past int32 (aliases of an OS pid hundreds of processes share) -> the int32 pid shown instead.
        self._int32_pids: dict[int, int] = {}
        self._next_int32_pid = _MAX_INT32
        self._taken_pids: set[int] | None = None
        self._descriptors: list[bytes] = []

    def take_descriptors(self) -> list[bytes]:
        """The descriptor packets made since the last call (each written before the first event on its track)."""
        descriptors, self._descriptors = self._descriptors, []
        return descriptors

    def _describe(self, descriptor: bytes) -> None:
        self._descriptors.append(trace_packet(pb.message(TRACK_DESCRIPTOR, descriptor)))

    def _new_uuid(self) -> int:
        self._last_uuid += 1
        return self._last_uuid

    def _process_uuid(self, process: ProcessView) -> int:
        """The track of the process, one per pid shown (OTLP data of a ringtrace client's process shows its pid),
        named after the first known of those that show it."""
        uuid = self._process_uuids.get(process.trace_pid)
        if uuid is None:
            if self._first_showing is None:
                self._first_showing = first_showing(self._walk.processes)
            process = self._first_showing.get(process.trace_pid, process)
            uuid = self._process_uuids[process.trace_pid] = self._new_uuid()
            label = process_label(process)
            described = pb.uint(PID, self._pid(process)) + pb.string(PROCESS_NAME, label)
            described += pb.string(PROCESS_LABELS, process.host)
            rank = pb.uint(SIBLING_ORDER_RANK, min(process.uid, _MAX_INT32))  # in the order they first connected
            self._describe(pb.uint(UUID, uuid) + pb.message(PROCESS, described) + rank)
        return uuid

    def _pid(self, process: ProcessView) -> int:
        """The pid Perfetto shows, an int32: the snapshot's; for a pid past int32 (the wire protocol allows it, and
        the pids shown for processes that share an OS pid grow past it after 512 of them), one of its own, counted
        down from the top of int32, that no process of the snapshot has."""
        pid = process.trace_pid
        if 0 <= pid <= _MAX_INT32:
            return pid
        shown = self._int32_pids.get(pid)
        if shown is None:
            if self._taken_pids is None:
                self._taken_pids = {p.trace_pid for p in self._walk.view.processes.values()}
            while self._next_int32_pid in self._taken_pids:
                self._next_int32_pid -= 1
            shown = self._int32_pids[pid] = self._next_int32_pid
            self._next_int32_pid -= 1
        return shown

    def track_uuid(self, process: ProcessView, track: TrackInfo) -> int:
        """A thread's track, a task lane's (with its thread), or another track of the process (a source)."""
        uuid = self._track_uuids.get((process.uid, track.track_id))
        if uuid is not None:
            return uuid
        track = process.tracks.get(track.track_id, track)  # the latest name, or the one of an ended track
        if track.kind == THREAD_TRACK and process.shares_thread(track) is None:
            parent = self._process_uuid(process)
            uuid = self._track_uuids[(process.uid, track.track_id)] = self._new_uuid()
            thread = pb.uint(PID, self._pid(process)) + pb.uint(TID, as_int64(track.thread_id))
            if track.name:
                thread += pb.string(THREAD_NAME, track.name)
            order = track.track_id if track.track_id >= 0 else _MAX_INT32  # (a stand-in: last)
            rank = pb.uint(SIBLING_ORDER_RANK, min(order, _MAX_INT32))  # in the order declared
            self._describe(pb.uint(UUID, uuid) + pb.message(THREAD, thread) + rank)
            return uuid
        thread_track = self._thread_of(process, track)
        parent = self.track_uuid(process, thread_track) if thread_track else self._process_uuid(process)
        uuid = self._track_uuids[(process.uid, track.track_id)] = self._new_uuid()
        described = pb.uint(UUID, uuid) + pb.uint(PARENT_UUID, parent) + pb.string(TRACK_NAME, track.name)
        # Tracks of one name stay apart (two sources may share a name), as they do in Chrome JSON.
        self._describe(described + pb.uint(SIBLING_MERGE_BEHAVIOR, SIBLING_MERGE_BEHAVIOR_NONE))
        return uuid

    def thread_ids(self, process: ProcessView, track: TrackInfo) -> tuple[int, int]:
        """The pid and tid Perfetto shows for the thread of ``track`` (its own, or a task lane's thread's): those of
        its thread track's descriptor."""
        track = process.tracks.get(track.track_id, track)
        thread = track if track.kind == THREAD_TRACK else (self._thread_of(process, track) or track)
        return self._pid(process), as_int64(thread.thread_id)

    def _thread_of(self, process: ProcessView, track: TrackInfo) -> TrackInfo | None:
        """A task lane's thread (its latest name, or the name its frames carry, or none); for another timeline's
        track of a thread, the thread's own track."""
        if track.kind == THREAD_TRACK:
            return process.shares_thread(track)
        if not track.parent or track.parent == track.track_id:
            return None
        thread = process.tracks.get(track.parent) or self._walk.tracks.get((process.uid, track.parent))
        if thread is None:
            return TrackInfo(track.parent, THREAD_TRACK, "", track.thread_id)
        return thread if thread.kind == THREAD_TRACK else None

    def counter_uuid(self, process: ProcessView, track: TrackInfo, name: str) -> int:
        """The counter track of ``name`` under the track it was recorded on."""
        key = (process.uid, track.track_id, name)
        uuid = self._counter_uuids.get(key)
        if uuid is None:
            parent = self.track_uuid(process, track)
            uuid = self._counter_uuids[key] = self._new_uuid()
            described = pb.uint(UUID, uuid) + pb.uint(PARENT_UUID, parent) + pb.string(TRACK_NAME, name)
            self._describe(described + pb.message(COUNTER, b""))
        return uuid

    def async_uuid(self, process: ProcessView, name: str, async_id: str) -> int:
        key = (process.uid, name, async_id)
        uuid = self._async_uuids.get(key)
        if uuid is not None:
            self._async_uuids.move_to_end(key)
            return uuid
        digest = hashlib.blake2b(orjson.dumps(key), digest_size=8).digest()
        uuid = self._async_uuids[key] = int.from_bytes(digest, "little") | _HASHED_UUID
        if len(self._async_uuids) > _MAX_ASYNC_TRACKS:
            self._async_uuids.popitem(last=False)
        parent = self._process_uuid(process)
        self._describe(pb.uint(UUID, uuid) + pb.uint(PARENT_UUID, parent) + pb.string(TRACK_NAME, name))
        return uuid


def as_int64(value: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value
