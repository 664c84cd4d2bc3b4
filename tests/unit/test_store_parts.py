"""The store's parts alone: what is held and leaves (Holdings), and the byte budget that makes room (Budget)."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import pytest
from ringtrace.collector.store.accounts import ProcessHolding
from ringtrace.collector.store.budget import Budget
from ringtrace.collector.store.holdings import Holdings
from ringtrace.collector.store.segment_buffers import HUGE_PAGE_BYTES, MemoryBuffers
from ringtrace.collector.store.segments import Buffer, Segment
from ringtrace.collector.store.streams import Stream

SIZE = 64 * 1024


def holding(*owners: int) -> Holdings:
    holdings = Holdings()
    for owner in owners:
        holdings.processes[owner] = ProcessHolding()
    return holdings


def stored(holdings: Holdings, seq: int, owner: int, events: int = 10, writer: Stream | None = None) -> Segment:
    """A segment of ``events`` events on track 7, held (open when it has a ``writer``)."""
    segment = Segment(seq, bytearray(SIZE), owner)
    if events:
        segment.write_events(bytes(100), 7, events, 0, 1)
        holdings.processes[owner].counts.received(7, events, 0)
    holdings.add(segment, writer)
    return segment


def test_the_oldest_segment_to_overwrite_is_the_oldest_sealed_one_then_the_oldest_of_all() -> None:
    holdings = holding(1)
    stream = Stream(1, holdings.processes[1].counts, b"", SIZE)
    first = stored(holdings, 0, 1, writer=stream)
    second = stored(holdings, 1, 1)
    assert holdings.oldest() is second  # the open one holds the newest events
    holdings.seal(first)
    assert holdings.oldest() is first


def test_a_segment_that_leaves_is_counted_as_why_it_left_and_its_writer_writes_on_elsewhere() -> None:
    holdings = holding(1)
    stream = Stream(1, holdings.processes[1].counts, b"", SIZE)
    segment = stored(holdings, 0, 1, events=10, writer=stream)
    stream.segment, stream.direct = segment, True
    holdings.remove(segment, "capped")
    counts = holdings.processes[1].counts[7]
    assert (counts.capped_events, counts.stored_events, holdings.held_bytes) == (10, 0, 0)
    assert segment.evicted and stream.segment is None and not stream.direct


def test_an_empty_segment_leaves_uncounted() -> None:
    holdings = holding(1)
    stream = Stream(1, holdings.processes[1].counts, b"", SIZE)
    stored(holdings, 0, 1)
    empty = stored(holdings, 1, 1, events=0, writer=stream)
    holdings.remove_empty(empty)  # not its process's oldest: it may leave all the same
    assert [s.seq for s in holdings.processes[1].segments] == [0]
    assert holdings.held_bytes == SIZE and holdings.processes[1].counts[7].stored_events == 10


def test_ring_makes_room_by_overwriting_the_oldest_and_a_process_at_its_cap_by_its_own() -> None:
    holdings = holding(1, 2)
    budget = Budget(holdings, MemoryBuffers(), 4 * SIZE, 2 * SIZE, "ring")
    for seq, owner in enumerate((1, 2, 1, 2)):
        stored(holdings, seq, owner)
    assert budget.make_room(2, SIZE) is None  # process 2 at its cap: its own oldest goes
    assert [s.seq for s in holdings.segments.values()] == [0, 2, 3]
    assert holdings.processes[2].counts[7].capped_events == 10
    budget.table_bytes = SIZE
    assert budget.make_room(2, SIZE) is None  # the capacity, tables included: the oldest of all goes
    assert holdings.processes[1].counts[7].overwritten_events == 10
    assert holdings.held_bytes + budget.table_bytes + SIZE <= budget.capacity_bytes


def test_discard_refuses_and_says_which_bound() -> None:
    holdings = holding(1)
    budget = Budget(holdings, MemoryBuffers(), 4 * SIZE, 4 * SIZE, "discard")
    for seq in range(4):
        stored(holdings, seq, 1)
    assert budget.make_room(1, SIZE) == f"capacity: capacity={4 * SIZE} bytes reached (policy discard)"
    assert budget.make_room(1, 8 * SIZE) == (
        f"capacity: a segment of {8 * SIZE} bytes (the stream's session frames and one frame) exceeds "
        f"capacity={4 * SIZE}"
    )
    assert len(holdings.segments) == 4  # nothing evicted


def test_tables_past_their_share_are_refused_with_the_bytes_they_need_and_charged_once_they_fit() -> None:
    holdings = holding(1, 2)
    holdings.connected = 2
    budget = Budget(holdings, MemoryBuffers(), 8 * SIZE, 8 * SIZE, "ring")
    stream = Stream(1, holdings.processes[1].counts, b"", SIZE)
    refusal = budget.charge_tables(stream, 3 * SIZE)  # its share: half the capacity among 2 processes
    assert refusal is not None and refusal[:3] == ("table_share", 2 * SIZE, 3 * SIZE + stream.memory_bytes)
    assert budget.table_bytes == holdings.processes[1].table_bytes == 0
    holdings.connected = 1
    for seq in range(8):
        stored(holdings, seq, 2)
    assert budget.charge_tables(stream, 3 * SIZE) is None  # the oldest segments are overwritten for them
    assert budget.table_bytes == holdings.processes[1].table_bytes == stream.charged == 3 * SIZE + stream.memory_bytes
    assert len(holdings.segments) == 4 and holdings.processes[2].counts[7].overwritten_events == 40
    budget.uncharge(stream)
    assert budget.table_bytes == holdings.processes[1].table_bytes == stream.charged == 0


def _vm_flags(buffer: Buffer) -> list[str]:
    """The kernel's VmFlags of the mapping that holds ``buffer`` (/proc/self/smaps)."""
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(maxsplit=1)[0]
        if "-" in first and not first.endswith(":"):
            start, end = (int(part, 16) for part in first.split("-"))
            inside = start <= address < end
        elif inside and first == "VmFlags:":
            return line.split()[1:]
    raise AssertionError("no mapping holds the buffer")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads the kernel's view of the mapping")
def test_memory_segments_of_whole_huge_pages_ask_for_huge_pages_and_are_zeroed_and_reused() -> None:
    buffers = MemoryBuffers()
    large, small = buffers.new(0, 2 * HUGE_PAGE_BYTES), buffers.new(1, 64 * 1024)
    assert len(large) == 2 * HUGE_PAGE_BYTES and len(small) == 64 * 1024
    assert large[:4096] == bytes(4096) and large[-4096:] == bytes(4096) and small[:] == bytes(len(small))
    large[-1] = small[-1] = 7
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert "hg" in _vm_flags(large)  # madvise(MADV_HUGEPAGE): the kernel's copy into it misses the TLB less
    for seq, buffer in enumerate((large, small)):
        segment = Segment(seq, buffer, owner=1)
        buffers.release(segment, reuse=True)
        assert len(segment.buffer) == 0
    assert buffers.pooled_bytes == 2 * HUGE_PAGE_BYTES + 64 * 1024
    assert buffers.new(2, 2 * HUGE_PAGE_BYTES) is large and buffers.new(3, 64 * 1024) is small
    assert buffers.pooled_bytes == 0


def test_a_process_s_tables_count_toward_its_cap_and_take_at_most_half_of_it() -> None:
    holdings = holding(1)
    holdings.connected = 1
    budget = Budget(holdings, MemoryBuffers(), 16 * SIZE, 4 * SIZE, "ring")
    stream = Stream(1, holdings.processes[1].counts, b"", SIZE)
    refusal = budget.charge_tables(stream, 3 * SIZE)
    assert refusal is not None and refusal[:2] == ("table_share", 2 * SIZE)  # half its cap
    assert refusal.basis == f"half the process capacity of {4 * SIZE} bytes"
    assert budget.charge_tables(stream, SIZE) is None
    for seq in range(3):
        stored(holdings, seq, 1)
    assert budget.make_room(1, SIZE) is None  # its segments and tables within its cap: its own oldest go
    assert holdings.processes[1].held_bytes + holdings.processes[1].table_bytes + SIZE <= 4 * SIZE
    assert holdings.processes[1].counts[7].capped_events == 20
