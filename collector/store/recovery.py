"""Recovery from a data dir: a segment found there (``DataDir.recover``) taken into the store, sealed, as if it had
just been stored, its events counted received; within the bounds of the store as it restarts, which may be smaller
than the one that wrote it (what no longer fits is counted overwritten or capped, as a full ring would have).
"""

from __future__ import annotations

from ringtrace.collector.store.accounts import ProcessHolding
from ringtrace.collector.store.budget import Budget
from ringtrace.collector.store.segment_files import Recovered
from ringtrace.collector.store.segments import Segment

__all__ = ["adopt"]


def adopt(budget: Budget, recovered: Recovered, owner: int) -> None:
    """Take in ``recovered``, a segment of process ``owner`` (oldest ones first); the caller numbers new segments
    past it."""
    holdings = budget.holdings
    process = holdings.processes.setdefault(owner, ProcessHolding())
    segment = _received(recovered, owner, process)
    if segment.size > min(budget.capacity_bytes, budget.process_cap or budget.capacity_bytes):  # restarted smaller
        for track_id, (events, size) in segment.tracks.items():
            process.counts.lost(track_id, "overwritten", events, size)
        budget.buffers.release(segment, reuse=False)
        return
    while holdings.held_bytes + segment.size > budget.capacity_bytes and holdings.segments:  # restarted smaller
        budget.evict(holdings.oldest(), "overwritten")
    while budget.process_cap and process.held_bytes + segment.size > budget.process_cap and process.segments:
        budget.evict(process.segments[0], "capped")
    holdings.add(segment)
    budget.buffers.trim(budget.capacity_bytes - holdings.held_bytes)


def _received(recovered: Recovered, owner: int, process: ProcessHolding) -> Segment:
    """The recovered segment, indexed again, its events counted received by ``process``."""
    segment = Segment(recovered.seq, recovered.buffer, owner)
    for offset, size, track_id, count, first_ts, last_ts in recovered.entries:
        segment.index_events(offset, size, track_id, count, first_ts, last_ts)
        process.counts.received(track_id, count, size)
    segment.used = segment.checked = recovered.used
    return segment
