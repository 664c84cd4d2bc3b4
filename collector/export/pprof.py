"""The samples of a snapshot as a pprof profile (``format=pprof``): Google's ``profile.proto``, gzip-compressed, which
``go tool pprof``, speedscope and Perfetto UI open.

A profile counts samples, not events in time: one ``Sample`` per distinct (stack, process, thread, asyncio task),
its value the number of samples of it (``samples``/``count``), its labels ``process``, ``pid``, ``thread`` and
``task`` (for a sample taken while a task ran). A ``Function`` per (function, file), a ``Location`` per line of one;
``location_id`` lists a stack innermost first, as pprof reads it. ``time_nanos`` and ``duration_nanos`` span the
samples shown. Memory holds the distinct stacks (``sample_stacks.py``, its bound and its cut stacks) and keys, never
the samples; the profile is written once the walk is done, whole (it is one protobuf message).
Field numbers: ``profile.proto`` of github.com/google/pprof.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Final

from ringtrace.collector.export import protobuf as pb
from ringtrace.collector.export.sample_stacks import SAMPLE, StackNodes, sample_flags, sample_stack
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EVERYTHING, EventFilter

__all__ = ["pprof_chunks"]

# Profile
_SAMPLE_TYPE: Final = 1
_SAMPLE: Final = 2
_LOCATION: Final = 4
_FUNCTION: Final = 5
_STRING_TABLE: Final = 6
_TIME_NANOS: Final = 9
_DURATION_NANOS: Final = 10
# ValueType, Sample, Label, Location, Line, Function
_TYPE, _UNIT = 1, 2
_LOCATION_ID, _VALUE, _LABEL = 1, 2, 3
_KEY, _STR, _NUM = 1, 2, 3
_ID, _LINE = 1, 4
_FUNCTION_ID, _LINE_NUMBER = 1, 2
_NAME, _SYSTEM_NAME, _FILENAME = 2, 3, 4
_MAX_INT64: Final = 2**63 - 1

#: (leaf stack node, pid, process, thread, task) -> samples.
_Key = tuple[int, int, str, str, str]


class _Strings:
    """The profile's string table: index 0 is ""."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        found = self.ids.get(text)
        if found is None:
            found = self.ids[text] = len(self.ids)
        return found


def pprof_chunks(view: SnapshotView, selected: EventFilter = EVERYTHING) -> Iterator[bytes]:
    """Yield a gzip-compressed pprof profile of the samples ``selected`` (b"" while the walk goes on)."""
    walk = EventWalk(view, selected)
    stacks = StackNodes()
    counts: dict[_Key, int] = {}
    first_ns, last_ns = _MAX_INT64, 0
    for (process, track, tables, frame), _ in walk.walked():
        only = sample_flags(tables, frame)
        shown = (walk.shown(process, track, tables, frame, only) or ()) if only is not None else ()
        samples = [event for event in shown if event[0] == SAMPLE]
        if samples:
            thread = process.tracks.get(track.track_id, track).name
            for _, task, wall_ns, _, args, _, _ in samples:
                key = (stacks.leaf(sample_stack(args)), process.trace_pid, process.name, thread, task)
                counts[key] = counts.get(key, 0) + 1
                first_ns, last_ns = min(first_ns, wall_ns), max(last_ns, wall_ns)
        yield b""
    yield gzip.compress(_profile(stacks, counts, first_ns, last_ns), mtime=0)


def _profile(stacks: StackNodes, counts: dict[_Key, int], first_ns: int, last_ns: int) -> bytes:
    strings = _Strings()
    parts = [pb.message(_SAMPLE_TYPE, pb.uint(_TYPE, strings("samples")) + pb.uint(_UNIT, strings("count")))]
    functions: dict[tuple[str, str], int] = {}
    #: Per stack node: its location's id.
    locations: dict[tuple[str, str, int], int] = {}
    node_locations = [0]
    for _, (function, file, line) in stacks.nodes:
        location = locations.get((function, file, line))
        if location is None:
            function_id = functions.get((function, file))
            if function_id is None:
                function_id = functions[(function, file)] = len(functions) + 1
                name = strings(function)
                body = pb.uint(_ID, function_id) + pb.uint(_NAME, name) + pb.uint(_SYSTEM_NAME, name)
                parts.append(pb.message(_FUNCTION, body + pb.uint(_FILENAME, strings(file))))
            location = locations[(function, file, line)] = len(locations) + 1
            at = pb.uint(_FUNCTION_ID, function_id) + pb.uint(_LINE_NUMBER, min(max(line, 0), _MAX_INT64))
            parts.append(pb.message(_LOCATION, pb.uint(_ID, location) + pb.message(_LINE, at)))
        node_locations.append(location)
    nodes = stacks.nodes
    for (leaf, pid, process, thread, task), count in counts.items():
        ids = []
        node = leaf
        while node:  # innermost first
            ids.append(node_locations[node])
            node = nodes[node - 1][0]
        body = pb.message(_LOCATION_ID, b"".join(map(pb.varint, ids))) if ids else b""
        body += pb.message(_VALUE, pb.varint(count))
        labels = [("process", process), ("thread", thread), *((("task", task),) if task else ())]
        for key, text in labels:
            body += pb.message(_LABEL, pb.uint(_KEY, strings(key)) + pb.uint(_STR, strings(text)))
        body += pb.message(_LABEL, pb.uint(_KEY, strings("pid")) + pb.uint(_NUM, pid))
        parts.append(pb.message(_SAMPLE, body))
    parts += [pb.string(_STRING_TABLE, text) for text in strings.ids]
    if counts:
        parts += [pb.uint(_TIME_NANOS, first_ns), pb.uint(_DURATION_NANOS, last_ns - first_ns)]
    return b"".join(parts)
