"""Store: self-describing segments within a byte budget, two policies, per-process caps, exact accounting, recovery."""

from __future__ import annotations

import json
import os
import re
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_model import PerfettoTrace
from ringtrace.client import read_trace_streams
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.native import native_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.read.frame_walk import FrameWalk, ProcessView, SnapshotView
from ringtrace.collector.read.selection import EVERYTHING, Selection
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Counts, Store
from ringtrace.collector.store.segment_files import DataDir
from ringtrace.collector.store.segment_scan import scan_segment
from ringtrace.collector.store.segments import Segment
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.frame_types import CHECKSUM_TYPE, FRAME_HEADER, FrameType
from ringtrace.wire.frames import Events, Stats, encode
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.table_frames import Strings
from store_client import Client


def decoded(store: Store) -> dict[int, dict[int, list[int]]]:
    """Per owner, per track id: the event indices the stored segments hold, each segment decoded alone."""
    out: dict[int, dict[int, list[int]]] = {}
    with store.snapshot() as snapshot:
        for segment in snapshot.segments:
            decoder = SessionDecoder(Limits(), live=False)
            decoder.receive_data(segment.data())
            decoder.receive_data(b"")
            for frame in decoder:
                for event in decoder.tables.events(frame) if frame.TYPE == FrameType.EVENTS else ():  # type: ignore[arg-type]
                    out.setdefault(segment.owner, {}).setdefault(event.track.track_id, []).append(event.args["i"])
    return out


def assert_adds_up(store: Store) -> None:
    """received = stored + each kind of loss (cleared included), per track; stored matches what the segments index."""
    indexed: dict[tuple[int, int], int] = {}
    with store.snapshot() as snapshot:
        for segment in snapshot.segments:
            for _, _, track_id, count, _, _ in segment.index():
                indexed[(segment.owner, track_id)] = indexed.get((segment.owner, track_id), 0) + count
    for key, counts in store.track_counts().items():
        losses = counts.overwritten_events + counts.capped_events + counts.discarded_events + counts.cleared_events
        assert counts.received_events == counts.stored_events + losses
        assert counts.stored_events == indexed.get(key, 0), key
        assert counts.stored_bytes >= 0
    assert store.stored_events == sum(indexed.values())
    assert store.held_bytes <= store.capacity_bytes
    summed: dict[int, Counts] = {}
    for (owner, _), counts in store.track_counts().items():
        summed.setdefault(owner, Counts()).add(counts)
    for owner, total in store.process_counts().items():  # (kept as they change: each process's sum is its tracks')
        assert total == summed.get(owner, Counts()), owner


# -- storing and decoding -------------------------------------------------------------------------------------------


def test_each_segment_decodes_alone_to_exactly_the_events_sent() -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    clients = [Client(store, owner) for owner in (1, 2)]
    for round_ in range(150):
        for client in clients:
            client.record(round_ % 2, 50)
    assert store.segment_count > 2  # several segments per stream: each must carry the session frames again
    assert decoded(store) == {c.owner: c.sent for c in clients}
    assert_adds_up(store)
    assert store.totals().stored_events == 2 * 150 * 50


def test_a_track_ended_is_not_declared_in_the_next_segment() -> None:
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1)
    client.record(0, 10)
    retired = client.encoder.retire(client.tracks[0])
    assert retired is not None
    client.feed(retired)
    client.record(1, 3000)  # fills the first segment: the next opens with track 1 only
    with store.snapshot() as snapshot:
        last = snapshot.segments[-1]
        decoder = SessionDecoder(Limits(), live=False)
        decoder.receive_data(last.data())
        list(decoder)
        assert set(decoder.tables.tracks) == {client.tracks[1].track_id}


def test_a_segment_opened_after_a_string_table_reset_replays_only_the_new_table(tmp_path: Path) -> None:
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1)
    client.encoder.strings.recycles = True
    client.encoder.strings.limit_to(10)  # 9 labels a table: every other run of 5 new labels starts it again
    for _ in range(600):
        client.record(0, 5, labels=1000)
    assert client.encoder.strings.epoch >= 300 and client.encoder.label_overflow_events == 0
    assert store.segment_count > 2
    names: list[str] = []
    with store.snapshot() as snapshot:
        for segment in snapshot.segments[1:]:  # (the first opens with the stream's first table)
            decoder = SessionDecoder(Limits(max_strings=10), live=False)
            decoder.receive_data(segment.data())
            decoder.receive_data(b"")
            strings: list[Strings] = []
            for frame in decoder:  # each EVENTS frame decoded with the table it came after
                if isinstance(frame, Strings):
                    strings.append(frame)
                elif isinstance(frame, Events):
                    names += [event.name for event in decoder.tables.events(frame)]
            assert strings[0].reset  # the table since the last reset, not every table declared before
    sent = [f"tick{i % 1000}" for i in range(600 * 5)]
    assert names == sent[-len(names) :]
    # Each writer reads each frame with the table it came after.
    process = ProcessView(1, 101, 101, "host", "proc-1", 0, Stats(0, 0), {})
    for write in (chrome_trace_chunks, perfetto_chunks, native_chunks):
        with store.snapshot() as snapshot:
            data = b"".join(write(SnapshotView(snapshot, {1: process}, store.track_counts(), limits=Limits())))
        if write is chrome_trace_chunks:
            shown = [(e["args"]["i"], e["name"]) for e in json.loads(data)["traceEvents"] if e["ph"] == "i"]
        elif write is perfetto_chunks:
            shown = [(i.args["i"], i.name) for i in PerfettoTrace(data).instants]
        else:
            (tmp_path / "snapshot.rtsnap").write_bytes(data)
            shown = [(e.args["i"], e.name) for s in read_trace_streams(tmp_path / "snapshot.rtsnap") for e in s.events]
        assert len(shown) > len(names) / 2 and all(name == sent[i] for i, name in shown), write


# -- policies and caps ----------------------------------------------------------------------------------------------


def test_ring_keeps_the_newest_and_counts_the_overwritten() -> None:
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    for _ in range(200):
        client.record(0, 64)
    kept = decoded(store)[1][client.tracks[0].track_id]
    sent = client.sent[client.tracks[0].track_id]
    assert 0 < len(kept) < len(sent)
    assert kept == sent[-len(kept) :]  # a suffix: the most recent past, nothing missing inside it
    (counts,) = store.track_counts().values()
    assert counts.overwritten_events == len(sent) - len(kept)
    assert counts.capped_events == counts.discarded_events == 0
    assert_adds_up(store)


def test_the_ring_overwrites_sealed_segments_before_a_connections_open_one() -> None:
    # A connection's open segment holds its newest events, and ingest may be reading into it.
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    slow, busy = Client(store, 1, tracks=1), Client(store, 2, tracks=1)
    slow.record(0, 10)  # the oldest segment of all, and still open
    for _ in range(200):
        busy.record(0, 64)
    slow.record(0, 10)
    assert decoded(store)[1] == slow.sent
    assert store.track_counts()[(2, busy.tracks[0].track_id)].overwritten_events > 0
    assert_adds_up(store)
    store.close_stream(slow.stream)  # sealed: the next to go
    busy_overwritten = store.track_counts()[(2, busy.tracks[0].track_id)].overwritten_events
    for _ in range(100):  # until the ring next makes room (where a segment ends depends on the prefix's size)
        busy.record(0, 64)
        if 1 not in decoded(store):
            break
    assert 1 not in decoded(store)
    assert store.track_counts()[(2, busy.tracks[0].track_id)].overwritten_events == busy_overwritten
    assert_adds_up(store)


def test_the_ring_overwrites_a_process_sealed_segment_ahead_of_its_older_open_one() -> None:
    # One process on two connections (two timelines streaming, say): the ring takes the sealed segments of one
    # before the older, open segment of the other, and the process's accounts follow.
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    quiet = Client(store, 1, tracks=1)
    quiet.record(0, 10)  # the process's oldest segment, open
    loud = Client(store, 1, tracks=1)
    for _ in range(40):  # the same process's later segments, sealed as they fill
        loud.record(0, 64)
    other = Client(store, 2, tracks=1)
    for _ in range(300):
        other.record(0, 64)
    counts = store.track_counts()[(1, quiet.tracks[0].track_id)]
    assert counts.overwritten_events > 0
    assert 1 in decoded(store)  # the process keeps what it has newest
    assert_adds_up(store)


def test_discard_keeps_the_beginning_and_counts_the_refused() -> None:
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, policy="discard")
    client = Client(store, 1, tracks=1)
    for _ in range(200):
        client.record(0, 64)
    kept = decoded(store)[1][client.tracks[0].track_id]
    sent = client.sent[client.tracks[0].track_id]
    assert 0 < len(kept) < len(sent)
    assert kept == sent[: len(kept)]  # a prefix: the flight recorder that keeps the beginning
    (counts,) = store.track_counts().values()
    assert counts.discarded_events == len(sent) - len(kept)
    assert counts.overwritten_events == counts.capped_events == 0
    assert_adds_up(store)


@pytest.mark.parametrize("policy", ["ring", "discard"])
def test_a_noisy_process_meets_its_own_cap_not_its_neighbours_history(policy: Any) -> None:
    cap = 8 * MIN_SEGMENT_BYTES  # room for a few segments, whatever the session frames of this process hold
    store = Store(64 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, process_capacity_bytes=cap, policy=policy)
    quiet, noisy = Client(store, 1, tracks=1), Client(store, 2, tracks=1)
    quiet.record(0, 100)
    for _ in range(300):
        noisy.record(0, 64)
    quiet.record(0, 100)
    held = decoded(store)
    assert held[1] == quiet.sent  # all of it
    assert store.process_held_bytes(2) <= cap
    counts = store.track_counts()
    noisy_counts = counts[(2, noisy.tracks[0].track_id)]
    assert noisy_counts.capped_events > 0
    assert noisy_counts.overwritten_events == noisy_counts.discarded_events == 0
    assert counts[(1, quiet.tracks[0].track_id)] == Counts(200, counts[(1, quiet.tracks[0].track_id)].received_bytes)
    assert_adds_up(store)


def test_bounds_that_cannot_hold_two_segments_are_refused() -> None:
    with pytest.raises(ConfigError, match="capacity of 1000 bytes must hold at least 2 segments of 65536"):
        Store(1000, MIN_SEGMENT_BYTES)
    with pytest.raises(ConfigError, match="process capacity of 65536 bytes"):
        Store(10 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, process_capacity_bytes=MIN_SEGMENT_BYTES)
    with pytest.raises(ConfigError, match="policy must be 'ring' or 'discard', got 'lifo'"):
        Store(10 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, policy="lifo")  # type: ignore[arg-type]


# -- snapshots, memory, forgetting ----------------------------------------------------------------------------------


def test_a_snapshot_reads_its_segments_unchanged_while_ingest_overwrites_the_store() -> None:
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    for _ in range(40):
        client.record(0, 64)
    snapshot = store.snapshot()
    before = [segment.data() for segment in snapshot.segments]
    for _ in range(400):  # every segment the snapshot holds is evicted, several times over
        client.record(0, 64)
    assert [segment.data() for segment in snapshot.segments] == before
    snapshot.close()
    for _ in range(400):  # now their buffers may be reused
        client.record(0, 64)
    assert_adds_up(store)


def test_memory_held_and_spare_stays_within_the_capacity() -> None:
    store = Store(6 * MIN_SEGMENT_BYTES, 2 * MIN_SEGMENT_BYTES)
    clients = [Client(store, owner, tracks=1) for owner in range(5)]
    for round_ in range(300):
        clients[round_ % 5].record(0, 64)
        assert store.held_bytes + store.buffers.pooled_bytes <= store.capacity_bytes
    assert_adds_up(store)


def test_a_process_is_forgotten_only_when_it_holds_nothing_and_its_counts_stay_in_the_totals() -> None:
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    old, new = Client(store, 1, tracks=1), Client(store, 2, tracks=1)
    old.record(0, 100)
    store.close_stream(old.stream)
    assert store.holds(1)  # its segment is still stored
    for _ in range(200):
        new.record(0, 64)
    assert not store.holds(1)  # overwritten
    before = store.totals()
    store.forget(1)
    assert store.totals() == before
    assert store.forgotten.overwritten_events == 100
    assert {owner for owner, _ in store.track_counts()} == {2}


def test_clear_removes_what_a_process_holds_counted_and_its_stream_writes_on() -> None:
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    kept, cleared = Client(store, 1), Client(store, 2)
    kept.record(0, 100)
    cleared.record(0, 300)
    with store.snapshot() as pinned:  # a snapshot being read keeps its segments' buffers, not their events
        assert store.clear([2]) == 300
        assert {segment.owner for segment in pinned.segments} == {1, 2}
    counts = store.process_counts()
    assert (counts[2].cleared_events, counts[2].stored_events, counts[1].stored_events) == (300, 0, 100)
    assert store.clear([2, 3]) == 0  # nothing left; an unknown owner is no error
    cleared.record(1, 5)  # the connection goes on, into a new segment that replays its session frames
    assert decoded(store) == {1: {100: list(range(100))}, 2: {201: [0, 1, 2, 3, 4]}}
    assert_adds_up(store)


# -- accounting, as a property --------------------------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.integers(0, 3), st.integers(0, 1), st.integers(1, 300)),
        st.tuples(st.just("reconnect"), st.integers(0, 3)),
        st.tuples(st.just("snapshot"), st.integers(0, 3)),
        st.tuples(st.just("release"), st.integers(0, 3)),
        st.tuples(st.just("clear"), st.integers(0, 3)),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(
    capacity_segments=st.integers(2, 6),
    process_segments=st.one_of(st.none(), st.integers(2, 6)),
    policy=st.sampled_from(["ring", "discard"]),
    ops=operations,
)
def test_received_is_stored_plus_each_kind_of_loss_whatever_happens(
    capacity_segments: int, process_segments: int | None, policy: Any, ops: list[tuple[Any, ...]]
) -> None:
    store = Store(
        capacity_segments * MIN_SEGMENT_BYTES,
        MIN_SEGMENT_BYTES,
        process_capacity_bytes=None if process_segments is None else process_segments * MIN_SEGMENT_BYTES,
        policy=policy,
    )
    clients: dict[int, Client] = {}
    snapshots = []
    sent: dict[tuple[int, int], int] = {}
    for op in ops:
        owner = op[1]
        if op[0] == "record":
            client = clients.get(owner) or clients.setdefault(owner, Client(store, owner))
            client.record(op[2], op[3])
            key = (owner, client.tracks[op[2]].track_id)
            sent[key] = sent.get(key, 0) + op[3]
        elif op[0] == "reconnect" and owner in clients:
            store.close_stream(clients.pop(owner).stream)
        elif op[0] == "snapshot":
            snapshots.append(store.snapshot())
        elif op[0] == "release" and snapshots:
            snapshots.pop(owner % len(snapshots)).close()
        elif op[0] == "clear":
            store.clear([owner])
            assert not decoded(store).get(owner)
        assert_adds_up(store)
        if process_segments is not None:
            assert all(store.process_held_bytes(o) <= process_segments * MIN_SEGMENT_BYTES for o in range(4))
    assert {key: counts.received_events for key, counts in store.track_counts().items()} == sent
    for snapshot in snapshots:
        snapshot.close()


# -- data dir: files, checksums, recovery ---------------------------------------------------------------------------


def data_dir_store(path: Path, **options: Any) -> Store:
    return Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, buffers=DataDir(path, "never"), **options)


def release_lock(store: Store) -> None:
    """What the end of a killed collector's process does: its lock on the data dir goes."""
    assert isinstance(store.buffers, DataDir)
    store.buffers.close()


def recover(path: Path) -> Store:
    store = data_dir_store(path)
    assert isinstance(store.buffers, DataDir)
    for recovered in store.buffers.recover(Limits()):
        store.adopt(recovered, owner=int(recovered.hello.instance_id.removeprefix("i")))
    return store


def test_a_data_dir_store_restarted_serves_what_it_held(tmp_path: Path) -> None:
    store = data_dir_store(tmp_path)
    clients = [Client(store, owner) for owner in (1, 2)]
    for round_ in range(30):
        for client in clients:
            client.record(round_ % 2, 40)
    held = decoded(store)
    assert held == {c.owner: c.sent for c in clients}
    counts = store.totals()
    release_lock(store)  # the mappings stay open: as after kill -9, nothing was closed or synced explicitly
    del store, clients
    restarted = recover(tmp_path)
    assert decoded(restarted) == held
    assert restarted.totals().stored_events == counts.stored_events
    assert_adds_up(restarted)
    # It goes on: new segments after the recovered ones, older ones overwritten in order.
    client = Client(restarted, 3, tracks=1)
    for _ in range(200):
        client.record(0, 64)
    assert_adds_up(restarted)
    assert len(list(tmp_path.glob("*.rtseg"))) == restarted.segment_count
    # Files of evicted segments were reused, old bytes and all: a second recovery reads exactly what was held, and
    # finds nothing to cut.
    held_again = decoded(restarted)
    release_lock(restarted)
    del restarted, client
    again = data_dir_store(tmp_path)
    assert isinstance(again.buffers, DataDir)
    recovered = list(again.buffers.recover(Limits()))
    assert [r.why_cut for r in recovered] == [None] * len(recovered)
    for r in recovered:
        again.adopt(r, owner=int(r.hello.instance_id.removeprefix("i")))
    assert decoded(again) == held_again


def test_segment_files_not_kept_are_removed_off_the_thread_that_lets_them_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unmapping and unlinking a file wait for the kernel: the event loop, which releases segments, must not."""
    unlinked: list[int] = []
    unlink = os.unlink

    def unlink_on(path: Any, *args: Any, **kwargs: Any) -> None:
        unlinked.append(threading.get_ident())
        unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink_on)
    data_dir = DataDir(tmp_path)
    for seq, reuse in enumerate((False, True)):
        data_dir.release(Segment(seq, data_dir.new(seq, 64 * 1024), owner=1), reuse=reuse)
    assert not list(tmp_path.glob("*.rtseg"))  # neither is a segment any more, nor recovered after a crash
    data_dir.trim(0)  # the spare kept for reuse goes too
    data_dir.close()  # once every file given to be removed is
    assert len(unlinked) == 2 and threading.get_ident() not in unlinked
    assert sorted(path.name for path in tmp_path.iterdir()) == ["LOCK"]


def test_a_segment_overwritten_while_a_snapshot_reads_it_is_not_recovered_after_a_crash(tmp_path: Path) -> None:
    store = data_dir_store(tmp_path)
    client = Client(store, 1, tracks=1)
    for _ in range(20):
        client.record(0, 64)
    snapshot = store.snapshot()  # pins every segment: evicted ones are released when it closes
    for _ in range(100):
        client.record(0, 64)
    assert store.track_counts()[(1, client.tracks[0].track_id)].overwritten_events > 0
    held = decoded(store)
    assert len(list(tmp_path.glob("*.rtseg"))) == store.segment_count
    release_lock(store)  # a crash while the snapshot is still read
    restarted = recover(tmp_path)
    assert decoded(restarted) == held  # what was counted as overwritten stays gone
    assert restarted.totals().overwritten_events == 0
    snapshot.close()


def one_segment_file(tmp_path: Path, frames: int) -> tuple[Path, list[int]]:
    """A data dir holding one segment of ``frames`` EVENTS frames, each checksummed; and where each frame ends."""
    store = data_dir_store(tmp_path)
    client = Client(store, 1, tracks=1)
    ends = []
    for _ in range(frames):
        client.record(0, 5)
        segment = client.stream.segment
        assert segment is not None
        ends.append(segment.used)
    release_lock(store)
    (path,) = tmp_path.glob("*.rtseg")
    return path, ends


def test_recovery_cuts_a_torn_last_frame_at_every_offset_and_keeps_the_rest(tmp_path: Path) -> None:
    path, ends = one_segment_file(tmp_path / "source", frames=4)
    original = path.read_bytes()
    start, end = ends[-2], ends[-1]
    for cut in range(start, end):
        target = tmp_path / f"cut{cut}"
        target.mkdir()
        (target / path.name).write_bytes(original[:cut])
        (recovered,) = DataDir(target, "never").recover(Limits())
        assert recovered.used == start, cut
        assert [entry[3] for entry in recovered.entries] == [5, 5, 5]
        assert (recovered.why_cut is None) == (cut == start), cut
        recovered.buffer.close()


def test_recovery_cuts_from_a_flipped_byte_on(tmp_path: Path) -> None:
    path, ends = one_segment_file(tmp_path, frames=4)
    data = bytearray(path.read_bytes())
    data[ends[1] + 40] ^= 0x01  # inside the third frame's payload
    path.write_bytes(data)
    data_dir = DataDir(tmp_path, "never")
    (recovered,) = data_dir.recover(Limits())
    data_dir.close()
    assert recovered.used == ends[1]
    assert [entry[3] for entry in recovered.entries] == [5, 5]
    assert recovered.why_cut is not None and "checksum mismatch" in recovered.why_cut
    # The cut is zeroed in the file: a second recovery keeps the same and has nothing to say.
    recovered.buffer.flush()
    recovered.buffer.close()
    (again,) = DataDir(tmp_path, "never").recover(Limits())
    assert (again.used, again.why_cut) == (ends[1], None)
    again.buffer.close()


def test_a_file_that_is_not_a_segment_is_set_aside_with_a_reason(tmp_path: Path, caplog: Any) -> None:
    (tmp_path / f"{7:016d}.rtseg").write_bytes(b"not a segment at all")
    assert recovered(tmp_path) == 0
    assert "does not start with the ringtrace preamble" in caplog.text
    assert f"set aside as {7:016d}.rtseg.unreadable (20 bytes, outside the capacity)" in caplog.text
    assert [p.name for p in tmp_path.glob("0*")] == [f"{7:016d}.rtseg.unreadable"]
    assert (tmp_path / f"{7:016d}.rtseg.unreadable").read_bytes() == b"not a segment at all"  # as it was
    assert recovered(tmp_path) == 0  # and left alone after
    assert [p.name for p in tmp_path.glob("0*")] == [f"{7:016d}.rtseg.unreadable"]


def recovered(path: Path) -> int:
    """How many segments a data dir at ``path`` recovers."""
    data_dir = DataDir(path, "never")
    try:
        return len(list(data_dir.recover(Limits())))
    finally:
        data_dir.close()


def test_a_segment_whose_first_frame_is_corrupt_is_set_aside(tmp_path: Path, caplog: Any) -> None:
    path, ends = one_segment_file(tmp_path, frames=2)
    data = bytearray(path.read_bytes())
    data[ends[0] - 3] ^= 0x01  # inside the first EVENTS frame: nothing of the segment can be kept
    path.write_bytes(data)
    assert recovered(tmp_path) == 0
    assert path.with_name(path.name + ".unreadable").read_bytes() == data
    assert "checksum mismatch" in caplog.text and "renamed" not in caplog.text  # (its second checksum tells)


def test_a_segment_of_one_checksum_corrupted_names_no_made_up_name(tmp_path: Path, caplog: Any) -> None:
    # Its one checksum can be matched by some number for any corruption: a number past the directory's is not said.
    path, ends = one_segment_file(tmp_path, frames=1)
    data = bytearray(path.read_bytes())
    data[ends[0] - 3] ^= 0x01  # inside its EVENTS frame, which its checksum covers
    path.write_bytes(data)
    assert recovered(tmp_path) == 0
    assert "checksum mismatch" in caplog.text and "renamed" not in caplog.text


@pytest.mark.parametrize("frames", [1, 3])
def test_a_segment_file_renamed_or_copied_is_set_aside_naming_the_name_it_was_written_as(
    tmp_path: Path, caplog: Any, frames: int
) -> None:
    # A segment's number (its file's name) seeds its checksums: under another name it cannot be read, and the log
    # said only "checksum mismatch".
    path, _ = one_segment_file(tmp_path, frames=frames)
    copy = path.with_name(f"{4242:016d}.rtseg")
    copy.write_bytes(path.read_bytes())
    assert recovered(tmp_path) == 1  # the original, and not its copy
    assert f"{copy}: no events to keep (checksum mismatch over the bytes from offset 8 to " in caplog.text
    assert f"(the segment's name is part of its checksum: was it renamed or copied from {path.name}?)" in caplog.text
    assert copy.with_name(copy.name + ".unreadable").exists()


def test_a_segment_file_made_unrecoverable_on_purpose_is_removed_not_set_aside(tmp_path: Path, caplog: Any) -> None:
    # A segment released or removed has its first frame header's bytes zeroed before its file is renamed or unlinked
    # (file_removal.py: "recovery removes it as it finds it"); a crash in between leaves its name and old events.
    path, _ = one_segment_file(tmp_path, frames=2)
    data = bytearray(path.read_bytes())
    data[: FRAME_HEADER.size] = bytes(FRAME_HEADER.size)
    path.write_bytes(data)
    assert recovered(tmp_path) == 0
    assert "removing" in caplog.text and not list(tmp_path.glob("0*"))


def test_a_segment_file_of_zeros_alone_is_removed(tmp_path: Path, caplog: Any) -> None:
    (tmp_path / f"{7:016d}.rtseg").write_bytes(bytes(4096))  # allocated, the collector killed before it wrote
    assert recovered(tmp_path) == 0
    assert "removing" in caplog.text and not list(tmp_path.glob("0*"))


def test_a_scan_stops_at_the_zeros_after_the_last_frame(tmp_path: Path) -> None:
    path, ends = one_segment_file(tmp_path, frames=3)
    data = path.read_bytes()
    assert len(data) > ends[-1] and not any(data[ends[-1] : ends[-1] + 1024])  # allocated in full, zeros after
    scan = scan_segment(data[: ends[-1] + 1024], Limits())
    assert (scan.used, scan.why_cut, [entry[3] for entry in scan.entries]) == (ends[-1], None, [5, 5, 5])


def test_stats_frames_are_replayed_into_new_segments() -> None:
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    stats = encode(Stats(7, 1))
    store.session_frame(client.stream, stats, kind="stats")
    for _ in range(100):
        client.record(0, 64)
    with store.snapshot() as snapshot:
        assert len(snapshot.segments) > 1
        for segment in snapshot.segments:
            decoder = SessionDecoder(Limits(), live=False)
            decoder.receive_data(segment.data())
            assert any(isinstance(frame, Stats) and frame.dropped_events == 7 for frame in decoder)


def test_the_checksum_frame_type_is_ignorable_and_no_wire_frame_uses_it() -> None:
    assert CHECKSUM_TYPE & 0x80
    assert CHECKSUM_TYPE not in {int(frame_type) for frame_type in FrameType}


def test_a_data_dir_is_used_by_one_store_at_a_time(tmp_path: Path) -> None:
    first = DataDir(tmp_path, "never")
    with pytest.raises(ConfigError, match=rf"is in use by another collector \(pid {os.getpid()}"):
        DataDir(tmp_path, "never")
    first.close()
    DataDir(tmp_path, "never").close()


def test_checksums_left_in_a_file_do_not_validate_under_another_segment_number(tmp_path: Path) -> None:
    path, _ = one_segment_file(tmp_path, frames=3)
    path.rename(path.with_name(f"{5:016d}.rtseg"))  # as a reused file whose new frames never reached the disk
    data_dir = DataDir(tmp_path, "never")
    assert list(data_dir.recover(Limits())) == []
    data_dir.close()


def test_a_sync_makes_the_names_of_new_segment_files_durable_too(tmp_path: Path, monkeypatch: Any) -> None:
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, buffers=DataDir(tmp_path, "flush"))
    client = Client(store, 1, tracks=1)
    client.record(0, 10)
    job = store.sync_job(client.stream)
    assert job is not None
    job.run()
    assert synced == [str(tmp_path)]  # the directory, once: the file's data went through fdatasync
    client.record(0, 10)
    job = store.sync_job(client.stream)
    assert job is not None
    job.run()
    assert synced == [str(tmp_path)]  # no new name since
    release_lock(store)


def test_a_sync_of_everything_covers_each_checksummed_range_once_closed_streams_included(
    tmp_path: Path, monkeypatch: Any
) -> None:
    store = Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, buffers=DataDir(tmp_path, "interval"))
    synced: list[tuple[int, int, int]] = []
    real_sync = store.buffers.sync
    monkeypatch.setattr(
        store.buffers, "sync", lambda s, start, end: (synced.append((s.seq, start, end)), real_sync(s, start, end))
    )
    gone, going = Client(store, 1, tracks=1), Client(store, 2, tracks=1)
    gone.record(0, 50)
    going.record(0, 50)
    store.close_stream(gone.stream)
    job = store.sync_all_job()
    assert job is not None
    job.run()
    with store.snapshot() as snapshot:
        assert sorted(synced) == sorted((segment.seq, 0, segment.used) for segment in snapshot.segments)
        before = {segment.seq: segment.used for segment in snapshot.segments}
    assert store.sync_all_job() is None  # nothing written since
    going.record(0, 10)
    synced.clear()
    job = store.sync_all_job()
    assert job is not None
    job.run()
    with store.snapshot() as snapshot:
        after = {segment.seq: segment.used for segment in snapshot.segments}
    assert synced == [(seq, before.get(seq, 0), used) for seq, used in after.items() if used != before.get(seq)]
    release_lock(store)


def test_a_new_stream_takes_a_spare_buffer_as_large_as_its_segments_grow_to_rather_than_a_fresh_one() -> None:
    # Large segments: a stream's first one (four times its session frames, which hold every kind this process
    # declared) is smaller than they grow to.
    store = Store(64 * MIN_SEGMENT_BYTES, 8 * MIN_SEGMENT_BYTES)
    busy = Client(store, 1)
    for _ in range(80):  # its segments grow to 8 * MIN_SEGMENT_BYTES, and fill the store
        busy.record(0, 500)
    Client(store, 2).record(0, 1)  # the oldest segment goes to make room: its buffer is the spare taken
    with store.snapshot() as snapshot:
        (newcomer,) = [segment for segment in snapshot.segments if segment.owner == 2]
        assert newcomer.size == 8 * MIN_SEGMENT_BYTES
        assert sum(segment.size for segment in snapshot.segments) <= store.capacity_bytes


def test_a_new_stream_in_a_full_ring_with_no_spare_takes_the_oldest_segment_s_buffer_not_a_fresh_one() -> None:
    # 7 of the busy stream's segments fit, and room for the newcomer's first one is left beside them.
    store = Store(60 * MIN_SEGMENT_BYTES, 8 * MIN_SEGMENT_BYTES)
    busy = Client(store, 1)
    for _ in range(80):  # its segments grow to 8 * MIN_SEGMENT_BYTES, and fill the store
        busy.record(0, 500)
    store.buffers.trim(0)  # no spare buffer: the newcomer's first segment would be a fresh one of its own size
    with store.snapshot() as snapshot:
        oldest = min(snapshot.segments, key=lambda segment: segment.seq)
        assert oldest.size == 8 * MIN_SEGMENT_BYTES
    Client(store, 2).record(0, 1)
    assert store.buffers.pooled_bytes == 0
    with store.snapshot() as snapshot:
        (newcomer,) = [segment for segment in snapshot.segments if segment.owner == 2]
        assert newcomer.size == 8 * MIN_SEGMENT_BYTES  # the oldest one's buffer, overwritten a little early
        assert oldest.seq not in {segment.seq for segment in snapshot.segments}
        assert sum(segment.size for segment in snapshot.segments) <= store.capacity_bytes
    assert_adds_up(store)


def test_a_segment_a_walk_has_read_is_let_go_at_once_not_when_the_snapshot_closes() -> None:
    def held_while_a_snapshot_is_open(walked: bool) -> tuple[int, int]:
        """Bytes allocated while a snapshot is open: ingest evicts every segment it pinned, then goes on; and how
        many segments it pinned."""
        tracemalloc.start()
        try:
            store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
            client = Client(store, 1, tracks=1)
            for _ in range(40):
                client.record(0, 64)
            snapshot = store.snapshot(on_store_thread=lambda call: call())
            pinned = len(snapshot.segments)
            for _ in range(100):  # every segment the snapshot pinned is evicted: their buffers stay while read
                client.record(0, 64)
            if walked:
                walk = FrameWalk(SnapshotView(snapshot, {}, {}), Selection(EVERYTHING), releases=True)
                for segment in snapshot.segments:
                    walk.done_with(segment)
                assert all(not segment.used for segment in snapshot.segments)  # a released segment reads as empty
            for _ in range(100):  # what the snapshot let go is freed or reused by now, not kept aside
                client.record(0, 64)
            held = tracemalloc.get_traced_memory()[0]
            snapshot.close()
            assert_adds_up(store)
            return held, pinned
        finally:
            tracemalloc.stop()

    kept, pinned = held_while_a_snapshot_is_open(walked=False)
    let_go, _ = held_while_a_snapshot_is_open(walked=True)
    assert pinned >= 3 and kept - let_go >= (pinned - 1) * MIN_SEGMENT_BYTES


@pytest.mark.parametrize("writer", ["chrome", "perfetto", "native"])
def test_each_writer_lets_go_of_each_segment_once_read_and_writes_it_whole_while_the_ring_reuses_it(
    writer: str, tmp_path: Path
) -> None:
    segment = 8 * MIN_SEGMENT_BYTES  # larger than a reader copies at a time: a segment is read in pieces
    store = Store(8 * segment, segment)
    client = Client(store, 1, tracks=1)
    for _ in range(300):
        client.record(0, 64)
    released: list[int] = []

    def at_once(unpin: Any) -> None:  # the store's thread is this one: let go now
        released.append(1)
        unpin()

    snapshot = store.snapshot(on_store_thread=at_once)
    pinned = len(snapshot.segments)
    process = ProcessView(1, 101, 101, "host", "proc-1", 0, Stats(0, 0), {})
    view = SnapshotView(snapshot, {1: process}, store.track_counts(), limits=Limits())
    write = {"chrome": chrome_trace_chunks, "perfetto": perfetto_chunks, "native": native_chunks}[writer]
    chunks = []
    for chunk in write(view):
        chunks.append(chunk)
        client.record(0, 64)  # the ring reuses the buffers let go so far: one let go too soon would be overwritten
    assert len(released) == pinned
    snapshot.close()
    data = b"".join(chunks)
    if writer == "chrome":
        shown = [e["args"]["i"] for e in json.loads(data)["traceEvents"] if e["ph"] == "i"]
    elif writer == "perfetto":
        shown = [i.args["i"] for i in PerfettoTrace(data).instants]
    else:
        (tmp_path / "snapshot.rtsnap").write_bytes(data)
        shown = [e.args["i"] for s in read_trace_streams(tmp_path / "snapshot.rtsnap") for e in s.events]
    recorded = 300 * 64
    assert sorted(shown) == list(range(recorded - len(shown), recorded)) and len(shown) > 100 * 64  # the newest, whole
    assert_adds_up(store)


# -- connections' tables --------------------------------------------------------------------------------------------


def test_tables_count_against_the_capacity_and_ring_overwrites_the_oldest_segments_for_them() -> None:
    store = Store(16 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    writer = Client(store, 1)
    for _ in range(40):
        writer.record(0, 200)
    held = store.held_bytes
    assert held > 12 * MIN_SEGMENT_BYTES  # full, or nearly
    tables = Client(store, 2)
    assert store.charge_tables(tables.stream, 3 * MIN_SEGMENT_BYTES) is None  # within its share: 16 / 2 / 2
    assert store.table_bytes >= 3 * MIN_SEGMENT_BYTES
    assert store.held_bytes + store.table_bytes <= store.capacity_bytes
    assert store.totals().overwritten_events > 0  # the oldest events made room, counted
    assert_adds_up(store)
    # Past its share of half the capacity: refused, and nothing is overwritten for a charge that cannot fit.
    overwritten, held = store.totals().overwritten_events, store.held_bytes
    refusal = store.charge_tables(tables.stream, 20 * MIN_SEGMENT_BYTES)
    assert refusal is not None and refusal.limit_name == "table_share" and refusal.limit == 4 * MIN_SEGMENT_BYTES
    assert refusal.needed > 20 * MIN_SEGMENT_BYTES and "among 2 processes connected" in refusal.basis
    assert (store.totals().overwritten_events, store.held_bytes) == (overwritten, held)
    store.close_stream(tables.stream)  # its charge goes with it
    assert store.table_bytes == 0


def test_discard_takes_tables_past_a_full_store_but_not_past_their_share() -> None:
    store = Store(16 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, policy="discard")
    writer = Client(store, 1)
    for _ in range(80):
        writer.record(0, 200)
    assert store.totals().discarded_events > 0  # full
    tables = Client(store, 2)
    assert store.charge_tables(tables.stream, 3 * MIN_SEGMENT_BYTES) is None  # nothing overwritten for them
    assert store.totals().overwritten_events == 0
    charged = store.table_bytes
    assert charged >= 3 * MIN_SEGMENT_BYTES
    refusal = store.charge_tables(tables.stream, 16 * MIN_SEGMENT_BYTES)
    assert refusal is not None and refusal.limit_name == "table_share"
    assert store.table_bytes == charged  # the charge refused is not kept


def test_a_process_s_tables_never_overwrite_another_s_events_past_its_share_and_count_toward_its_cap() -> None:
    store = Store(32 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, process_capacity_bytes=8 * MIN_SEGMENT_BYTES)
    good = Client(store, 1)
    for _ in range(10):
        good.record(0, 200)
    kept = store.process_held_bytes(1)
    # Four processes that only declare tables: each is held to its share of half the capacity, and within it to
    # its cap with its segments; none of the good client's events goes for them.
    fillers = [Client(store, owner) for owner in (2, 3, 4, 5)]
    share = 32 * MIN_SEGMENT_BYTES // 2 // 5
    refusals = [store.charge_tables(filler.stream, 8 * MIN_SEGMENT_BYTES) for filler in fillers]
    assert all(r is not None and (r.limit_name, r.limit) == ("table_share", share) for r in refusals), refusals
    assert [store.charge_tables(filler.stream, share // 2) for filler in fillers] == [None] * 4
    assert store.table_bytes <= store.capacity_bytes // 2
    assert store.process_held_bytes(1) == kept and store.totals().overwritten_events == 0
    good.record(0, 200)  # and its next events find room
    assert store.totals().discarded_events == 0
    assert_adds_up(store)
    # A process at its cap makes room for its tables by its own past, counted capped.
    for _ in range(40):
        good.record(0, 200)
    capped = store.totals().capped_events
    assert store.charge_tables(good.stream, share // 2) is None
    assert store.totals().capped_events > capped and store.totals().overwritten_events == 0
    assert store.process_held_bytes(1) + share // 2 <= 8 * MIN_SEGMENT_BYTES
    assert_adds_up(store)


def test_a_store_refusing_frames_says_so_at_once_then_once_a_minute_with_how_many_meanwhile(
    caplog: Any, monkeypatch: Any
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("ringtrace.collector.log_repeats.time.monotonic", lambda: clock[0])
    store = Store(4 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES, policy="discard")
    client = Client(store, 1, tracks=1)
    with caplog.at_level("WARNING", logger="ringtrace.collector.store"):
        for _ in range(100):
            client.record(0, 64)
        refused = [r.getMessage() for r in caplog.records if "refusing frames" in r.getMessage()]
        assert len(refused) == 1 and "more frames refused so" not in refused[0]
        clock[0] += 61  # a minute on: the store still refuses, and says how often it did meanwhile
        client.record(0, 64)
    refused = [r.getMessage() for r in caplog.records if "refusing frames" in r.getMessage()]
    assert len(refused) == 2 and re.search(r"; \d+ more frames refused so in the last 60s", refused[1])
