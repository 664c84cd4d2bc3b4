"""Incidents (``tl.incident``, kind 13) in snapshots: each an instant of category ``incident`` named by its reason,
with ``reason`` first among its args, alike in Chrome JSON, Perfetto, the web view's ``/timeline`` (its block's ``cat``
column marks it) and the live tail's rows, and alike whether the C writers run or not (they leave incidents to the
event walk).

The store: a file written by a file listener from a timeline that recorded them, read back as a snapshot view, as
``ringtrace convert`` and a collector's data dir read it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from perfetto_model import PerfettoTrace
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.chrome_frames import ACCELERATED
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.export.timeline_columns import timeline_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView, incident_args, is_incident
from ringtrace.collector.read.rows import selected_rows
from ringtrace.collector.read.selection import EventFilter, Pattern
from ringtrace.wire.model import BUILTIN_KINDS, INCIDENT, INSTANT
from ringtrace.wire.table_frames import KindSpec

ROUNDS = 30


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> SnapshotView:
    """ROUNDS rounds of: a span "work" holding an instant "tick", and after each tenth an incident."""
    path = tmp_path_factory.mktemp("incidents") / "incidents.rttrace"
    tl = Timeline("incidents", [FileListener(path, process_name="unit")])
    for i in range(ROUNDS):
        with tl.scope("work", i=i):
            tl.instant("tick", i=i)
        if i % 10 == 9:
            tl.incident("payment declined", order=i, reason="not the name")
    tl.incident("bare")
    assert tl.close(timeout_s=30)
    return load_file(path).view


def chrome(view: SnapshotView, accelerated: bool = True, **selected: Any) -> list[dict[str, Any]]:
    document = json.loads(b"".join(chrome_trace_chunks(view, EventFilter(**selected), accelerated=accelerated)))
    return sorted((e for e in document["traceEvents"] if e["ph"] != "M"), key=lambda e: (e["ts"], -e.get("dur", 0)))


def test_the_kind_is_declared_built_in_as_an_instant() -> None:
    assert KindSpec(INCIDENT, "incident", "instant") in BUILTIN_KINDS
    assert INCIDENT == 13 and [kind.id for kind in BUILTIN_KINDS] == list(range(14))


def test_chrome_shows_incidents_as_instants_of_category_incident_with_their_reason(view: SnapshotView) -> None:
    incidents = [e for e in chrome(view) if e.get("cat") == "incident"]
    assert [(e["name"], e["ph"], e["s"], e["args"]) for e in incidents] == [
        ("payment declined", "i", "t", {"reason": "payment declined", "order": order}) for order in (9, 19, 29)
    ] + [("bare", "i", "t", {"reason": "bare"})]
    ticks = [e for e in chrome(view) if e["name"] == "tick"]
    assert len(ticks) == ROUNDS and all("cat" not in e for e in ticks)


@pytest.mark.skipif(not ACCELERATED, reason="the C writers are not built here (or RINGTRACE_PURE_PYTHON)")
@pytest.mark.parametrize("selected", [{}, {"category": Pattern("incident")}, {"name": Pattern("pay*")}, {"limit": 5}])
def test_the_c_writers_show_incidents_as_the_event_walk_does(view: SnapshotView, selected: dict[str, Any]) -> None:
    assert chrome(view, **selected) == chrome(view, accelerated=False, **selected)
    fast = b"".join(perfetto_chunks(view, EventFilter(**selected)))
    assert fast == b"".join(perfetto_chunks(view, EventFilter(**selected), accelerated=False))
    fast_columns, walk_columns = (timeline_events(view, EventFilter(**selected), accelerated=a) for a in (True, False))
    assert fast_columns == walk_columns


def timeline_events(view: SnapshotView, selected: EventFilter, accelerated: bool = True) -> list[str]:
    """The web view's events, one JSON text each with its category, sorted (within a frame the C writers' events come
    before the walk's)."""
    document = json.loads(b"".join(timeline_chunks(view, selected, accelerated=accelerated)))
    names = document["names"]
    return sorted(
        json.dumps([block["track"], phase, names[name], ts, args, block.get("cat", [""] * len(block["ph"]))[i]])
        for block in document["blocks"]
        for i, (phase, name, ts, args) in enumerate(
            zip(block["ph"], block["name"], block["ts"], block["args"], strict=True)
        )
    )


def test_category_incident_selects_the_incidents_alone(view: SnapshotView) -> None:
    events = chrome(view, category=Pattern("incident"))
    assert [e["name"] for e in events] == ["payment declined"] * 3 + ["bare"]


def test_perfetto_shows_incidents_as_instants_of_category_incident(view: SnapshotView) -> None:
    trace = PerfettoTrace(b"".join(perfetto_chunks(view)))
    incidents = sorted((i for i in trace.instants if i.categories), key=lambda i: i.ts_ns)
    assert [(i.name, i.args, i.categories) for i in incidents] == [
        ("payment declined", {"reason": "payment declined", "order": order}, ("incident",)) for order in (9, 19, 29)
    ] + [("bare", {"reason": "bare"}, ("incident",))]


def test_the_web_view_gets_a_category_column_in_blocks_with_incidents(view: SnapshotView) -> None:
    document = json.loads(b"".join(timeline_chunks(view)))
    names = document["names"]
    marked = []
    for block in document["blocks"]:
        categories = block.get("cat", [""] * len(block["ph"]))
        assert len(categories) == len(block["ph"])
        marked += [
            (phase, names[name], args)
            for phase, name, args, category in zip(block["ph"], block["name"], block["args"], categories, strict=True)
            if category == "incident"
        ]
    assert marked == [
        ("i", "payment declined", {"reason": "payment declined", "order": order}) for order in (9, 19, 29)
    ] + [("i", "bare", {"reason": "bare"})]
    assert sum(block["ph"].count("i") for block in document["blocks"]) == ROUNDS + 4


def test_the_text_dump_and_the_live_tail_show_an_incidents_reason(view: SnapshotView) -> None:
    rows = list(selected_rows(view, EventFilter(category=Pattern("incident"))))
    assert [(row.kind, row.category, row.name, row.args) for row in rows] == [
        ("incident", "incident", "payment declined", {"reason": "payment declined", "order": order})
        for order in (9, 19, 29)
    ] + [("incident", "incident", "bare", {"reason": "bare"})]


def test_a_kind_13_declared_otherwise_is_not_an_incident() -> None:
    assert is_incident(KindSpec(INCIDENT, "incident", "instant"))
    assert not is_incident(KindSpec(INCIDENT, "incident", "span"))  # a stream is not trusted to declare it so
    assert not is_incident(KindSpec(INSTANT, "incident", "instant"))
    assert incident_args("r", None) == {"reason": "r"}
    assert incident_args("r", [1, 2]) == {"reason": "r", "value": [1, 2]}
    assert incident_args("r", {"reason": "x", "a": 1}) == {"reason": "r", "a": 1}
