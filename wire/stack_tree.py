"""A stream's stack table as a reader keeps it: the code locations and stack nodes its STACKS frames declared, and a
stack id resolved to its frames, root first (``PROTOCOL.md``, "STACKS")."""

from __future__ import annotations

from typing import Final

from ringtrace.wire.stack_frames import CodeLocation, Stacks

__all__ = ["StackTree"]

#: Stacks resolved and kept per table: samples repeat a few stacks many times.
_RESOLVED_KEPT: Final = 4096


class StackTree:
    """Code locations and stack nodes by id (dense: the decoder has checked that each frame continues the table, that
    parents come before their children and that frame ids are declared)."""

    __slots__ = ("_resolved", "frames", "leaves", "parents")

    def __init__(self) -> None:
        self.frames: list[CodeLocation] = []
        #: Per stack id: its parent's id (-1: a root), and its own code location's id.
        self.parents: list[int] = []
        self.leaves: list[int] = []
        self._resolved: dict[int, tuple[CodeLocation, ...]] = {}

    def __len__(self) -> int:
        return len(self.parents)

    def add(self, frame: Stacks) -> None:
        """Add what ``frame`` declares (checked by the decoder)."""
        self.frames.extend(frame.frames)
        for parent, leaf in frame.stacks:
            self.parents.append(-1 if parent is None else parent)
            self.leaves.append(leaf)

    def resolve(self, stack_id: object) -> tuple[CodeLocation, ...] | None:
        """The frames of stack ``stack_id``, root first; None if it was never declared (or is not an id)."""
        if type(stack_id) is not int or not 0 <= stack_id < len(self.parents):
            return None
        known = self._resolved.get(stack_id)
        if known is not None:
            return known
        path: list[CodeLocation] = []
        node, frames, parents, leaves = stack_id, self.frames, self.parents, self.leaves
        while node >= 0:
            path.append(frames[leaves[node]])
            node = parents[node]
        path.reverse()
        resolved = tuple(path)
        if len(self._resolved) >= _RESOLVED_KEPT:
            self._resolved.clear()
        self._resolved[stack_id] = resolved
        return resolved
