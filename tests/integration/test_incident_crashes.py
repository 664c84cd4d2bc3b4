"""Crash rules end to end: only a connection whose HELLO promised a GOODBYE can be a crash, and only if its process
has not reconnected within ``CRASH_GRACE_S``. Each test ends with a client killed (SIGKILL): its crash comes last, so
once its incident is listed the others' graces have run out too (a grace that fired would be listed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_process import CollectorProcess, RawClient, hello
from incident_runs import Peer, incidents, stats, wait_for_incidents
from ringtrace.collector.command.main import main as command_main
from ringtrace.wire.frames import Goodbye

pytestmark = pytest.mark.integration

CRASH = "crashed: crash=true, before=5s, after=0s"


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.close()


def _killed_last(collector: CollectorProcess, peers: list[Peer]) -> None:
    """A client killed: its one incident is the only one listed."""
    killed = Peer(collector, "killed")
    peers.append(killed)
    killed.send("ticks 3")
    killed.send("flush")
    killed.send("crash")
    [record] = wait_for_incidents(collector, 1)
    assert [p["name"] for p in record["processes"]] == ["killed"]
    assert "without GOODBYE" in record["reason"]
    assert len(incidents(collector)) == 1
    assert stats(collector)["fired"] == 1


def test_a_raw_peer_that_never_says_goodbye_is_no_crash(tmp_path: Path, peers: list[Peer]) -> None:
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "incidents"), "--trigger", CRASH)
    try:
        for number in range(3):  # (a benchmark's blaster, an older client: no says_goodbye in their HELLO)
            raw = RawClient(collector.tcp_address, hello(pid=5000 + number, instance=f"raw-{number}"))
            raw.flush()
            raw.close()
        _killed_last(collector, peers)
    finally:
        collector.stop()


def test_a_process_that_reconnects_at_once_is_no_crash(tmp_path: Path, peers: list[Peer]) -> None:
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "incidents"), "--trigger", CRASH)
    try:
        promised = hello(pid=6000, instance="blip", says_goodbye=True)
        first = RawClient(collector.tcp_address, promised)
        first.flush()
        first.close()  # no GOODBYE: a network blip, or its streamer recovering from an error
        again = RawClient(collector.tcp_address, promised)
        again.flush()
        again.send(Goodbye("closing"))
        again.close()
        _killed_last(collector, peers)
    finally:
        collector.stop()


def test_a_replayed_recording_is_no_crash(tmp_path: Path, peers: list[Peer]) -> None:
    """``ringtrace replay`` of a snapshot, into the collector it came from: one process that exited cleanly, one still
    connected. Neither is taken for crashed when its replayed stream ends."""
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "incidents"), "--trigger", CRASH)
    try:
        for name in ("exited", "alive"):
            peer = Peer(collector, name)
            peers.append(peer)
            peer.send("ticks 3")
            peer.send("flush")
        peers[0].close()  # (a GOODBYE)
        snapshot = tmp_path / "both.rtsnap"
        assert command_main(["snapshot", collector.http_url, "-o", str(snapshot), "--format", "native"]) == 0
        assert command_main(["replay", str(snapshot), "--to", collector.tcp_address]) == 0
        _killed_last(collector, peers)
    finally:
        collector.stop()


def test_the_end_of_a_recorded_stream_without_goodbye_is_no_crash(tmp_path: Path, peers: list[Peer]) -> None:
    """A recording sent again by an older replay (no GOODBYE at its end) of a process whose HELLO promised one."""
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "incidents"), "--trigger", CRASH)
    try:
        replayed = RawClient(collector.tcp_address, hello(pid=7000, instance="rec", says_goodbye=True, recorded=True))
        replayed.flush()
        replayed.close()
        _killed_last(collector, peers)
    finally:
        collector.stop()
