"""Samples' stacks as the exports name them: a tree of stack nodes, each a frame under its caller, interned once.

A sample (a ``Shown`` event of phase ``"P"``, from ``read/event_walk.py``) carries its thread's Python stack, root
first, each frame a (function, file, line). Chrome JSON names a stack by its leaf node (``stackFrames``, whose entries
name their parent); the web view's flame graph (``flame_graph.py``) counts samples per node. The table holds at most
``max_nodes`` nodes (memory is bounded by distinct stack prefixes, never by the number of samples): a stack past that
is named by its longest prefix interned, and counted as cut.

``sample_flags`` reads no more of a stored frame than its kind column, to tell the writers that want samples alone
(the flame graph, pprof) which of its events are samples: a frame of none is never decoded.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

import msgpack
from ringtrace.wire.frames import Events
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["MAX_STACK_NODES", "SAMPLE", "StackFrame", "StackNodes", "sample_flags", "sample_stack"]

#: The phase of a sample in a ``Shown`` event (Chrome's sample phase).
SAMPLE: Final = "P"
#: Stack nodes one export interns at most.
MAX_STACK_NODES: Final = 200_000

#: (function, file, line).
StackFrame: TypeAlias = tuple[str, str, int]


def sample_stack(args: dict[str, Any] | None) -> tuple[StackFrame, ...]:
    """A sample's stack, root first, from its ``Shown`` args (none: empty)."""
    stack = args.get("stack") if args else None
    if isinstance(stack, tuple):
        return stack
    return tuple(tuple(frame) for frame in stack) if isinstance(stack, list) else ()  # (as msgpack may give it)


class StackNodes:
    """Stack nodes by (caller's node, frame): ids count up from 1 (0: no node, the root of every stack).

    Args:
        max_nodes: nodes held at most.
    """

    __slots__ = ("_ids", "cut_stacks", "max_nodes", "nodes")

    def __init__(self, max_nodes: int = MAX_STACK_NODES) -> None:
        self.max_nodes = max_nodes
        self._ids: dict[tuple[int, StackFrame], int] = {}
        #: (caller's id, frame) of node id 1, 2, ...
        self.nodes: list[tuple[int, StackFrame]] = []
        #: Stacks named by a prefix of theirs, the table being full.
        self.cut_stacks = 0

    def leaf(self, stack: tuple[StackFrame, ...]) -> int:
        """The id of the stack's leaf node (interned with its callers as needed); 0 for an empty stack."""
        ids, node = self._ids, 0
        for frame in stack:
            key = (node, frame)
            found = ids.get(key)
            if found is None:
                if len(self.nodes) >= self.max_nodes:
                    self.cut_stacks += 1
                    return node
                self.nodes.append(key)
                found = ids[key] = len(self.nodes)
            node = found
        return node

    def __len__(self) -> int:
        return len(self.nodes)


def sample_flags(tables: StreamTables, frame: Events) -> bytes | None:
    """One byte per event of ``frame``, 1 for a sample (``EventWalk.shown``'s ``only``); None if none is. A payload
    this cannot read is left to the walk (all ones), which counts what it cannot decode."""
    sample_kinds = {kind_id for kind_id, kind in tables.kinds.items() if kind.shape == "sample"}
    if not sample_kinds:
        return None
    try:
        unpacker = msgpack.Unpacker(max_buffer_size=len(frame.payload) or 1)
        unpacker.feed(frame.payload)
        unpacker.read_array_header()
        for _ in range(tables.columns.index("kind")):
            unpacker.skip()
        kinds = unpacker.unpack()
        if type(kinds) is not list or len(kinds) != frame.count:
            raise ValueError("not a kind column of the frame's count")
        flags = bytes(kind in sample_kinds for kind in kinds)
    except Exception:
        return b"\x01" * frame.count
    return flags if 1 in flags else None
