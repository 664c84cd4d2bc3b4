"""Chrome trace JSON (the Trace Event Format), read into ``Recording``s (``recording.py``), one per process.

What ringtrace writes (``GET /snapshot``) and what other tools write (chrome://tracing, Perfetto's JSON export,
viztracer ...): an object holding ``traceEvents``, or a bare array of events, whose closing ``]`` may be missing.

Per pid a recording, per (pid, tid) a thread track, named by the ``process_name`` and ``thread_name`` metadata.
``X`` and ``B``/``E`` pairs (an ``E`` closes the innermost ``B`` of its thread) become spans; a ``B`` never ended
becomes a marker start (shown open-ended), an ``E`` with nothing open an unmatched marker end. ``i``/``I``/``n`` become
instants, ``C`` counters (a line per key of its args), ``b``/``e`` and ``S``/``F`` async slices, ``P`` samples (their
stack from the document's ``stackFrames``, by ``sf``: a frame's ``category`` ``file:line`` as ringtrace writes it, else
taken as its file). Other phases (flows, objects, ...) and entries that are no event are not shown: counted as
dropped, in the stream's STATS.

Times: ``ts`` and ``dur`` are microseconds. Where the document says what wall-clock time its 0 stands for
(``otherData.clock_origin_wall_ns``, as ringtrace writes it), events keep their wall-clock times; else the caller
pairs the last timestamp with the file's modification time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple

import orjson
from ringtrace.collector.foreign.recording import ForeignFormatError, Recording
from ringtrace.wire.model import (
    ASYNC_BEGIN,
    ASYNC_END,
    COUNTER,
    INSTANT,
    MARKER_END,
    MARKER_START,
    SAMPLE,
    SPAN,
    THREAD_TRACK,
)

__all__ = ["SYSTEM", "looks_like", "read"]

SYSTEM: Final = "Chrome trace JSON"
_INSTANTS: Final = frozenset({"i", "I", "n"})
_ASYNC: Final = {"b": ASYNC_BEGIN, "S": ASYNC_BEGIN, "e": ASYNC_END, "F": ASYNC_END}
#: Frames of a sample's stack read at most (``stackFrames`` may name a cycle).
_MAX_STACK_DEPTH: Final = 1024
_MAX_LINE: Final = 2**31 - 1
#: UTF-8's byte order mark, which some editors and Windows tools write first.
_BOM: Final = b"\xef\xbb\xbf"
#: Where an object's ``traceEvents`` key must start to be taken for one (writers put it first, or nearly).
_KEY_WITHIN: Final = 4096


def looks_like(data: bytes) -> bool:
    """Whether ``data`` starts as trace JSON does: an object with ``traceEvents`` near its start, or an array of
    objects."""
    head = data[:_KEY_WITHIN].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        return b'"traceEvents"' in head
    return head.startswith(b"[") and head[1:].lstrip(b" \t\r\n")[:1] in (b"{", b"]")


def read(data: bytes) -> list[Recording]:
    """A recording per process of the trace in ``data``.

    Raises:
        ForeignFormatError: ``data`` is not JSON, or holds no list of events.
    """
    document = _parse(data)
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise ForeignFormatError("Chrome trace JSON: 'traceEvents' is not a list of events")
    origin_ns = None
    if isinstance(document, dict) and isinstance(document.get("otherData"), dict):
        origin = document["otherData"].get("clock_origin_wall_ns")
        origin_ns = origin if type(origin) is int else None
    frames = document.get("stackFrames") if isinstance(document, dict) else None
    reader = _Reader(frames if isinstance(frames, dict) else {})
    for event in events:
        reader.event(event)
    return reader.recordings(origin_ns)


def _parse(data: bytes) -> Any:
    text = memoryview(data)[len(_BOM) :] if data.startswith(_BOM) else data  # (orjson refuses one; not copied)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        stripped = bytes(text).rstrip(b" \t\r\n,")
        if stripped.lstrip(b" \t\r\n").startswith(b"[") and not stripped.endswith(b"]"):
            try:  # the array format's closing bracket is optional (a tracer killed mid-write)
                return orjson.loads(stripped + b"]")
            except orjson.JSONDecodeError:
                pass
        raise ForeignFormatError(f"Chrome trace JSON that does not parse: {exc}") from None


class _Seen(NamedTuple):
    """An event of the file, with what it is recorded on."""

    event: dict[str, Any]
    #: (pid, tid) as keys
    thread: tuple[object, object]
    recording: Recording
    track_id: int
    name: str
    ts_ns: int
    args: dict[str, Any] | None


class _Reader:
    def __init__(self, stack_frames: dict[str, Any]) -> None:
        """``stack_frames``: the document's ``stackFrames`` (id -> name, category, parent)."""
        self._stack_frames = stack_frames
        #: Stacks resolved, by their leaf's id (as many as the document has frames, at most).
        self._stacks: dict[str, tuple[tuple[str, str, int], ...]] = {}
        self._recordings: dict[object, Recording] = {}
        self._process_names: dict[object, str] = {}
        self._tracks: dict[tuple[object, object], int] = {}
        #: Per thread track: the ``B`` events not yet ended, innermost last.
        self._open: dict[tuple[object, object], list[tuple[str, int, Any]]] = {}
        self._skipped: dict[object, int] = {}
        self._unowned = 0
        #: What an event becomes, by its phase.
        self._by_phase: dict[str, Callable[[_Seen], None]] = {
            "X": self._span,
            "B": self._begin,
            "E": self._end,
            **dict.fromkeys(_INSTANTS, self._instant),
            "C": self._counter,
            **dict.fromkeys(_ASYNC, self._async),
            "P": self._sample,
        }

    def event(self, event: Any) -> None:
        if not isinstance(event, dict):
            self._unowned += 1
            return
        phase, pid, tid = event.get("ph"), _key(event.get("pid")), _key(event.get("tid"))
        if phase == "M":
            self._metadata(event, pid, tid)
            return
        ts_ns = _ns(event.get("ts"))
        if ts_ns is None or not isinstance(phase, str):
            self._skip(pid)
            return
        name = str(event.get("name", ""))
        args = event.get("args") if isinstance(event.get("args"), dict) else None
        track_id = self._track(pid, tid)
        seen = _Seen(event, (pid, tid), self._recordings[pid], track_id, name, ts_ns, args)
        take = self._by_phase.get(phase)
        if take is None:  # flows, objects, samples, ...: nothing a snapshot shows
            self._skip(pid)
        else:
            take(seen)

    def _span(self, seen: _Seen) -> None:
        dur_ns = _ns(seen.event.get("dur")) or 0
        seen.recording.add(seen.track_id, SPAN, seen.name, seen.ts_ns, seen.ts_ns + max(dur_ns, 0), seen.args)

    def _begin(self, seen: _Seen) -> None:
        self._open.setdefault(seen.thread, []).append((seen.name, seen.ts_ns, seen.args))

    def _end(self, seen: _Seen) -> None:
        """The end of the innermost ``B`` of its thread, as a span; with none open, a marker end."""
        opened = self._open.get(seen.thread)
        if not opened:
            seen.recording.add(seen.track_id, MARKER_END, seen.name, seen.ts_ns, seen.ts_ns, seen.args)
            return
        begun_name, begun_ns, begun_args = opened.pop()
        args = seen.args
        merged = {**begun_args, **args} if begun_args and args else begun_args or args
        seen.recording.add(seen.track_id, SPAN, begun_name, begun_ns, max(seen.ts_ns, begun_ns), merged)

    def _instant(self, seen: _Seen) -> None:
        seen.recording.add(seen.track_id, INSTANT, seen.name, seen.ts_ns, seen.ts_ns, seen.args)

    def _counter(self, seen: _Seen) -> None:
        values = {key: value for key, value in (seen.args or {}).items() if type(value) in (int, float)}
        seen.recording.add(seen.track_id, COUNTER, seen.name, seen.ts_ns, seen.ts_ns, values or {"value": 0})

    def _async(self, seen: _Seen) -> None:
        event = seen.event
        async_id = event.get("id", event.get("id2", ""))
        args = {**(seen.args or {}), "id": str(async_id)}
        seen.recording.add(seen.track_id, _ASYNC[event["ph"]], seen.name, seen.ts_ns, seen.ts_ns, args)

    def _sample(self, seen: _Seen) -> None:
        """A sample of its thread's stack (named ``sample`` by ringtrace when no asyncio task ran: no task here)."""
        stack = self._stack(seen.event.get("sf"))
        task = "" if seen.name == "sample" else seen.name
        seen.recording.add(seen.track_id, SAMPLE, task, seen.ts_ns, seen.ts_ns, stack)

    def _stack(self, leaf: object) -> tuple[tuple[str, str, int], ...]:
        """The stack whose innermost frame is ``stackFrames[leaf]``, outermost first (empty if none is named)."""
        if leaf is None or isinstance(leaf, dict | list):
            return ()
        key = str(leaf)
        known = self._stacks.get(key)
        if known is not None:
            return known
        frames: list[tuple[str, str, int]] = []
        node: str | None = key
        while node is not None and len(frames) < _MAX_STACK_DEPTH:
            entry = self._stack_frames.get(node)
            if not isinstance(entry, dict):
                break
            frames.append(_code_location(entry))
            parent = entry.get("parent")
            node = None if parent is None or isinstance(parent, dict | list) else str(parent)
        stack = self._stacks[key] = tuple(reversed(frames))
        return stack

    def _skip(self, pid: object) -> None:
        self._recording(pid)  # (a process whose events are all skipped still says how many)
        self._skipped[pid] = self._skipped.get(pid, 0) + 1

    def _metadata(self, event: dict[str, Any], pid: object, tid: object) -> None:
        name = event.get("args", {}).get("name") if isinstance(event.get("args"), dict) else None
        if not isinstance(name, str):
            return
        if event.get("name") == "process_name":
            self._process_names[pid] = name
            self._recording(pid)
        elif event.get("name") == "thread_name":
            self._recording(pid).rename(self._track(pid, tid), name)

    def _recording(self, pid: object) -> Recording:
        recording = self._recordings.get(pid)
        if recording is None:
            recording = self._recordings[pid] = Recording(SYSTEM)
            recording.pid = pid if type(pid) is int and 0 <= pid < 2**32 else 0
        return recording

    def _track(self, pid: object, tid: object) -> int:
        track_id = self._tracks.get((pid, tid))
        if track_id is None:
            thread_id = tid if type(tid) is int and 0 <= tid < 2**63 else 0
            name = "no thread" if tid == _NO_ID else f"thread {tid}"  # (a counter of the process, say)
            track_id = self._tracks[(pid, tid)] = self._recording(pid).track(THREAD_TRACK, name, thread_id)
        return track_id

    def recordings(self, origin_ns: int | None) -> list[Recording]:
        """What was read, each process named; ``B`` events never ended are left open (marker starts)."""
        for (pid, tid), opened in self._open.items():
            track_id = self._tracks[(pid, tid)]
            for name, ts_ns, args in opened:
                self._recordings[pid].add(track_id, MARKER_START, name, ts_ns, ts_ns, args)
        recordings = []
        for pid, recording in self._recordings.items():
            recording.process_name = self._process_names.get(pid, f"pid {pid}")
            recording.skipped = self._skipped.get(pid, 0)
            if origin_ns is not None:
                recording.last_wall_ns = origin_ns + recording.last_ns
            recordings.append(recording)
        if self._unowned:  # entries that are no event belong to no process: counted in the first
            if not recordings:
                recordings.append(self._recording("?"))
                recordings[0].process_name = "pid ?"
            recordings[0].skipped += self._unowned
        return recordings


_NO_ID: Final = ""


def _key(value: Any) -> object:
    """A pid or tid as a key: an int, or the text of anything else (some tools write strings); none: empty."""
    if value is None:
        return _NO_ID
    return value if type(value) is int else str(value)


def _ns(value: Any) -> int | None:
    """Microseconds (int or float) as ns; None for what is not a finite number."""
    if type(value) is int:
        return value * 1000
    if type(value) is float and value == value and abs(value) < 9e15:
        return round(value * 1000)
    return None


def _code_location(entry: dict[str, Any]) -> tuple[str, str, int]:
    """A ``stackFrames`` entry as (function, file, line): its category ``file:line`` as ringtrace writes it, else the
    category as the file and line 0."""
    name, category = str(entry.get("name", "")), str(entry.get("category", ""))
    file, _, line = category.rpartition(":")
    if file and line.isdigit() and int(line) <= _MAX_LINE:
        return name, file, int(line)
    return name, category, 0
