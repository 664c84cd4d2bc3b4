"""Pairing markers and source activity into slices, as the Chrome export does across the frames of a snapshot."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from ringtrace.collector.slices import Pairing

PID, TID = 10, 20


def feed(pairing: Pairing, events: list[tuple[str, str, float]]) -> list[dict[str, Any]]:
    out = []
    for shape, name, ts in events:
        if shape.startswith("source"):
            made = pairing.source(shape, name, ts, PID, TID)
        else:
            made = pairing.marker(shape, name, ts, PID, TID, {"at": ts})
        if made is not None:
            out.append(made)
    return out


def spans(events: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    return sorted((e["name"], e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X")


def test_a_marker_start_pairs_with_the_next_end_of_its_name_nesting_counted() -> None:
    pairing = Pairing()
    made = feed(
        pairing,
        [
            ("marker_start", "a", 1),
            ("marker_start", "b", 2),
            ("marker_start", "a", 3),
            ("marker_end", "a", 4),  # the inner a
            ("marker_end", "b", 5),
            ("marker_end", "a", 6),  # the outer a
        ],
    )
    assert spans(made) == [("a", 1, 6), ("a", 3, 4), ("b", 2, 5)]
    assert made[0]["args"] == {"at": 4}  # the end's details over the start's
    assert pairing.still_open() == [] and pairing.unmatched_marker_ends == {}


def test_unmatched_markers_are_open_ended_or_counted() -> None:
    pairing = Pairing()
    made = feed(pairing, [("marker_end", "x", 1), ("marker_start", "y", 2)])
    assert [(e["ph"], e["name"]) for e in made] == [("i", "x")]
    assert pairing.unmatched_marker_ends == {PID: 1}
    (still,) = pairing.still_open()
    assert (still["ph"], still["name"], still["ts"]) == ("B", "y", 2)


def test_source_activity_nests_flags_overlap_and_counts_a_close_with_nothing_open() -> None:
    pairing = Pairing()
    made = feed(
        pairing,
        [
            ("source_close", "gpu", 0),
            ("source_open", "gpu", 1),
            ("source_open", "gpu", 2),
            ("source_close", "gpu", 3),
            ("source_close", "gpu", 4),
            ("source_open", "gpu", 5),
        ],
    )
    assert spans(made) == [("gpu", 1, 4), ("gpu", 2, 3)]
    flags = {(e["ts"]): e.get("args") for e in made if e["ph"] == "X"}
    assert flags == {1: None, 2: {"activity": 2, "overlap": True}}
    assert pairing.source_anomalies == {PID: 1}
    assert [(e["ph"], e["ts"]) for e in pairing.still_open()] == [("B", 5)]


@given(st.lists(st.tuples(st.sampled_from(["source_open", "source_close"]), st.just("s")), max_size=60))
def test_every_source_event_is_accounted_for(events: list[tuple[str, str]]) -> None:
    pairing = Pairing()
    made = feed(pairing, [(shape, name, float(ts)) for ts, (shape, name) in enumerate(events)])
    opens = sum(shape == "source_open" for shape, _ in events)
    closes = len(events) - opens
    slices = sum(e["ph"] == "X" for e in made)
    anomalies = pairing.source_anomalies.get(PID, 0)
    assert slices + anomalies == closes
    assert slices + len(pairing.still_open()) == opens
