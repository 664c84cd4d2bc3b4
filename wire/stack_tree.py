"""A stream's stack table as a reader keeps it: the code locations and stack nodes its STACKS frames declared, and a
stack id resolved to its frames, root first (``PROTOCOL.md``, "STACKS")."""

from __future__ import annotations

from typing import Final

from ringtrace.wire.stack_frames import CodeLocation, Stacks

__all__ = ["MAX_RESOLVED_DEPTH", "StackTree"]

#: Frames of a stack a reader resolves at most, the innermost (twice what this client samples): a peer may declare
#: a chain of ``max_stacks`` nodes, whose deepest stacks would each cost that many steps and a tuple that long.
MAX_RESOLVED_DEPTH: Final = 1024
#: Stacks resolved and kept per table (samples repeat a few stacks many times), and their frames in all.
_RESOLVED_KEPT: Final = 4096
_RESOLVED_FRAMES_KEPT: Final = 1 << 19


class StackTree:
    """Code locations and stack nodes by id (dense: the decoder has checked that each frame continues the table, that
    parents come before their children and that frame ids are declared)."""

    __slots__ = ("_resolved", "_resolved_frames", "frames", "leaves", "parents")

    def __init__(self) -> None:
        self.frames: list[CodeLocation] = []
        #: Per stack id: its parent's id (-1: a root), and its own code location's id.
        self.parents: list[int] = []
        self.leaves: list[int] = []
        self._resolved: dict[int, tuple[CodeLocation, ...]] = {}
        self._resolved_frames = 0

    def __len__(self) -> int:
        return len(self.parents)

    def add(self, frame: Stacks) -> None:
        """Add what ``frame`` declares (checked by the decoder)."""
        self.frames.extend(frame.frames)
        for parent, leaf in frame.stacks:
            self.parents.append(-1 if parent is None else parent)
            self.leaves.append(leaf)

    def innermost(self, stack_id: object) -> CodeLocation | None:
        """The innermost frame of stack ``stack_id`` (a traced call's own code location); None if never declared."""
        if type(stack_id) is not int or not 0 <= stack_id < len(self.parents):
            return None
        return self.frames[self.leaves[stack_id]]

    def resolve(self, stack_id: object) -> tuple[CodeLocation, ...] | None:
        """The frames of stack ``stack_id``, root first (the innermost ``MAX_RESOLVED_DEPTH`` of a deeper one); None if
        it was never declared (or is not an id)."""
        if type(stack_id) is not int or not 0 <= stack_id < len(self.parents):
            return None
        known = self._resolved.get(stack_id)
        if known is not None:
            return known
        path: list[CodeLocation] = []
        node, frames, parents, leaves = stack_id, self.frames, self.parents, self.leaves
        while node >= 0 and len(path) < MAX_RESOLVED_DEPTH:
            path.append(frames[leaves[node]])
            node = parents[node]
        path.reverse()
        resolved = tuple(path)
        if len(self._resolved) >= _RESOLVED_KEPT or self._resolved_frames >= _RESOLVED_FRAMES_KEPT:
            self._resolved.clear()
            self._resolved_frames = 0
        self._resolved[stack_id] = resolved
        self._resolved_frames += len(resolved)
        return resolved
