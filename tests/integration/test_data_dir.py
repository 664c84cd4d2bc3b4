"""--data-dir: a collector killed with SIGKILL, restarted on the same directory, serves everything it acknowledged."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from collector_process import CollectorProcess, events, run_workload
from ringtrace.collector.store.segment_scan import scan_segment
from ringtrace.wire.frame_types import FRAME_HEADER, FrameType
from ringtrace.wire.stream_limits import Limits
from waiting import wait_for

#: A client that records instants numbered from 0 and, after every flush the collector acknowledged, prints the
#: highest number acknowledged; it runs until killed.
STREAMER = """
import sys
import ringtrace.client

tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
i = 0
while True:
    for _ in range(200):
        tl.instant("n", i=i)
        i += 1
    if tl.flush(timeout_s=5):
        print(i - 1, flush=True)
"""


def start_streamers(address: str, count: int) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", STREAMER, address, f"s{k}"], stdout=subprocess.PIPE, text=True, bufsize=1
        )
        for k in range(count)
    ]


def start_collector(data_dir: str) -> subprocess.CompletedProcess[str]:
    """A collector on ``data_dir`` that is expected to refuse to start."""
    return subprocess.run(
        [sys.executable, "-m", "ringtrace.collector", "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0",
         "--data-dir", data_dir],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def acknowledged(streamer: subprocess.Popen[str]) -> int:
    """The highest number the streamer saw acknowledged (it is killed first)."""
    lines = streamer.communicate()[0].split()
    return int(lines[-1]) if lines else -1


def numbers_per_process(trace: dict[str, object]) -> dict[str, Counter[int]]:
    names = {p["pid"]: p["process_name"] for p in trace["otherData"]["processes"]}  # type: ignore[index]
    out: dict[str, Counter[int]] = {}
    for event in events(trace, "i"):  # type: ignore[arg-type]
        out.setdefault(names[event["pid"]], Counter())[event["args"]["i"]] += 1
    return out


@pytest.mark.parametrize("fsync", ["interval", "flush", "always", "never"])
def test_kill_9_keeps_every_event_acknowledged_and_nothing_twice(tmp_path: Path, fsync: str) -> None:
    data_dir = str(tmp_path / "data")
    collector = CollectorProcess("--data-dir", data_dir, "--capacity", "64MiB", "--fsync", fsync)
    streamers = start_streamers(collector.tcp_address, 4)
    try:
        # Each has had flushes acknowledged (it records the next 200 once its flush returns), the slowest to start too.
        wait_for(
            lambda: {p["process_name"]: p["stored_events"] for p in collector.json("/sources")["processes"]},
            until=lambda stored: len(stored) == 4 and min(stored.values()) >= 5_000,
            timeout_s=60,
            what="5,000 events of each streamer stored",
        )
        time.sleep(0.5)  # (on purpose: flushing goes on as the collector dies)
        collector.proc.send_signal(signal.SIGKILL)
        collector.proc.wait()
    finally:
        for streamer in streamers:
            streamer.kill()
            streamer.wait()
        collector.stop()
    acked = {f"s{k}": acknowledged(s) for k, s in enumerate(streamers)}
    assert all(n > 0 for n in acked.values()), acked

    restarted = CollectorProcess("--data-dir", data_dir, "--capacity", "64MiB")
    try:
        restarted.wait_for_log(lambda line: "recovered" in line)
        trace = restarted.snapshot()
    finally:
        restarted.stop()
    held = numbers_per_process(trace)
    for name, highest in acked.items():
        missing = set(range(highest + 1)) - set(held[name])
        assert not missing, f"{name}: {len(missing)} acknowledged events lost, e.g. {sorted(missing)[:5]}"
        assert max(held[name].values()) == 1, f"{name}: events stored twice"
        # What is stored is what the process recorded, in order, with no hole: a prefix of 0, 1, 2, ...
        assert sorted(held[name]) == list(range(len(held[name])))
    other = trace["otherData"]
    assert other["stored_events"] == sum(len(c) for c in held.values())
    assert other["received_events"] == other["stored_events"]


def test_a_torn_segment_tail_is_cut_with_one_line_and_the_rest_served(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    collector = CollectorProcess("--data-dir", str(data_dir), "--capacity", "64MiB")
    streamers = start_streamers(collector.tcp_address, 1)
    try:
        collector.wait_for_stored(2_000)
    finally:
        streamers[0].kill()
        streamers[0].wait()
        collector.stop()
    acked = acknowledged(streamers[0])
    newest = max(data_dir.glob("*.rtseg"))
    data = bytearray(newest.read_bytes())
    kept = scan_segment(data, Limits(), int(newest.name.removesuffix(".rtseg"))).used
    # The header of an EVENTS frame right after the last checksummed one, its body never written: a torn write.
    data[kept : kept + FRAME_HEADER.size] = FRAME_HEADER.pack(100, FrameType.EVENTS)
    newest.write_bytes(data)

    restarted = CollectorProcess("--data-dir", str(data_dir), "--capacity", "64MiB")
    try:
        restarted.wait_for_log(lambda line: "recovered" in line)
        trace = restarted.snapshot()
    finally:
        restarted.stop()
    cut_lines = [line for line in restarted.lines if "cut the rest" in line]
    assert len(cut_lines) == 1 and newest.name in cut_lines[0] and f"kept its first {kept} bytes" in cut_lines[0]
    held = numbers_per_process(trace)["s0"]
    assert set(range(acked + 1)) <= set(held)
    assert max(held.values()) == 1


def test_a_data_dir_that_cannot_be_written_is_refused_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = start_collector(str(blocker / "sub"))
    assert done.returncode == 2
    assert "--data-dir" in done.stderr and "is not a writable directory" in done.stderr


def test_a_second_collector_on_the_same_data_dir_is_refused_before_it_touches_anything(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = CollectorProcess("--data-dir", str(data_dir), "--capacity", "64MiB")
    streamers = start_streamers(first.tcp_address, 1)
    try:
        first.wait_for_stored(2_000)
        before = {path.name: path.stat().st_mtime_ns for path in data_dir.glob("*.rtseg")}
        done = start_collector(str(data_dir))
        assert done.returncode == 2
        assert f"is in use by another collector (pid {first.proc.pid}" in done.stderr
        assert set(before) <= {path.name for path in data_dir.glob("*.rtseg")}  # nothing removed
        streamers[0].kill()
        streamers[0].wait()
        acked = acknowledged(streamers[0])
        trace = first.snapshot()
    finally:
        first.stop()
    held = numbers_per_process(trace)["s0"]
    assert set(range(acked + 1)) <= set(held) and max(held.values()) == 1


def test_a_segment_file_the_collector_cannot_open_stops_it_at_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / f"{3:016d}.rtseg").mkdir()  # opening it for reading and writing fails, whoever runs the test
    done = start_collector(str(data_dir))
    assert done.returncode == 2
    assert "cannot open the segment file" in done.stderr and "0000000000000003.rtseg" in done.stderr


def test_a_restart_with_a_smaller_capacity_counts_what_it_cannot_keep(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    collector = CollectorProcess("--data-dir", str(data_dir), "--capacity", "16MiB")
    try:
        done = run_workload(collector.tcp_address, "--threads", "2", "--spans", "60000")
        assert done.returncode == 0, done.stderr
    finally:
        collector.stop()
    restarted = CollectorProcess("--data-dir", str(data_dir), "--capacity", "512KiB", "--max-frame-size", "64KiB")
    try:
        trace = restarted.snapshot()
    finally:
        restarted.stop()
    other = trace["otherData"]
    assert other["overwritten_events"] > 0
    assert other["received_events"] == other["stored_events"] + other["overwritten_events"] == 120_000
    assert other["stored_events"] == len(events(trace, "X"))
    assert any("were overwritten at once" in line for line in restarted.lines)
    assert sum(path.stat().st_size for path in data_dir.glob("*.rt*")) <= 512 * 1024


def test_a_segment_the_disk_has_no_room_for_is_opened_smaller_not_made_room_for_by_evicting_all(
    tmp_path: Path,
) -> None:
    # No file past 3 MiB may be written (as on a disk with 3 MiB free, say a small volume): the 4 MiB segments a busy
    # stream grows to cannot be allocated, and overwriting what is stored makes no room for one.
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (3 * 1024 * 1024, hard))
    try:
        collector = CollectorProcess("--data-dir", str(tmp_path / "data"), "--capacity", "64MiB")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    try:
        done = run_workload(collector.tcp_address, "--threads", "2", "--spans", "150000")
        assert done.returncode == 0, done.stderr
        stats = collector.json("/stats")
    finally:
        collector.stop()
    assert (stats["overwritten_events"], stats["discarded_events"]) == (0, 0)
    assert stats["received_events"] == stats["stored_events"] == 300_000
    assert max(path.stat().st_size for path in (tmp_path / "data").glob("*.rt*")) <= 2 * 1024 * 1024
