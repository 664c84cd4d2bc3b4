"""The registry of processes: trace pids that stay unique in constant time, and clock pairings a client cannot use to
move anyone's events."""

from __future__ import annotations

import dataclasses
import socket
import sys
import time

import pytest
from ringtrace.collector.store.clocks import MAX_BOOTS, Arrival, tcp_round_trip_ns
from ringtrace.collector.store.processes import ENDED_TRACKS_REMEMBERED, OTLP_CLIENT_PREFIX, Registry
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import THREAD_TRACK, TrackInfo

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


def test_otlp_data_of_a_clients_os_process_shows_its_pid_until_both_are_forgotten() -> None:
    registry = Registry()
    client = registry.known(hello("client", pid=7))
    otlp = dataclasses.replace(hello("resource", pid=7, boot=""), client_version=OTLP_CLIENT_PREFIX + "python 1.0")
    assert registry.known(otlp).trace_pid == client.trace_pid == 7  # the same host and pid: one process shown
    elsewhere = dataclasses.replace(otlp, host="other", instance_id="elsewhere")
    assert registry.known(elsewhere).trace_pid == 7 + STEP  # another host's pid 7 is another process
    registry.forget(client)
    later = registry.known(hello("later", pid=7))
    assert later.trace_pid == 7  # the OTLP data shows 7 still: the client of its process shows it too
    for process in (later, registry.known(otlp)):
        registry.forget(process)
    assert registry.known(hello("last", pid=7)).trace_pid == 7  # shown by none: its own again


WALL = 1_800_000_000 * 10**9  # the collector's wall clock when each HELLO below arrives
MONO = 10**12  # every process's monotonic reading (each boot has its own clock)
MS = 10**6


def arrived(delivery_ns: int = 0) -> Arrival:
    """A HELLO arriving at WALL (and MONO + 1 ms on the collector's monotonic clock), delivered within delivery_ns."""
    return Arrival(WALL, MONO + MS, delivery_ns)


def said(instance: str, off_ns: int, *, boot: str = "boot", monotonic_ns: int = MONO) -> Hello:
    """A HELLO whose wall clock reads ``off_ns`` from the collector's."""
    return hello(instance, boot=boot, monotonic_ns=monotonic_ns, wall_ns=WALL + off_ns)


def test_a_process_s_tracks_end_with_its_last_connection_and_only_the_latest_names_are_kept() -> None:
    """A process is kept while any of its events are stored: what it keeps must not be the 10,000 tracks one
    connection may declare (a reconnect declares them again)."""
    registry = Registry()
    process = registry.hello(hello("many"), arrived())
    registry.hello(hello("many"), arrived())  # a second connection of the same process
    for track_id in range(1, 5001):
        process.tracks[track_id] = TrackInfo(track_id, THREAD_TRACK, f"thread {track_id}", track_id)
    registry.disconnected(process)
    assert len(process.tracks) == 5000  # still connected
    registry.disconnected(process)
    assert not process.tracks
    assert len(process.ended_tracks) == ENDED_TRACKS_REMEMBERED
    assert process.ended_tracks[5000].name == "thread 5000"  # the latest ones


def test_a_wall_clock_the_delivery_does_not_explain_is_replaced_by_the_collector_s() -> None:
    registry = Registry()
    assert registry.hello(said("late", -8 * MS), arrived()).clock_offset_ns == WALL - 8 * MS - MONO  # believed
    assert registry.hello(said("off", -30 * MS, boot="b2"), arrived()).clock_offset_ns == WALL - MONO
    assert registry.hello(said("slow", -30 * MS, boot="b3"), arrived(40 * MS)).clock_offset_ns == WALL - 30 * MS - MONO
    assert registry.hello(said("far", 2**62, boot="b4"), arrived()).clock_offset_ns == WALL - MONO
    # Another process of a boot whose wall clock is off: measured too, it takes the first one's measured pairing.
    assert registry.hello(
        said("off too", -30 * MS, boot="b2", monotonic_ns=MONO + 3 * MS), arrived()
    ).clock_offset_ns == (WALL - MONO)
    recovered = registry.known(hello("from a segment", boot="old", wall_ns=1))
    assert recovered.clock_offset_ns == 1 - 10**12  # read back from a segment or a file: as it was recorded


@pytest.mark.parametrize("lie_ns", [900 * MS, -900 * MS, 5 * MS])
@pytest.mark.parametrize("lie", ["wall", "monotonic"])
def test_a_first_liar_moves_the_processes_of_its_boot_by_no_more_than_their_tolerance(
    lie: str, lie_ns: int, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry()
    if lie == "wall":
        liar = registry.hello(said("liar", lie_ns), arrived())
    else:
        liar = registry.hello(said("liar", 0, monotonic_ns=MONO - lie_ns), arrived())
    honest = [registry.hello(said(f"honest{n}", -n * 1000), arrived()) for n in range(1, 4)]  # 1-3 us of jitter
    offsets = {p.clock_offset_ns for p in honest}
    assert len(offsets) == 1  # they line up to the nanosecond
    (offset,) = offsets
    assert abs(offset - (WALL - MONO)) <= 10 * MS
    if lie == "wall" and abs(lie_ns) > 10 * MS:  # not believed: the liar is placed by the collector's clock
        assert liar.clock_offset_ns == WALL - MONO
    elif abs(lie_ns) > 10 * MS:
        assert liar.clock_offset_ns == WALL - MONO + lie_ns
    if abs(lie_ns) > 10 * MS:  # the first honest process's own pairing is the others'
        assert offset == WALL - 1000 - MONO
    if lie == "monotonic" and abs(lie_ns) > 10 * MS:  # one line: who, its boot, how far, from whose
        (line,) = [r.getMessage() for r in caplog.records if "keeps its own pairing" in r.getMessage()]
        assert "'p-honest1'" in line and "'p-liar'" in line and "'boot'" in line and f"{-lie_ns / 1e9:+.3f} s" in line
    assert registry.known(said("honest1", 77)).clock_offset_ns == offset  # known: never moves


def test_a_process_takes_its_boot_s_pairing_within_its_own_tolerance_capped() -> None:
    registry = Registry()
    first = registry.hello(said("first", 0), arrived())
    near = registry.hello(said("near", 0, monotonic_ns=MONO - 150 * MS), arrived(200 * MS))
    assert near.clock_offset_ns == first.clock_offset_ns  # its slow delivery excuses 150 ms
    stalled = registry.hello(said("stalled", 0, monotonic_ns=MONO - 1500 * MS), arrived(10**10))
    assert stalled.clock_offset_ns == WALL - MONO + 1500 * MS  # at most 1 s, however slow
    assert registry.hello(said("fast", 0, monotonic_ns=MONO - 150 * MS), arrived()).clock_offset_ns != (
        first.clock_offset_ns
    )


def test_processes_of_the_collector_s_boot_take_its_own_pairing() -> None:
    registry = Registry(own_boot="mine")
    own = registry.clocks.own_offset_ns
    here = Arrival(WALL, time.monotonic_ns(), 0)
    mono = here.monotonic_ns - MS
    liar = registry.hello(hello("liar", boot="mine", monotonic_ns=mono, wall_ns=WALL + 500 * MS), here)
    good = registry.hello(hello("good", boot="mine", monotonic_ns=mono, wall_ns=WALL), here)
    assert liar.clock_offset_ns == good.clock_offset_ns == own  # what it says of its wall clock does not matter
    ahead = registry.hello(hello("ahead", boot="mine", monotonic_ns=mono + 10**12, wall_ns=WALL), here)
    assert ahead.clock_offset_ns == WALL - mono - 10**12  # not the collector's clock: its own, measured
    replayed = Hello(1, "h", "r", "r", "mine", mono, mono + own + 3 * MS, "test", recorded=True)
    assert registry.hello(replayed, here).clock_offset_ns == own  # a recording of this boot: within 10 ms, joins


def test_a_pairing_read_back_is_kept_and_later_processes_of_its_boot_take_it() -> None:
    registry = Registry()
    stored = registry.known(said("stored", 4 * MS))  # a restart: placed as before, though off the collector's clock
    assert stored.clock_offset_ns == WALL + 4 * MS - MONO
    assert registry.hello(said("new", 0), arrived()).clock_offset_ns == stored.clock_offset_ns


@pytest.mark.skipif(sys.platform != "linux", reason="the round trip is read from Linux's TCP_INFO")
def test_a_tcp_connection_s_round_trip_is_the_kernel_s_and_other_sockets_have_none() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()):
        accepted, _ = server.accept()
        with accepted:
            assert 0 < tcp_round_trip_ns(accepted) < 10**9
    left, right = socket.socketpair()
    with left, right:
        assert tcp_round_trip_ns(left) == 0
    assert tcp_round_trip_ns(None) == 0


def test_a_boot_whose_wall_clock_is_off_is_logged_once_for_all_its_processes(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry()
    with caplog.at_level("WARNING", logger="ringtrace.collector.clocks"):
        for i in range(5):
            registry.hello(said(f"p{i}", -30 * MS, boot="skewed", monotonic_ns=MONO + i * MS), arrived())
    assert len([r for r in caplog.records if "wall clock is -0.030 s off" in r.getMessage()]) == 1


def test_the_boots_remembered_are_bounded_the_least_recently_joined_forgotten() -> None:
    registry = Registry()
    first = registry.hello(said("first", 0), arrived()).clock_offset_ns
    assert registry.hello(said("joins", 5 * MS, monotonic_ns=MONO), arrived()).clock_offset_ns == first
    for i in range(MAX_BOOTS):
        registry.hello(said(f"other-{i}", 0, boot=f"boot-{i}"), arrived())
    alone = registry.hello(said("after", 5 * MS), arrived()).clock_offset_ns  # "boot" was forgotten: its own
    assert alone == first + 5 * MS


def test_a_process_that_connects_again_under_another_name_is_shown_by_the_latest() -> None:
    registry = Registry()
    first = registry.hello(hello("renamed"), arrived())
    again = registry.hello(dataclasses.replace(hello("renamed"), process_name="web-2"), arrived())
    assert again is first and first.name == "web-2"
    registry.known(dataclasses.replace(hello("renamed"), process_name="from a segment"))  # read back: no rename
    assert first.name == "web-2"
    # Not connected (a file, a recovery, another collector's segments), its segments read back oldest first: the
    # latest names it, as its connection did.
    registry.disconnected(first)
    registry.disconnected(first)
    registry.known(dataclasses.replace(hello("renamed"), process_name="web-3"))
    assert first.name == "web-3"
