"""Continuous sampling end to end: a real CPU-bound program samples itself at 100 Hz into a real collector, and the
stored samples, read back through a native snapshot and the event walk, name its hot function most and none of
ringtrace's own threads (the flusher, the streamer, the sampler); a collector
restarted in between leaves every stored stack decodable."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from collector_process import CollectorProcess, RawClient
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.rows import selected_rows
from ringtrace.wire.handshake_frames import Welcome
from ringtrace.wire.model import SAMPLE, THREAD_TRACK, TrackInfo
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stream_encoder import StreamEncoder
from waiting import wait_for

MAIN = ("main", "app.py", 1)
WORK = ("work", "app.py", 2)
LEAF = ("leaf", "lib.py", 3)
#: Samples enough to fill a few segments (of 128 KiB: an eighth of a capacity of 1 MiB).
SEGMENTS_OF_SAMPLES = 40_000

#: A program that connects, samples itself, and spins in ``hot_loop`` on a thread of its own until enough samples of
#: it are taken (a count, not a time); then flushes. Argument: the collector's address, a file to wait for (or "").
PROGRAM = """
import json, os, sys, threading, time
import ringtrace.client
from ringtrace.client.sampling import start_sampler

tl = ringtrace.client.connect(sys.argv[1], process_name="sampled")
sampler = start_sampler(tl, 100)
assert start_sampler(tl, 100) is sampler

def hot_loop(stop):
    total = 0
    while not stop.is_set():
        for i in range(20_000):
            total += i * i
    return total

def worker(stop):
    hot_loop(stop)

stop = threading.Event()
thread = threading.Thread(target=worker, args=(stop,), name="cpu")
thread.start()
while sampler.passes < 100:
    time.sleep(0.05)
if sys.argv[2]:
    with tl.scope("waiting for the restart"):
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.05)
    passes = sampler.passes
    while sampler.passes < passes + 50:
        time.sleep(0.05)
ours = {t.name: t.native_id for t in threading.enumerate() if t.name.startswith("ringtrace-")}
stop.set()
thread.join()
sampler.stop()
flushed = tl.flush(timeout_s=30)
# (a flush is False after a drop: across a restart, events in flight when it stopped are counted unacknowledged)
again = tl.flush(timeout_s=30)
report = {"flushed": flushed, "flushed_again": again, "thread": thread.native_id, "pid": os.getpid(), "ours": ours}
print(json.dumps(report))
"""


def _run(collector: CollectorProcess, marker: str = "") -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, collector.tcp_address, marker], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _samples(collector: CollectorProcess, tmp_path: Path) -> list[tuple[int, tuple[tuple[str, str, int], ...]]]:
    """(thread id, stack) of every sample stored, through a native snapshot read back and the event walk."""
    status, body = collector.get("/snapshot?format=native")
    assert status == 200
    path = tmp_path / "samples.rtsnap"
    path.write_bytes(body)
    view = load_file(path).view
    walk = EventWalk(view)
    out = []
    for (process, track, tables, frame), _ in walk.walked():
        for phase, name, _, dur, args, category, _ in walk.shown(process, track, tables, frame) or []:
            if phase == "P":
                assert category == "sample" and dur == 0 and isinstance(name, str)
                stack = args["stack"]
                assert all(isinstance(f, str) and isinstance(p, str) and type(n) is int for f, p, n in stack)
                out.append((track.thread_id, stack))
    assert walk.report()["undecodable_events"] == 0
    return out


def test_a_cpu_bound_program_samples_name_its_hot_function_most(collector: CollectorProcess, tmp_path: Path) -> None:
    report = _run(collector)
    assert report["flushed"] is True
    samples = _samples(collector, tmp_path)
    of_worker = [stack for thread, stack in samples if thread == report["thread"]]
    assert len(of_worker) >= 90
    # The program's threads are sampled (its main thread too), ringtrace's own never.
    ours = report["ours"]
    assert {"ringtrace-flusher", "ringtrace-streamer", "ringtrace-sampler"} <= set(ours)
    assert report["pid"] in {thread for thread, _ in samples}
    assert not {thread for thread, _ in samples} & set(ours.values())
    leaves = Counter(stack[-1][0] for stack in of_worker if stack)
    assert leaves.most_common(1)[0][0] == "hot_loop"
    hot = next(stack for stack in of_worker if stack and stack[-1][0] == "hot_loop")
    assert [f for f, _, _ in hot[-3:]] == ["Thread.run", "worker", "hot_loop"]  # root first: the caller before
    assert hot[-1][1] == "<string>" and hot[-1][2] > 0
    # Every format that does not show samples yet still writes the snapshot; the dump shows each on one line.
    assert b"".join(chrome_trace_chunks(load_file(tmp_path / "samples.rtsnap").view))
    assert b"".join(perfetto_chunks(load_file(tmp_path / "samples.rtsnap").view))
    rows = [row for row in selected_rows(load_file(tmp_path / "samples.rtsnap").view) if row.kind == "sample"]
    assert any(str(row.args).startswith("hot_loop (<string>:") for row in rows)


def test_stacks_stay_decodable_across_a_collector_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = CollectorProcess("--data-dir", str(data_dir))
    marker = tmp_path / "restarted"
    program = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, first.tcp_address, str(marker)], stdout=subprocess.PIPE, text=True
    )
    second = None
    try:
        wait_for(
            lambda: json.loads(first.get("/healthz")[1])["stored_events"],
            until=lambda stored: stored >= 100,
            timeout_s=60,
            what="samples stored before the restart",
        )
        address = first.tcp_address
        first.stop()
        second = CollectorProcess("--data-dir", str(data_dir), tcp=address)
        restarted = second
        wait_for(lambda: json.loads(restarted.get("/healthz")[1])["connections"], timeout_s=60,
                 what="the program connected again")  # fmt: skip
        marker.write_text("")
        out, _ = program.communicate(timeout=120)
        assert program.returncode == 0
        report = json.loads(out)
        assert report["flushed_again"] is True  # everything after the restart stored
        samples = _samples(second, tmp_path)
        of_worker = [stack for thread, stack in samples if thread == report["thread"]]
        assert len(of_worker) >= 100  # before the restart and after it
        assert all(stack for stack in of_worker)  # every stack id known: none shown empty
        assert Counter(stack[-1][0] for stack in of_worker).most_common(1)[0][0] == "hot_loop"
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()
        first.stop()
        if second is not None:
            second.stop()


def test_every_segment_replays_the_stacks_and_a_malformed_stacks_frame_ends_the_connection(tmp_path: Path) -> None:
    collector = CollectorProcess("--capacity", "1MiB", "--max-frame-size", "64KiB")
    try:
        encoder = StreamEncoder()
        track = TrackInfo(1, THREAD_TRACK, "worker samples", 4242)
        stacks = [(MAIN, WORK), (MAIN, WORK, LEAF), (MAIN, LEAF)]
        records: list[object] = []
        for i in range(SEGMENTS_OF_SAMPLES):
            records += [SAMPLE, f"task-{i % 7}", 1_000_000 + i, 1_000_000 + i, stacks[i % 3]]
        with RawClient(collector.tcp_address) as raw:
            assert isinstance(raw.answer, Welcome)
            raw.send_raw(b"".join(encoder.prefix()))
            for start in range(0, len(records), 5 * 1000):  # runs as a flusher would send them
                batch = encoder.encode(track, records[start : start + 5 * 1000])
                raw.send_raw(b"".join(batch.control) + b"".join(frame for frame, _ in batch.events))
            raw.flush()
        assert json.loads(collector.get("/healthz")[1])["segments"] >= 3
        samples = _samples(collector, tmp_path)
        assert len(samples) == SEGMENTS_OF_SAMPLES
        assert Counter(stack for _, stack in samples) == Counter(stacks[i % 3] for i in range(SEGMENTS_OF_SAMPLES))

        with RawClient(collector.tcp_address) as raw:
            assert isinstance(raw.answer, Welcome) and raw.answer.max_stacks > 0
            raw.send(Stacks(0, (MAIN,), 0, ((None, 0),)), Stacks(1, (WORK,), 1, ((5, 1),)))  # parent 5: undeclared
            assert raw.closed_by_peer()
        collector.wait_for_log(lambda line: "STACKS frame: field 'stacks'" in line)
    finally:
        collector.stop()
