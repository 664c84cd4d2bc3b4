"""Pairing markers and source activity into slices, as every snapshot format shows them across a snapshot's frames."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from ringtrace.collector.read.frame_walk import Shown
from ringtrace.collector.read.pairing import Pairing

PROCESS, TRACK = 10, (10, 20)


def feed(pairing: Pairing, events: list[tuple[str, str, int]]) -> list[Shown]:
    out = []
    for shape, name, ts in events:
        if shape.startswith("source"):
            made = pairing.source(shape, name, ts, TRACK, PROCESS)
        else:
            made = pairing.marker(shape, name, ts, {"at": ts}, TRACK, PROCESS)
        if made is not None:
            out.append(made)
    return out


def spans(events: list[Shown]) -> list[tuple[str, int, int]]:
    return sorted((e[1], e[2], e[2] + e[3]) for e in events if e[0] == "X")


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
    assert made[0][4] == {"at": 4}  # the end's details over the start's
    assert pairing.still_open() == [] and pairing.unmatched_marker_ends == {}


def test_unmatched_markers_are_open_ended_or_counted() -> None:
    pairing = Pairing()
    made = feed(pairing, [("marker_end", "x", 1), ("marker_start", "y", 2)])
    assert [(e[0], e[1]) for e in made] == [("i", "x")]
    assert pairing.unmatched_marker_ends == {PROCESS: 1}
    ((track, still),) = pairing.still_open()
    assert track == TRACK and still[:3] == ("B", "y", 2)


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
    flags = {e[2]: e[4] for e in made if e[0] == "X"}
    assert flags == {1: None, 2: {"activity": 2, "overlap": True}}
    assert pairing.source_anomalies == {PROCESS: 1}
    assert [(e[0], e[2]) for _, e in pairing.still_open()] == [("B", 5)]


@given(st.lists(st.tuples(st.sampled_from(["source_open", "source_close"]), st.just("s")), max_size=60))
def test_every_source_event_is_accounted_for(events: list[tuple[str, str]]) -> None:
    pairing = Pairing()
    made = feed(pairing, [(shape, name, ts) for ts, (shape, name) in enumerate(events)])
    opens = sum(shape == "source_open" for shape, _ in events)
    closes = len(events) - opens
    slices = sum(e[0] == "X" for e in made)
    anomalies = pairing.source_anomalies.get(PROCESS, 0)
    assert slices + anomalies == closes
    assert slices + len(pairing.still_open()) == opens
