"""The registry of processes: trace pids that stay unique in constant time, and clock pairings a client cannot use to
move anyone's events."""

from __future__ import annotations

import time

import pytest
from ringtrace.client.model import THREAD_TRACK, TrackInfo
from ringtrace.client.protocol import Hello
from ringtrace.collector.sessions import ENDED_TRACKS_REMEMBERED, MAX_CLOCK_SKEW_NS, Registry

STEP = 1 << 22


def hello(instance: str, pid: int = 1, *, boot: str = "boot", monotonic_ns: int = 10**12, wall_ns: int = 0) -> Hello:
    return Hello(pid, "host", f"p-{instance}", instance, boot, monotonic_ns, wall_ns or time.time_ns(), "test")


def test_processes_sharing_a_pid_get_distinct_pids_and_forgotten_ones_are_reused() -> None:
    """Containers all run pid 1 (that it takes constant time a process: benchmarks/bench_registry.py)."""
    registry = Registry()
    processes = [registry.known(hello(f"i{n}")) for n in range(3_000)]
    assert [p.trace_pid for p in processes[:3]] == [1, 1 + STEP, 1 + 2 * STEP]
    assert len({p.trace_pid for p in processes}) == 3_000
    registry.forget(processes[5])
    assert registry.known(hello("again")).trace_pid == processes[5].trace_pid
    assert registry.known(hello("next")).trace_pid == 1 + 3_000 * STEP


def test_a_process_s_tracks_end_with_its_last_connection_and_only_the_latest_names_are_kept() -> None:
    """A process is kept while any of its events are stored: what it keeps must not be the 10,000 tracks one
    connection may declare (a reconnect declares them again)."""
    registry = Registry()
    process = registry.hello(hello("many"))
    registry.hello(hello("many"))  # a second connection of the same process
    for track_id in range(1, 5001):
        process.tracks[track_id] = TrackInfo(track_id, THREAD_TRACK, f"thread {track_id}", track_id)
    registry.disconnected(process)
    assert len(process.tracks) == 5000  # still connected
    registry.disconnected(process)
    assert not process.tracks
    assert len(process.ended_tracks) == ENDED_TRACKS_REMEMBERED
    assert process.ended_tracks[5000].name == "thread 5000"  # the latest ones


def test_a_wall_clock_far_off_is_replaced_by_the_collector_s() -> None:
    registry = Registry()
    before = time.time_ns()
    liar = registry.hello(hello("liar", boot="new", monotonic_ns=2**63 - 1, wall_ns=1))
    after = time.time_ns()
    assert before - (2**63 - 1) <= liar.clock_offset_ns <= after - (2**63 - 1)
    wall = time.time_ns() + MAX_CLOCK_SKEW_NS // 2
    honest = registry.hello(hello("honest", boot="other", wall_ns=wall))
    assert honest.clock_offset_ns == wall - 10**12  # within the skew allowed: believed
    recovered = registry.known(hello("from a segment", boot="old", wall_ns=1))
    assert recovered.clock_offset_ns == 1 - 10**12  # read back from a segment or a file: as it was recorded


@pytest.mark.parametrize("first_lies", [True, False])
def test_a_process_cannot_move_the_clock_of_its_domain(first_lies: bool) -> None:
    registry = Registry()
    now = time.time_ns()
    good = hello("good", monotonic_ns=10**12, wall_ns=now)
    liar = hello("liar", monotonic_ns=10**15, wall_ns=now)  # same boot, a monotonic clock 1000 s apart
    order = [liar, good] if first_lies else [good, liar]
    records = {h.instance_id: registry.known(h) for h in order}
    assert records["good"].clock_offset_ns == now - 10**12
    assert records["liar"].clock_offset_ns == now - 10**15
    # A process of the same boot: it joins the domain when its first process told the truth, else keeps its own.
    follower = registry.known(hello("follower", monotonic_ns=10**12 + 5, wall_ns=now + 7))
    assert follower.clock_offset_ns == now - 10**12 + (2 if first_lies else 0)
