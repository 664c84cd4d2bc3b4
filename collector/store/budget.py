"""The store's byte budget: what stored segments and the connections' tables may take, and how room is made.

The sizes of all stored segments (prefix, frames, index and unused tail alike) and the tables of the open connections
(their strings, kinds and tracks: ``charge_tables``) stay within ``capacity_bytes``, and one process's segments and
tables within ``process_capacity_bytes``. Room for a new segment is made, under the ``ring`` policy, by evicting the
process's own oldest segment while it is at its cap, then the oldest segment of all (sealed ones first: a connection's
open segment holds its newest events, and may be being read into); under ``discard``, the frame is refused instead, so
the store keeps the beginning. Buffers of evicted segments are reused while the stored bytes and the spare buffers
together stay within the capacity (and what ``spare_beyond`` allows past it: the room the rules' watch's hold does not
use); a pinned one only once no snapshot reads it.

Tables are held to a share, as a process's events are to its cap, so that no process's tables starve the others'
events: all connections' tables together take at most half the capacity (``table_room``: events always have the other
half), and one process's tables at most its fair share of that half, divided among the processes connected, and at
most half its cap (``table_share``). Past either, the tables are refused (the connection ends, and says why); within
them, room is made as for the process's segments: its own oldest while it is at its cap, then the oldest of all
(ring).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal, NamedTuple

from ringtrace.collector.store.accounts import ProcessHolding
from ringtrace.collector.store.holdings import Holdings, Removal
from ringtrace.collector.store.segment_buffers import SegmentBuffers
from ringtrace.collector.store.segments import Segment
from ringtrace.collector.store.streams import TRACK_FRAME_BYTES, Stream
from ringtrace.wire.decoder import (
    DENSE_STRING_IDS,
    KIND_ENTRY_BYTES,
    STACK_ENTRY_BYTES,
    STACK_FRAME_ENTRY_BYTES,
    STRING_ENTRY_BYTES,
    TRACK_ENTRY_BYTES,
)
from ringtrace.wire.stream_limits import Limits

__all__ = ["TABLE_LIMITS", "Budget", "Policy", "TableRefusal", "table_charge_bound"]

Policy = Literal["ring", "discard"]

#: The limits a connection's tables may be refused by (``TableRefusal.limit_name``).
TABLE_LIMITS: Final = frozenset(("table_share", "table_room", "process_capacity", "capacity"))


class TableRefusal(NamedTuple):
    """Why a connection's tables cannot grow: the limit they would pass, its value, and the bytes they would need."""

    limit_name: str
    limit: int
    needed: int
    #: How the limit is worked out, for the message (``table_share``: among how many processes).
    basis: str


class Budget:
    """The capacity and the process cap over ``holdings``, kept under ``policy``; see the module docstring.

    Args:
        holdings: the segments the budget covers (and evicts from).
        buffers: where their buffers go back to.
        capacity_bytes: what all stored segments and the connections' tables may take together.
        process_capacity_bytes: what one process's segments and tables may take (at most the capacity).
        policy: ``ring`` overwrites the oldest; ``discard`` refuses the newest.
    """

    __slots__ = (
        "buffers", "capacity_bytes", "holdings", "on_evicted", "policy", "process_cap", "process_capacity_bytes",
        "spare_beyond", "table_bytes",
    )  # fmt: skip

    def __init__(
        self,
        holdings: Holdings,
        buffers: SegmentBuffers,
        capacity_bytes: int,
        process_capacity_bytes: int,
        policy: Policy,
    ) -> None:
        self.holdings = holdings
        self.buffers = buffers
        self.capacity_bytes = capacity_bytes
        self.process_capacity_bytes = min(process_capacity_bytes, capacity_bytes)
        #: None when no process cap is set: a process then only meets the capacity (its losses are overwritten).
        self.process_cap = process_capacity_bytes if process_capacity_bytes < capacity_bytes else None
        self.policy: Policy = policy
        #: Memory of the open connections' tables, counted against the capacity as segments are (``charge_tables``).
        self.table_bytes = 0
        #: Told of each segment that leaves with its events (``Store.on_evicted``), before its buffer is released: it
        #: may pin the segment to keep reading it (an incident's window).
        self.on_evicted: Callable[[Segment, Removal], None] | None = None
        #: What spare buffers may take beyond the capacity (``Store.on_evicted``): the room the rules' watch's
        #: hold has and does not use now, so that the buffers of the segments it let go of are reused, not freed.
        self.spare_beyond: Callable[[], int] = lambda: 0

    @property
    def free_bytes(self) -> int:
        """What the capacity leaves beside the stored segments and the tables (spare buffers take from it)."""
        return self.capacity_bytes - self.holdings.held_bytes - self.table_bytes

    @property
    def spare_room(self) -> int:
        """What spare buffers may take: ``free_bytes``, and what ``spare_beyond`` allows past the capacity."""
        return self.free_bytes + max(self.spare_beyond(), 0)

    def make_room(self, owner: int, size: int) -> str | None:
        """Evict (ring) until a segment of ``size`` fits both bounds; or why it cannot be stored."""
        holdings, cap = self.holdings, self.process_cap
        process = holdings.processes[owner]
        if size > self.process_capacity_bytes:
            return (
                f"{'process ' if cap else ''}capacity: a segment of {size} bytes (the stream's session frames and "
                f"one frame) exceeds {'process_capacity' if cap else 'capacity'}={self.process_capacity_bytes}"
            )
        while cap is not None and process.held_bytes + process.table_bytes + size > cap:
            if self.policy == "discard" or not process.segments:
                return f"process capacity: process_capacity={cap} bytes reached (policy discard)"
            self.evict(process.segments[0], "capped")
        while holdings.held_bytes + self.table_bytes + size > self.capacity_bytes:
            if self.policy == "discard":
                return f"capacity: capacity={self.capacity_bytes} bytes reached (policy discard)"
            if not holdings.segments:  # (ring) what is left is connections' tables: nothing to overwrite
                return (
                    f"capacity: capacity={self.capacity_bytes} bytes taken by connections' tables "
                    f"({self.table_bytes} bytes): no room for a segment of {size} bytes"
                )
            self.evict(holdings.oldest(), "overwritten")
        return None

    def fits(self, owner: int, size: int) -> bool:
        """Whether a segment of ``size`` fits both bounds as they stand."""
        cap, process = self.process_cap, self.holdings.processes[owner]
        fits_cap = cap is None or process.held_bytes + process.table_bytes + size <= cap
        return fits_cap and self.holdings.held_bytes + self.table_bytes + size <= self.capacity_bytes

    def evict(self, segment: Segment, why: Removal) -> None:
        """``segment`` leaves, its events counted ``why``; its buffer goes once no snapshot reads it."""
        self.holdings.remove(segment, why)
        if self.on_evicted is not None:
            self.on_evicted(segment, why)
        if segment.pins == 0:
            self.release(segment)
        else:
            self.buffers.retire(segment)

    def drop(self, segment: Segment) -> None:
        """An open segment that holds no events leaves (nothing to count)."""
        self.holdings.remove_empty(segment)
        if segment.pins == 0:
            self.release(segment)

    def release(self, segment: Segment) -> None:
        """The buffer of a segment gone, and read no more, goes back: kept to reuse while it fits the capacity. Once:
        a second release would give back a buffer that is another segment's by then (a data dir unmaps it)."""
        if segment.released:
            return
        segment.released = True
        self.buffers.release(segment, reuse=self.buffers.pooled_bytes + segment.size <= self.spare_room)

    # -- table charges --------------------------------------------------------------------------------------------

    @property
    def table_room(self) -> int:
        """What all connections' tables may take together: half the capacity (events always have the other half)."""
        return self.capacity_bytes // 2

    def table_share(self) -> int:
        """What one process's tables may take: its fair share of ``table_room`` among the processes connected, and
        at most half its cap (its events keep the other half, as all events keep half the capacity)."""
        return min(self.table_room // max(self.holdings.connected, 1), self.process_capacity_bytes // 2)

    def charge_tables(self, stream: Stream, decoder_bytes: int) -> TableRefusal | None:
        """``Store.charge_tables``: None, or why the tables cannot grow (the connection must end)."""
        holdings = self.holdings
        process = holdings.processes[stream.owner]
        charge = decoder_bytes + stream.memory_bytes
        grow = charge - stream.charged
        if grow > 0:
            refusal = self._table_refusal(stream, process, grow)
            if refusal is not None:
                return refusal
        self.table_bytes += grow
        process.table_bytes += grow
        stream.charged = charge
        if grow > 0:
            self.buffers.trim(self.spare_room)  # spare buffers take memory too
        return None

    def _table_refusal(self, stream: Stream, process: ProcessHolding, grow: int) -> TableRefusal | None:
        """Make room for ``grow`` more bytes of the stream's tables (ring: evicting as for its segments, but never
        its open segment, and nothing for tables that could not fit anyway); or why they cannot grow."""
        holdings, cap, capacity = self.holdings, self.process_cap, self.capacity_bytes
        share = self.table_share()
        if process.table_bytes + grow > share:
            if share < self.table_room // max(holdings.connected, 1):
                basis = f"half the process capacity of {self.process_capacity_bytes} bytes"
            else:
                basis = f"half the capacity of {capacity} bytes among {holdings.connected} processes connected"
            return TableRefusal("table_share", share, process.table_bytes + grow, basis)
        if self.table_bytes + grow > self.table_room:
            return TableRefusal("table_room", self.table_room, self.table_bytes + grow, "half the capacity")
        if self.policy == "discard":  # overwrites nothing: tables go past a full store, within the room above
            return None
        while cap is not None and process.held_bytes + process.table_bytes + grow > cap:
            own = next((s for s in process.segments if s is not stream.segment), None)
            if own is None:
                needed = process.held_bytes + process.table_bytes + grow
                return TableRefusal("process_capacity", cap, needed, "its segments and tables")
            self.evict(own, "capped")
        while holdings.held_bytes + self.table_bytes + grow > capacity:
            oldest = holdings.oldest() if holdings.segments else None
            if oldest is None or oldest is stream.segment:
                needed = holdings.held_bytes + self.table_bytes + grow
                return TableRefusal("capacity", capacity, needed, "every segment and table")
            self.evict(oldest, "overwritten")
        return None

    def uncharge(self, stream: Stream) -> None:
        """The stream's connection ended: its tables are counted no more."""
        self.table_bytes -= stream.charged
        self.holdings.processes[stream.owner].table_bytes -= stream.charged
        stream.charged = 0


def table_charge_bound(limits: Limits) -> int:
    """At most what one connection's tables are charged (``Store.charge_tables``) when it declares all ``limits``
    allow: its decoder's tables (``SessionDecoder.table_bytes``: the strings' hashes, dense or sparse; each track and
    its name, Python's str at up to 4 bytes a character; each kind and its texts) and the session frames kept to
    replay them (``Stream.memory_bytes``). An upper estimate, to tell how many such connections a capacity holds."""
    strings = max(16 * max(limits.max_strings, DENSE_STRING_IDS), limits.max_strings * STRING_ENTRY_BYTES)
    tracks = limits.max_tracks * (TRACK_FRAME_BYTES + 64 + TRACK_ENTRY_BYTES) + 5 * limits.max_string_bytes
    kinds = limits.max_kinds * KIND_ENTRY_BYTES + 6 * limits.max_schema_bytes
    string_frames = 2 * limits.max_string_bytes + 8 * limits.max_strings
    # The stack table (its texts a budget of their own) and its STACKS frames kept, an eighth more: an entry's share
    # of a frame's header and fields is at most 72 bytes (67 alone in a frame; a frame kept adds one at least). None
    # without a code location.
    entries = limits.max_stacks + limits.max_stack_frames
    stacks = limits.max_stacks * STACK_ENTRY_BYTES + limits.max_stack_frames * STACK_FRAME_ENTRY_BYTES
    stacks += 4 * limits.max_string_bytes + 9 * (limits.max_string_bytes + 72 * entries) // 8
    stacks *= limits.max_stack_frames > 0
    return strings + tracks + kinds + string_frames + stacks
