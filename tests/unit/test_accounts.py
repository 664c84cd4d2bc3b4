"""Accounts (the store's counts): totals over live and forgotten processes, and the bounded memory of cleared
segments and of what was kept of forgotten processes."""

from __future__ import annotations

import pytest
from ringtrace.collector.store.accounts import (
    CLEARED_REMEMBERED,
    FORGOTTEN_KEPT_REMEMBERED,
    Accounts,
    Counts,
    ProcessHolding,
    TrackCounts,
)
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from store_client import Client


def holding(**tracks: Counts) -> ProcessHolding:
    return ProcessHolding(
        counts=TrackCounts({int(track.removeprefix("t")): counts for track, counts in tracks.items()})
    )


def test_a_forgotten_process_leaves_the_tables_but_not_the_totals() -> None:
    processes = {
        1: holding(t1=Counts(received_events=10, overwritten_events=4), t2=Counts(received_events=5)),
        2: holding(t1=Counts(received_events=7, discarded_events=7)),
    }
    accounts = Accounts(processes)
    before = accounts.totals()
    assert (before.received_events, before.stored_events) == (22, 11)
    assert accounts.kept_events([1, 2, 3]) == {1: 15, 2: 0}
    accounts.forget(1)
    assert list(processes) == [2]
    assert accounts.totals() == before
    assert accounts.forgotten.received_events == 15
    assert list(accounts.process_counts()) == [2]
    assert accounts.track_counts() == {(2, 1): Counts(received_events=7, discarded_events=7)}


def test_the_cleared_segments_remembered_are_the_newest_and_bounded() -> None:
    accounts = Accounts({})
    for seq in range(CLEARED_REMEMBERED + 10):
        accounts.cleared(seq, owner=seq % 2, events=1)
    remembered = accounts.cleared_segments({0, 1}, after_seq=-1)
    assert len(remembered) == CLEARED_REMEMBERED
    assert min(remembered) == 10
    assert accounts.cleared_segments({1}, after_seq=CLEARED_REMEMBERED + 5) == {
        CLEARED_REMEMBERED + 7: (1, 1),
        CLEARED_REMEMBERED + 9: (1, 1),
    }


def test_the_events_kept_of_a_forgotten_process_are_remembered_the_newest_and_bounded() -> None:
    # (the rules' watch counts what it did not read of a process the store forgot since its last step)
    processes = {uid: holding(t1=Counts(received_events=uid + 3, capped_events=1)) for uid in range(3)}
    accounts = Accounts(processes)
    accounts.forget(1)
    assert accounts.kept_events([0, 1, 2, 3]) == {0: 2, 1: 3, 2: 4}
    for uid in range(10, 10 + FORGOTTEN_KEPT_REMEMBERED):
        processes[uid] = holding(t1=Counts(received_events=1))
        accounts.forget(uid)
    newest = 10 + FORGOTTEN_KEPT_REMEMBERED - 1
    assert accounts.kept_events([1, newest]) == {newest: 1}, "the oldest forgotten is no longer remembered"


def test_the_stores_sums_read_each_processs_total_not_each_of_its_tracks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process of 2,000 tracks (an OTLP trace has tracks of its own), some overwritten: the store's totals, asked
    for by every /healthz and /metrics, add up one count a process (and the forgotten), not one a track; and they
    are still its tracks' sum."""
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=2_000)
    for track in range(2_000):
        client.record(track, 20)
    tracks = store.track_counts()
    summed = Counts()
    for counts in tracks.values():
        summed.add(counts)
    assert summed.overwritten_events and summed.stored_events  # (the ring turned over: both kinds of count move)
    added = []
    real_add = Counts.add
    monkeypatch.setattr(Counts, "add", lambda self, other: added.append(other) or real_add(self, other))
    assert store.totals() == summed
    assert len(added) <= 2, f"totals added {len(added)} counts for 1 process"
    assert store.process_received() == {1: (summed.received_events, summed.received_bytes)}
    assert store.kept_events([1]) == {1: summed.received_events}
