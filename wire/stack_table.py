"""One stream's stack table, on the sending side: sampled stacks (tuples of code locations, root first) to stack ids,
and the STACKS frames that declare them (``PROTOCOL.md``, "STACKS").

Code locations and stack nodes get ids from 0 up, in the order first met; a stack is a path of nodes, so stacks that
share their outer frames share nodes. A whole stack already met costs one dict lookup. The table only grows: after a
reconnect the prefix declares all of it again, so frames packed before it keep their ids. When it is full, a table
that ``recycles`` says so (``full``), and the stream encoder starts it again (``recycle``) together with the string
table, so that the frames packed before are of an earlier string epoch: a frame queued across a reconnect is packed
again in the current tables (``StreamEncoder.repack``), its samples' stacks found in the table of its time
(``stack_in``), kept while such frames are queued (``keep_epochs``). A table that does not recycle gives the stacks
that do not fit no id (None), counted in ``overflowed``.
"""

from __future__ import annotations

from typing import Any, Final

from ringtrace.wire.arg_values import display_text
from ringtrace.wire.frame_types import DEFAULT_MAX_STACK_FRAMES, DEFAULT_MAX_STACKS, MIN_MAX_FRAME_BYTES
from ringtrace.wire.model import CALL, CALL_RAISED, RECORD_FIELDS, SAMPLE
from ringtrace.wire.stack_frames import CodeLocation, StackNode, Stacks

__all__ = ["StackTable"]

#: Bytes one STACKS frame may spend, at most (UTF-8 at its widest): half the smallest max_frame_bytes there is.
_FRAME_BUDGET: Final = MIN_MAX_FRAME_BYTES // 2
#: A node's bytes in a frame at most, and a code location's beside its texts.
_NODE_BYTES: Final = 12
_LOCATION_BYTES: Final = 16
#: Whole stacks remembered (a dict lookup each), beyond which the dict starts again (the nodes stay).
_KNOWN_STACKS: Final = 65_536


class StackTable:
    """Stacks to ids for one stream, within ``max_stacks`` nodes and ``max_frames`` code locations."""

    def __init__(self, max_stacks: int = DEFAULT_MAX_STACKS, max_frames: int = DEFAULT_MAX_STACK_FRAMES) -> None:
        self.max_stacks = max_stacks
        self.max_frames = max_frames
        #: Start again when full (files); else stacks that do not fit get no id.
        self.recycles = False
        #: Samples whose stack got no id (the table full, and not ``recycles``).
        self.overflowed = 0
        #: After a cut (``limit_to``), the most the table may ever hold again: ids past the cut may still be named by
        #: frames packed before it, so they are never given to other stacks.
        self._ceiling: tuple[int, int] | None = None
        #: Keep each table that starts again, by the string epoch it ended in (``recycle``), for ``stack_in``.
        self.keeps_retired = False
        self.retired: dict[int, tuple[list[CodeLocation], list[StackNode]]] = {}
        self._clear()

    def _clear(self) -> None:
        self.locations: list[CodeLocation] = []
        self.nodes: list[StackNode] = []
        self._location_ids: dict[CodeLocation, int] = {}
        self._node_ids: dict[tuple[int, int], int] = {}  # (parent id or -1, location id) -> node id
        self._stack_ids: dict[tuple[CodeLocation, ...], int] = {}
        self._sent_locations = 0
        self._sent_nodes = 0
        self._reset_pending = False
        #: A stack did not fit and the table ``recycles``: the encoder should start it again.
        self.full = False

    def __len__(self) -> int:
        return len(self.nodes)

    def id_of(self, stack: object) -> int | None:
        """The id of ``stack`` (code locations, root first), declaring what it needs; None if it does not fit (or is
        not a stack)."""
        if type(stack) is not tuple or not stack:
            return None
        known = self._stack_ids.get(stack)
        if known is not None:
            return known
        try:
            node = self._intern(stack)
        except Exception:  # a value that is not a code location: no stack
            return None
        if node is None:
            self.overflowed += 1
            self.full = self.recycles and bool(self.nodes)
            return None
        if len(self._stack_ids) >= _KNOWN_STACKS:
            self._stack_ids.clear()
        self._stack_ids[stack] = node
        return node

    def _intern(self, stack: tuple[Any, ...]) -> int | None:
        parent = -1
        location_ids, node_ids = self._location_ids, self._node_ids
        for item in stack:
            location = location_ids.get(item)
            if location is None:
                if len(self.locations) >= self.max_frames:
                    return None
                function, file, line = item
                clean = (display_text(function), display_text(file), line if type(line) is int and line > 0 else 0)
                location = location_ids[item] = len(self.locations)
                self.locations.append(clean)
            node = node_ids.get((parent, location))
            if node is None:
                if len(self.nodes) >= self.max_stacks:
                    return None
                node = node_ids[(parent, location)] = len(self.nodes)
                self.nodes.append((None if parent < 0 else parent, location))
            parent = node
        return parent

    def recycle(self, epoch: int) -> None:
        """Start again (the next STACKS frame resets the stream's table); the table ending is kept as the one of the
        string ``epoch`` ending with it, if ``keeps_retired``."""
        if self.keeps_retired:
            self.retired[epoch] = (self.locations, self.nodes)
        self._clear()
        self._reset_pending = True

    def restarted_since(self, epoch: int) -> bool:
        """Whether the table started again since string ``epoch`` (its stack ids then name other stacks now)."""
        return any(ended >= epoch for ended in self.retired)

    def stack_in(self, epoch: int, stack_id: object) -> tuple[CodeLocation, ...] | None:
        """The stack ``stack_id`` named in a frame packed in string ``epoch`` (``restarted_since`` it), None if it is
        not known."""
        ended = [kept for kept in self.retired if kept >= epoch]
        if not ended:
            return None
        locations, nodes = self.retired[min(ended)]
        if type(stack_id) is not int or not 0 <= stack_id < len(nodes):
            return None
        path: list[CodeLocation] = []
        node: int | None = stack_id
        while node is not None:
            parent, location = nodes[node]
            path.append(locations[location])
            node = parent
        return tuple(reversed(path))

    def keep_epochs(self, epochs: set[int]) -> None:
        """Forget the tables no queued frame may need: those that ended before every epoch in ``epochs``."""
        for ended in [ended for ended in self.retired if not any(epoch <= ended for epoch in epochs)]:
            del self.retired[ended]

    def with_ids(self, records: list[Any]) -> list[Any]:
        """``records`` (a copy, if any changes) with each sample's stack, and each traced call's one-frame stack,
        replaced by its id (None: no id)."""
        kinds = records[0::RECORD_FIELDS]
        if SAMPLE not in kinds and CALL not in kinds and CALL_RAISED not in kinds:
            return records
        records = list(records)
        for index, kind in enumerate(kinds):
            if kind in (SAMPLE, CALL, CALL_RAISED):
                at = index * RECORD_FIELDS + 4
                records[at] = self.id_of(records[at])
        return records

    def limit_to(self, max_stacks: int, max_frames: int) -> None:
        """A collector's limits: what the table holds past them is forgotten, and it then takes no more stacks than
        it holds (its ids must stay dense, and frames packed earlier keep theirs: their samples' stacks past the cut
        show as unknown)."""
        if self._ceiling is not None:
            max_stacks, max_frames = min(max_stacks, self._ceiling[0]), min(max_frames, self._ceiling[1])
        self.max_stacks, self.max_frames = max_stacks, max_frames
        nodes = 0
        while nodes < min(len(self.nodes), max_stacks) and self.nodes[nodes][1] < max_frames:
            nodes += 1
        if nodes == len(self.nodes) and len(self.locations) <= max_frames:
            return
        locations = max((location for _, location in self.nodes[:nodes]), default=-1) + 1
        del self.nodes[nodes:], self.locations[locations:]
        self._location_ids = {k: v for k, v in self._location_ids.items() if v < locations}
        self._node_ids = {k: v for k, v in self._node_ids.items() if v < nodes}
        self._stack_ids = {k: v for k, v in self._stack_ids.items() if v < nodes}
        self.max_stacks, self.max_frames = nodes, locations  # full: ids past the cut are never given again
        self._ceiling = (nodes, locations)
        self._sent_nodes, self._sent_locations = min(self._sent_nodes, nodes), min(self._sent_locations, locations)

    def frames(self) -> list[Stacks]:
        """The whole table as STACKS frames: what a new stream must be sent (and nothing is new after)."""
        self._sent_locations = self._sent_nodes = 0
        self._reset_pending = False
        return self.take_new()

    def take_new(self) -> list[Stacks]:
        """STACKS frames declaring what was added since the last call (the first resets the stream's table if the
        table started again), each within ``_FRAME_BUDGET`` bytes."""
        out: list[Stacks] = []
        if self._reset_pending:
            out.append(Stacks(0, (), 0, (), reset=True))
            self._reset_pending = False
        locations, nodes = self.locations, self.nodes
        while self._sent_locations < len(locations) or self._sent_nodes < len(nodes):
            first_location, first_node, spent = self._sent_locations, self._sent_nodes, 0
            end = first_location
            while end < len(locations) and (end == first_location or spent < _FRAME_BUDGET // 2):
                function, file, _ = locations[end]
                spent += _LOCATION_BYTES + 4 * (len(function) + len(file))
                end += 1
            # The nodes whose code locations are declared by now, within the budget.
            node_end = first_node
            while node_end < len(nodes) and nodes[node_end][1] < end and spent < _FRAME_BUDGET:
                spent += _NODE_BYTES
                node_end += 1
            out.append(
                Stacks(
                    first_location, tuple(locations[first_location:end]), first_node, tuple(nodes[first_node:node_end])
                )
            )
            self._sent_locations, self._sent_nodes = end, node_end
        return out
