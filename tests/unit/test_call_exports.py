"""Traced calls in snapshots: each a slice named by its function, of category ``call``, with its file and line (and
``raised`` for a call an exception left), alike in Chrome JSON, Perfetto and the web view's ``/timeline``, and alike
whether the C writers run or not (they leave calls to the event walk, which resolves their stack ids).

The store: a file written by a file listener from runs of calls (``CallRun``) among ordinary spans, read back as a
snapshot view, as ``ringtrace convert`` and a collector's data dir read it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from perfetto_model import PerfettoTrace
from ringtrace.client import FileListener
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.chrome_frames import ACCELERATED
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.export.timeline_columns import timeline_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.rows import selected_rows
from ringtrace.collector.read.selection import EventFilter, Pattern
from ringtrace.wire.call_records import CallRun, pack_records
from ringtrace.wire.model import CALL, CALL_RAISED, SPAN, THREAD_TRACK, TrackInfo

TRACK = TrackInfo(7, THREAD_TRACK, "main", 1)
LOCATIONS = [("main", "app.py", 10), ("Parser.parse", "parse.py", 3), ("len", "", 0)]
ROUNDS = 40


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> SnapshotView:
    """ROUNDS rounds of: a span "work", and inside it main calling parse calling len, main raising."""
    path = tmp_path_factory.mktemp("calls") / "calls.rttrace"
    listener = FileListener(path, process_name="unit")
    base = time.monotonic_ns()
    for i in range(ROUNDS):
        at = base + 1_000 * i
        calls = [(at + 20, at + 30, 2, CALL), (at + 15, at + 40, 1, CALL), (at + 10, at + 50, 0, CALL_RAISED)]
        listener.receive(TRACK, CallRun(pack_records(calls), LOCATIONS))
        listener.receive(TRACK, [SPAN, "work", at, at + 100, {"i": i}])
    assert listener.close(timeout_s=30)
    return load_file(path).view


def chrome(view: SnapshotView, accelerated: bool = True, **selected: Any) -> list[dict[str, Any]]:
    document = json.loads(b"".join(chrome_trace_chunks(view, EventFilter(**selected), accelerated=accelerated)))
    return sorted((e for e in document["traceEvents"] if e["ph"] != "M"), key=lambda e: (e["ts"], -e.get("dur", 0)))


def test_chrome_shows_calls_as_slices_of_category_call_with_file_and_line(view: SnapshotView) -> None:
    events = chrome(view)
    assert len(events) == 4 * ROUNDS
    first = [(e["name"], e.get("cat"), e["args"], round(e["dur"] * 1000)) for e in events[:4]]
    assert first == [
        ("work", None, {"i": 0}, 100),
        ("main", "call", {"file": "app.py", "line": 10, "raised": True}, 40),
        ("Parser.parse", "call", {"file": "parse.py", "line": 3}, 25),
        ("len", "call", {"file": "", "line": 0}, 10),
    ]
    assert {e["tid"] for e in events} == {1}


@pytest.mark.skipif(not ACCELERATED, reason="the C writers are not built here (or RINGTRACE_PURE_PYTHON)")
@pytest.mark.parametrize("selected", [{}, {"category": Pattern("call")}, {"limit": 7}])
def test_the_c_writers_show_calls_as_the_event_walk_does(view: SnapshotView, selected: dict[str, Any]) -> None:
    assert chrome(view, **selected) == chrome(view, accelerated=False, **selected)
    fast = b"".join(perfetto_chunks(view, EventFilter(**selected)))
    assert fast == b"".join(perfetto_chunks(view, EventFilter(**selected), accelerated=False))
    columns = [b"".join(timeline_chunks(view, EventFilter(**selected), accelerated=a)) for a in (True, False)]
    assert json.loads(columns[0])["blocks"] == json.loads(columns[1])["blocks"]


def test_category_call_selects_the_calls_alone(view: SnapshotView) -> None:
    events = chrome(view, category=Pattern("call"))
    assert len(events) == 3 * ROUNDS and {e["cat"] for e in events} == {"call"}


def test_perfetto_nests_calls_as_slices_with_their_file_and_line_as_annotations(view: SnapshotView) -> None:
    trace = PerfettoTrace(b"".join(perfetto_chunks(view)))
    first = sorted(trace.slices, key=lambda s: s.start_ns)[:4]
    assert [(s.name, s.depth, s.args, s.categories) for s in first] == [
        ("work", 0, {"i": 0}, []),
        ("main", 1, {"file": "app.py", "line": 10, "raised": True}, ["call"]),
        ("Parser.parse", 2, {"file": "parse.py", "line": 3}, ["call"]),
        ("len", 3, {"file": "", "line": 0}, ["call"]),
    ]


def test_the_web_view_draws_calls_as_slices_with_file_and_line(view: SnapshotView) -> None:
    document = json.loads(b"".join(timeline_chunks(view, EventFilter(limit=4))))
    names = document["names"]
    shown = sorted(
        (phase, names[name], json.dumps(args, sort_keys=True))
        for block in document["blocks"]
        for phase, name, args in zip(block["ph"], block["name"], block["args"], strict=True)
    )
    assert shown == [
        ("X", "Parser.parse", '{"file": "parse.py", "line": 3}'),
        ("X", "len", '{"file": "", "line": 0}'),
        ("X", "main", '{"file": "app.py", "line": 10, "raised": true}'),
        ("X", "work", '{"i": 39}'),
    ]


def test_the_text_dump_and_the_live_tail_show_a_calls_file_and_line(view: SnapshotView) -> None:
    rows = sorted(selected_rows(view, EventFilter(category=Pattern("call"), limit=3)), key=lambda row: row.wall_ns)
    assert [(row.kind, row.category, row.name, row.args) for row in rows] == [
        ("call_raised", "call", "main", {"file": "app.py", "line": 10}),
        ("call", "call", "Parser.parse", {"file": "parse.py", "line": 3}),
        ("call", "call", "len", {"file": "", "line": 0}),
    ]
