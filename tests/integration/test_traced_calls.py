"""Traced function calls through a real collector: a run of calls (``CallRun``, records in bytes) handed to the
client's streamer reaches the store, and snapshots show each call as a slice named by its function, with its file and
line (and ``raised`` for a call an exception left), in Chrome JSON, in Perfetto (a slice of category ``call``, its
file and line as debug annotations), in the web view's ``/timeline`` and through ``category=call``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from collector_process import CollectorProcess, events, metadata
from perfetto_model import PerfettoTrace
from ringtrace.client import Streamer, StreamerOptions
from ringtrace.wire.call_records import CallRun, pack_records
from ringtrace.wire.model import CALL, CALL_RAISED, INSTANT, THREAD_TRACK, TrackInfo

LOCATIONS = [("main", "app.py", 10), ("Parser.parse", "parse.py", 3), ("len", "", 0)]
#: Calls per location index in the big run (a run as large as a tracer's buffer holds between two drains, nearly).
CALLS = 150_000


@pytest.fixture(scope="module")
def streamed() -> Iterator[tuple[CollectorProcess, int]]:
    """A collector holding one thread's calls, streamed as the flusher hands runs over: ``(collector, first_ns)``."""
    collector = CollectorProcess()
    streamer = Streamer(collector.tcp_address, StreamerOptions(process_name="calls"))
    track = TrackInfo(1, THREAD_TRACK, "MainThread", threading.get_native_id())
    try:
        assert streamer.flush(timeout_s=30)  # connected and welcomed
        now = time.monotonic_ns() - 10_000_000_000
        # parse (and a len inside it) inside main, which raised: children written first, as a tracer writes them
        small = [(now + 10, now + 40, 2, CALL), (now + 5, now + 50, 1, CALL), (now, now + 100, 0, CALL_RAISED)]
        streamer.receive(track, CallRun(pack_records(small), LOCATIONS))
        big = [(now + 1000 + 10 * i, now + 1005 + 10 * i, i % 3, CALL) for i in range(CALLS)]
        streamer.receive(track, CallRun(pack_records(big), LOCATIONS))
        streamer.receive(track, [INSTANT, "after the calls", now + 10 * CALLS + 2000, now + 10 * CALLS + 2000, None])
        streamer.handed_over()
        assert streamer.flush(timeout_s=60)
        collector.wait_for_stored(3 + CALLS + 1, timeout_s=60)
        assert streamer.dropped_events == 0
        yield collector, now
    finally:
        streamer.close(timeout_s=5)
        collector.stop()


def test_chrome_shows_each_call_as_a_slice_with_its_file_and_line(streamed: tuple[CollectorProcess, int]) -> None:
    collector, _ = streamed
    trace = collector.snapshot("?limit=1000000")
    calls = [e for e in events(trace, "X") if e.get("cat") == "call"]
    assert len(calls) == 3 + CALLS
    first = sorted(calls, key=lambda e: e["ts"])[:3]
    assert [(e["name"], e["args"], round(e["dur"] * 1000)) for e in first] == [
        ("main", {"file": "app.py", "line": 10, "raised": True}, 100),
        ("Parser.parse", {"file": "parse.py", "line": 3}, 45),
        ("len", {"file": "", "line": 0}, 30),
    ]
    thread_names = metadata(trace, "thread_name")
    assert {thread_names[(e["pid"], e["tid"])] for e in calls} == {"MainThread"}
    counts: dict[str, int] = {}
    for e in calls:
        counts[e["name"]] = counts.get(e["name"], 0) + 1
    assert counts == {"main": 1 + CALLS // 3, "Parser.parse": 1 + CALLS // 3, "len": 1 + CALLS // 3}


def test_category_call_selects_the_calls_alone(streamed: tuple[CollectorProcess, int]) -> None:
    collector, _ = streamed
    trace = collector.snapshot("?category=call&limit=10")
    shown = [e for e in trace["traceEvents"] if e["ph"] != "M"]
    assert len(shown) == 10 and {e["cat"] for e in shown} == {"call"}
    instants = collector.snapshot("?category=instant")
    assert [e["name"] for e in events(instants, "i")] == ["after the calls"]


def test_perfetto_shows_each_call_as_a_slice_of_category_call_with_file_and_line(
    streamed: tuple[CollectorProcess, int],
) -> None:
    collector, _ = streamed
    status, body = collector.get("/snapshot?format=perfetto&category=call&limit=3")
    assert status == 200, body
    trace = PerfettoTrace(body)
    # the newest three: the last calls of the big run, one of each location
    assert sorted((s.name, s.args["file"], s.args["line"], s.end_ns - s.start_ns) for s in trace.slices) == [
        ("Parser.parse", "parse.py", 3, 5),
        ("len", "", 0, 5),
        ("main", "app.py", 10, 5),
    ]
    assert all(s.categories == ["call"] for s in trace.slices)
    status, body = collector.get("/snapshot?format=perfetto&category=call&limit=1000000")
    nested = PerfettoTrace(body)
    first = sorted(nested.slices, key=lambda s: s.start_ns)[:3]
    assert [(s.name, s.depth, s.args) for s in first] == [
        ("main", 0, {"file": "app.py", "line": 10, "raised": True}),
        ("Parser.parse", 1, {"file": "parse.py", "line": 3}),
        ("len", 2, {"file": "", "line": 0}),
    ]
    assert len(nested.slices) == 3 + CALLS


def test_the_web_view_draws_calls_as_slices(streamed: tuple[CollectorProcess, int]) -> None:
    collector, _ = streamed
    status, body = collector.get("/timeline?category=call&limit=3")
    assert status == 200, body
    document = json.loads(body)
    names = document["names"]
    shown = [
        (phase, names[name], args)
        for block in document["blocks"]
        for phase, name, args in zip(block["ph"], block["name"], block["args"], strict=True)
    ]
    assert sorted(shown) == [
        ("X", "Parser.parse", {"file": "parse.py", "line": 3}),
        ("X", "len", {"file": "", "line": 0}),
        ("X", "main", {"file": "app.py", "line": 10}),
    ]
