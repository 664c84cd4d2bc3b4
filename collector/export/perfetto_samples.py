"""Samples in a Perfetto trace: a ``PerfSample`` packet per sample (pid, tid, callstack), its stack interned on the
packet's sequence, which Perfetto UI draws as a track of samples under the thread and, for a range selected, as a
flame graph.

Interning, per sequence (``InternedData``): a function name per function, a source path per file, a mapping per file
(older readers need one; named by the file), a frame per (function, file, line) with its line, and a callstack per
stack (root first, as ``Callstack.frame_ids`` lists them). A frame is ``KIND_INTERPRETED``. Each table holds at most
``MAX_INTERNED`` entries, and the callstacks ``MAX_CALLSTACK_FRAMES`` frames in all (each is kept whole, as its key):
past that, the writer starts a new sequence before the next frame (``full``).
Field numbers: Perfetto's ``protos/perfetto/trace/profiling/profile_common.proto``, ``profile_packet.proto``
(``PerfSample``), ``interned_data/interned_data.proto`` and ``trace_packet.proto``.
"""

from __future__ import annotations

from typing import Final

from ringtrace.collector.export import protobuf as pb
from ringtrace.collector.export.sample_stacks import StackFrame

__all__ = ["MAX_CALLSTACK_FRAMES", "MAX_INTERNED", "PERF_SAMPLE", "SequenceStacks"]

#: Entries of each table interned per sequence, at most.
MAX_INTERNED: Final = 65_536
#: Frames of the callstacks interned per sequence, at most (a callstack's key holds its stack, up to 1024 frames:
#: 65,536 of the deepest would hold 64 Mi of them).
MAX_CALLSTACK_FRAMES: Final = 1 << 20
#: TracePacket.perf_sample, and PerfSample's fields.
PERF_SAMPLE: Final = 66
_SAMPLE_PID: Final = 2
_SAMPLE_TID: Final = 3
_SAMPLE_CALLSTACK_IID: Final = 4
# InternedData's tables.
_FUNCTION_NAMES: Final = 5
_FRAMES: Final = 6
_CALLSTACKS: Final = 7
_MAPPING_PATHS: Final = 17
_SOURCE_PATHS: Final = 18
_MAPPINGS: Final = 19
# InternedString, Mapping, Frame, Callstack.
_IID: Final = 1
_STR: Final = 2
_MAPPING_PATH_STRING_IDS: Final = 7
_FRAME_FUNCTION_NAME_ID: Final = 2
_FRAME_MAPPING_ID: Final = 3
_FRAME_REL_PC: Final = 4
_FRAME_SOURCE_PATH_IID: Final = 5
_FRAME_LINE_NUMBER: Final = 6
_FRAME_KIND: Final = 7
_KIND_INTERPRETED: Final = 3
_CALLSTACK_FRAME_IDS: Final = 2
_MAX_UINT32: Final = 2**32 - 1


class SequenceStacks:
    """The stacks interned on one sequence, and the ``InternedData`` entries each new one adds."""

    __slots__ = ("_callstack_frames", "_callstacks", "_files", "_frames", "_functions")

    def __init__(self) -> None:
        self._functions: dict[str, int] = {}
        #: By file: its iid as a source path, as a mapping path and as a mapping (the same number).
        self._files: dict[str, int] = {}
        self._frames: dict[StackFrame, int] = {}
        self._callstacks: dict[tuple[StackFrame, ...], int] = {}
        self._callstack_frames = 0

    @property
    def full(self) -> bool:
        """Whether a table is near its bound: the writer starts a new sequence before the next frame."""
        most = max(len(self._frames), len(self._callstacks), len(self._files), len(self._functions))
        return most >= MAX_INTERNED or self._callstack_frames >= MAX_CALLSTACK_FRAMES

    def sample(self, pid: int, tid: int, stack: tuple[StackFrame, ...], new_entries: list[bytes]) -> bytes:
        """The ``PerfSample`` field of a sample (its stack interned, the new ``InternedData`` entries added to
        ``new_entries``); an empty stack has no callstack."""
        body = pb.uint(_SAMPLE_PID, pid & _MAX_UINT32) + pb.uint(_SAMPLE_TID, tid & _MAX_UINT32)
        if stack:
            body += pb.uint(_SAMPLE_CALLSTACK_IID, self._callstack(stack, new_entries))
        return pb.message(PERF_SAMPLE, body)

    def _callstack(self, stack: tuple[StackFrame, ...], new_entries: list[bytes]) -> int:
        iid = self._callstacks.get(stack)
        if iid is None:
            frame_ids = b"".join(pb.uint(_CALLSTACK_FRAME_IDS, self._frame(frame, new_entries)) for frame in stack)
            iid = self._callstacks[stack] = len(self._callstacks) + 1
            self._callstack_frames += len(stack)
            new_entries.append(pb.message(_CALLSTACKS, pb.uint(_IID, iid) + frame_ids))  # (not packed: proto2's)
        return iid

    def _frame(self, frame: StackFrame, new_entries: list[bytes]) -> int:
        iid = self._frames.get(frame)
        if iid is None:
            function, file, line = frame
            function_iid = self._functions.get(function)
            if function_iid is None:
                function_iid = self._functions[function] = len(self._functions) + 1
                new_entries.append(pb.message(_FUNCTION_NAMES, pb.uint(_IID, function_iid) + pb.string(_STR, function)))
            file_iid = self._files.get(file)
            if file_iid is None:
                file_iid = self._files[file] = len(self._files) + 1
                path = pb.uint(_IID, file_iid) + pb.string(_STR, file)
                new_entries.append(pb.message(_SOURCE_PATHS, path))
                new_entries.append(pb.message(_MAPPING_PATHS, path))
                mapping = pb.uint(_IID, file_iid) + pb.uint(_MAPPING_PATH_STRING_IDS, file_iid)
                new_entries.append(pb.message(_MAPPINGS, mapping))
            line = min(max(line, 0), _MAX_UINT32) if type(line) is int else 0
            iid = self._frames[frame] = len(self._frames) + 1
            body = pb.uint(_IID, iid) + pb.uint(_FRAME_FUNCTION_NAME_ID, function_iid)
            body += pb.uint(_FRAME_MAPPING_ID, file_iid) + pb.uint(_FRAME_REL_PC, line)
            body += pb.uint(_FRAME_SOURCE_PATH_IID, file_iid) + pb.uint(_FRAME_LINE_NUMBER, line)
            new_entries.append(pb.message(_FRAMES, body + pb.uint(_FRAME_KIND, _KIND_INTERPRETED)))
        return iid
