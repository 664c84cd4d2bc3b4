"""Bounded bookkeeping: short-lived processes are forgotten once nothing of theirs is stored; the totals stay exact."""

from __future__ import annotations

import json
from typing import Any

import pytest
from collector_process import CollectorProcess, RawClient, events, hello, run_script, run_workload
from ringtrace.client import Streamer, StreamerOptions, Timeline
from ringtrace.collector.command.main import main
from ringtrace.wire.frames import Stats
from waiting import wait_for

ONE_SPAN = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
with tl.scope("work"):
    pass
print(tl.flush(5))
tl.close()
"""


def test_short_lived_processes_are_forgotten_and_still_counted() -> None:
    collector = CollectorProcess("--capacity", "512KiB", "--max-frame-size", "64KiB", "--forget-after", "0.2")
    try:
        for k in range(6):
            done = run_workload(collector.tcp_address, "--spans", "200", "--name", f"short{k}")
            assert done.returncode == 0, done.stderr
        # A long run overwrites what the short ones stored: then nothing of them is left.
        done = run_workload(collector.tcp_address, "--threads", "2", "--spans", "30000", "--name", "long")
        assert done.returncode == 0, done.stderr
        health = wait_for(
            lambda: json.loads(collector.get("/healthz")[1]),
            until=lambda health: health["forgotten_processes"] >= 6,
            timeout_s=30,
            what="the six short-lived processes forgotten",
        )
        trace = collector.snapshot()
    finally:
        collector.stop()
    other = trace["otherData"]
    names = {p["process_name"] for p in other["processes"]}
    assert not any(name.startswith("short") for name in names)
    assert health["processes"] == len(names)
    # Every event the six forgotten processes and the long one sent is still accounted for, exactly: the long one's
    # in the totals (the processes selected), the others' apart.
    forgotten = other["forgotten_processes_totals"]
    assert other["received_events"] == 60_000 and forgotten["received_events"] == 6 * 200
    assert other["received_events"] == other["stored_events"] + other["overwritten_events"]
    assert forgotten["received_events"] == forgotten["overwritten_events"] and forgotten["stored_events"] == 0
    assert other["stored_events"] == len(events(trace, "X"))
    assert other["forgotten_processes"] == 6


def test_a_forgotten_process_that_comes_back_is_not_counted_twice() -> None:
    collector = CollectorProcess("--forget-after", "0.1")
    try:
        with RawClient(collector.tcp_address, hello(instance="phoenix")) as raw:
            raw.send(Stats(dropped_events=5, dropped_frames=1))
            raw.flush()
        wait_for(
            lambda: json.loads(collector.get("/healthz")[1]),
            until=lambda health: health["forgotten_processes"] >= 1,
            timeout_s=30,
            what="the process forgotten",
        )
        forgotten = collector.snapshot()["otherData"]
        assert forgotten["client_dropped_events"] == 0  # (no process is selected: none is known)
        assert forgotten["forgotten_processes_totals"]["client_dropped_events"] == 5
        # The same process (same instance id) reconnects: its counters are cumulative since it started.
        with RawClient(collector.tcp_address, hello(instance="phoenix")) as raw:
            raw.send(Stats(dropped_events=7, dropped_frames=1))
            raw.flush()
            other = collector.snapshot()["otherData"]
    finally:
        collector.stop()
    assert other["client_dropped_events"] == 2 and other["forgotten_processes_totals"]["client_dropped_events"] == 5
    (process,) = other["processes"]
    assert process["client_dropped_events"] == 2  # what it lost since it was forgotten


def _forgotten(collector: CollectorProcess, count: int) -> None:
    wait_for(
        lambda: json.loads(collector.get("/healthz")[1]),
        until=lambda health: health["forgotten_processes"] >= count,
        timeout_s=30,
        what=f"{count} processes forgotten",
    )


def test_what_forgotten_processes_lost_is_apart_from_what_the_processes_selected_lost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    collector = CollectorProcess("--forget-after", "0.2")
    try:
        for name in ("cleared", "kept"):
            assert run_script(collector, ONE_SPAN, name).strip() == "True"
        [cleared] = [p for p in collector.json("/sources")["processes"] if p["process_name"] == "cleared"]
        assert collector.post("/clear?process=cleared")[0] == 200
        _forgotten(collector, 1)
        with RawClient(collector.tcp_address, hello(instance="dropping")) as raw:  # (live, never selected below)
            raw.send(Stats(dropped_events=5, dropped_frames=1))
            raw.flush()
            spans = collector.json("/spans?process=kept")
            nothing = collector.json("/aggregates?process=nosuchproc")
            other = collector.snapshot("?process=kept")["otherData"]
            everyone = collector.snapshot()["otherData"]
            assert main(["spans", collector.http_url, "--process", "kept"]) == 0
    finally:
        collector.stop()
    forgotten_cleared = cleared["stored_events"]
    assert forgotten_cleared > 0
    for document in (spans, nothing):
        assert not any(document["lost"].values()), document["lost"]
        assert document["lost_by_forgotten_processes"]["cleared_events"] == forgotten_cleared
    assert [s["process"] for s in spans["spans"]] == ["kept"]
    # The snapshot's totals are the selected processes' (neither the forgotten's nor the other live one's) ...
    [kept] = other["processes"]
    totals: dict[str, Any] = {name: other[name] for name in ("received_events", "cleared_events")}
    assert totals == {"received_events": kept["received_events"], "cleared_events": 0}
    assert other["client_dropped_events"] == 0
    assert other["forgotten_processes_totals"]["cleared_events"] == forgotten_cleared
    # ... and a snapshot of every process counts every live one, the forgotten still apart.
    assert everyone["client_dropped_events"] == 5 and everyone["cleared_events"] == 0
    assert everyone["forgotten_processes_totals"]["cleared_events"] == forgotten_cleared
    err = capsys.readouterr().err
    apart = f"apart, processes forgotten lost: {forgotten_cleared} cleared_events"
    assert err == f"ringtrace spans: 1 spans; lost: nothing; {apart}\n"


def test_one_process_on_two_connections_is_overwritten_sealed_segments_first() -> None:
    # Two timelines of one process stream on two connections: the quiet one's open segment is the process's oldest,
    # and the ring overwrites the loud one's sealed segments ahead of it, counting every event.
    collector = CollectorProcess("--capacity", "512KiB", "--max-frame-size", "64KiB")
    try:
        quiet = Timeline("quiet", [Streamer(collector.tcp_address, StreamerOptions(process_name="two"))])
        loud = Timeline("loud", [Streamer(collector.tcp_address, StreamerOptions(process_name="two"))])
        for i in range(10):
            quiet.instant("early", i=i)
        assert quiet.flush(timeout_s=10)
        for i in range(30_000):
            with loud.scope("work", i=i):
                pass
        assert loud.flush(timeout_s=30)
        quiet.instant("late")
        assert quiet.flush(timeout_s=10)
        trace = collector.snapshot()
        quiet.close()
        loud.close()
    finally:
        collector.stop()
    assert not [line for line in collector.lines if "Traceback" in line or "Error" in line]
    other = trace["otherData"]
    assert other["received_events"] == 30_011
    assert other["overwritten_events"] > 0
    assert other["received_events"] == other["stored_events"] + other["overwritten_events"]
    assert [e["args"]["i"] for e in events(trace, "i") if e["name"] == "early"] == list(range(10))
