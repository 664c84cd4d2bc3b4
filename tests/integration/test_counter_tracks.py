"""One counter set from several threads, through a real collector: every view draws a line per thread that set it
(Chrome JSON, a counter track per name and ``id``; Perfetto, a counter track under each thread; ``/timeline``, the
counter's values on the track of each thread), each line holding that thread's values in order, never one line that
jumps between them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from collector_process import CollectorProcess, events, metadata, run_script
from perfetto_model import PerfettoTrace

#: Three threads set the counter "level" at once: two count up, one down, each in a range of its own.
RECORD = """
import sys, threading, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="counting")
start = threading.Barrier(3)
def count(k):
    start.wait(timeout=30)
    for i in range(50):
        tl.counter("level", 1000 * k + (-i if k == 1 else i))
threads = [threading.Thread(target=count, args=(k,), name=f"counter-{k}") for k in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert tl.flush(timeout_s=30)
"""
#: Each thread's values, in the order it set them.
SET = {f"counter-{k}": [1000 * k + (-i if k == 1 else i) for i in range(50)] for k in range(3)}

Lines = dict[str, list[float]]


@pytest.fixture(scope="module")
def collector() -> Iterator[CollectorProcess]:
    collector = CollectorProcess()
    try:
        run_script(collector, RECORD)
        yield collector
    finally:
        collector.stop()


def chrome_lines(collector: CollectorProcess) -> Lines:
    """What a Chrome JSON viewer draws: a counter track per pid, name and id (the trace event format's rule),
    named here by the thread its events carry."""
    trace = collector.snapshot("?category=counter")
    threads = metadata(trace, "thread_name")
    lines: dict[tuple[int, str, str], list[tuple[float, float]]] = {}
    named: dict[tuple[int, str, str], str] = {}
    for e in events(trace, "C"):
        key = (e["pid"], e["name"], e.get("id", ""))
        lines.setdefault(key, []).append((e["ts"], e["args"]["value"]))
        named[key] = threads[(e["pid"], e["tid"])]
    return {named[key]: [value for _, value in sorted(values)] for key, values in lines.items()}


def perfetto_lines(collector: CollectorProcess) -> Lines:
    """Perfetto's counter tracks, each named by the thread track it is under."""
    status, body = collector.get("/snapshot?format=perfetto&category=counter")
    assert status == 200, body
    trace = PerfettoTrace(body)
    lines: dict[int, list[tuple[int, float]]] = {}
    for value in trace.counters:
        lines.setdefault(value.track, []).append((value.ts_ns, value.value))
    return {trace.label(trace.tracks[track].parent): [v for _, v in sorted(values)] for track, values in lines.items()}


def timeline_lines(collector: CollectorProcess) -> Lines:
    """The web view's counter lines: ``/timeline``'s counter values per track and name."""
    document = collector.json("/timeline?category=counter")
    tracks = {track["index"]: track["name"] for track in document["tracks"]}
    lines: dict[tuple[int, str], list[tuple[int, float]]] = {}
    for block in document["blocks"]:
        for phase, name, ts, args in zip(block["ph"], block["name"], block["ts"], block["args"], strict=True):
            assert phase == "C"
            lines.setdefault((block["track"], document["names"][name]), []).append((ts, args["value"]))
    assert {name for _, name in lines} == {"level"}
    return {tracks[track]: [v for _, v in sorted(values)] for (track, _), values in lines.items()}


@pytest.mark.parametrize("lines", [chrome_lines, perfetto_lines, timeline_lines])
def test_a_counter_set_from_three_threads_is_a_line_per_thread_in_every_view(
    collector: CollectorProcess, lines: Callable[[CollectorProcess], Lines]
) -> None:
    drawn = lines(collector)
    assert len(drawn) == 3
    assert drawn == SET  # each thread's values, in order: up, down, up
