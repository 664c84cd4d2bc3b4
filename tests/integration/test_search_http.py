"""``GET /spans``, ``GET /aggregates`` and ``ringtrace spans`` / ``top`` through a real collector: what they answer is
what a Chrome snapshot of the same filters shows, and what they refuse is named."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from collector_process import CollectorProcess, RawClient, recorded_collector, run_script
from ringtrace.collector.command.main import main
from waiting import wait_for

# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("search_http")

RECORD = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
for i in range(200):
    with tl.scope("fast", i=i, route="/a" if i % 2 else "/b"):
        tl.instant("tick")
    if i % 40 == 0:
        with tl.scope("slow", i=i, error="timeout" if i == 40 else None):
            time.sleep(0.02)
tl.message("net", "warning", "retry $n")(1)
print(tl.flush(5))
"""


@pytest.fixture(scope="module")
def collector() -> Iterator[CollectorProcess]:
    with recorded_collector(RECORD, "alpha", "beta") as collector:
        yield collector


def chrome_spans(collector: CollectorProcess, query: str = "") -> list[dict[str, Any]]:
    return [e for e in collector.snapshot(query)["traceEvents"] if e["ph"] == "X"]


def test_the_slowest_spans_are_the_snapshot_s_longest_slowest_first(collector: CollectorProcess) -> None:
    document = collector.json("/spans?min_duration=10ms&limit=20")
    spans = document["spans"]
    assert [s["name"] for s in spans] == ["slow"] * 10
    durations = [s["duration_ns"] for s in spans]
    assert durations == sorted(durations, reverse=True) and min(durations) >= 10**7
    slow = sorted(round(e["dur"] * 1000) for e in chrome_spans(collector, "?name=slow"))
    assert sorted(durations) == pytest.approx(slow, abs=1)  # (Chrome's dur is us, three decimals)
    assert {s["process"] for s in spans} == {"alpha", "beta"}
    assert all(s["track"] == "MainThread" and s["trace_id"] is None for s in spans)
    assert document["lost"]["overwritten_events"] == 0


def test_filters_select_as_the_snapshot_s_and_args_and_errors_narrow(collector: CollectorProcess) -> None:
    spans = collector.json("/spans?process=alpha&name=f*&arg.route=/a&limit=1000")["spans"]
    assert len(spans) == 100 and {(s["process"], s["args"]["route"]) for s in spans} == {("alpha", "/a")}
    errors = collector.json("/spans?has_error=yes")["spans"]
    assert [(s["name"], s["args"]["i"], s["args"]["error"]) for s in errors] == [("slow", 40, "timeout")] * 2
    newest = collector.json("/spans?sort=start&limit=3&pid=" + str(errors[0]["pid"]))["spans"]
    starts = [s["start_ns"] for s in newest]
    assert starts == sorted(starts, reverse=True) and len(starts) == 3


def test_aggregates_count_what_the_snapshot_shows(collector: CollectorProcess) -> None:
    document = collector.json("/aggregates?by=name,process")
    rows = {(row["name"], row["process"]): row for row in document["rows"]}
    assert {key: row["count"] for key, row in rows.items()} == {
        ("fast", "alpha"): 200, ("fast", "beta"): 200, ("slow", "alpha"): 5, ("slow", "beta"): 5,
    }  # fmt: skip
    slow = rows[("slow", "alpha")]
    assert slow["p50_ns"] <= slow["p90_ns"] <= slow["p99_ns"] <= slow["max_ns"] and slow["p50_ns"] >= 2 * 10**7
    assert document["instants"] == 400 and document["messages"] == {"warning": 2}
    by_name = collector.json("/aggregates?process=beta")["rows"]
    assert [(row["name"], row["process"], row["count"]) for row in by_name] == [("slow", None, 5), ("fast", None, 200)]
    assert sum(r["count"] for r in document["rows"]) == len(chrome_spans(collector))


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("/spans?min_duration=soon", "'min_duration'"),
        ("/spans?limit=0", "'limit'"),
        ("/spans?limit=10001", "'limit'"),
        ("/spans?sort=name", "'sort'"),
        ("/spans?has_error=maybe", "'has_error'"),
        ("/spans?by=name", "'by'"),
        ("/spans?format=chrome", "'format'"),
        ("/spans?limit=1&limit=2", "'limit'"),
        ("/spans?arg.=x", "'arg.'"),
        ("/spans?min_duration=2s&max_duration=1s", "'min_duration'"),
        ("/spans?min_duration=99999999999999h", "'min_duration': a duration is at most 9223372036 s"),
        ("/spans?max_duration=9223372037s", "'max_duration': a duration is at most 9223372036 s"),
        ("/aggregates?min_duration=-5ms", "'min_duration': a duration must not be negative, got '-5ms'"),
        ("/aggregates?by=track", "'by'"),
        ("/aggregates?sort=duration", "'sort'"),
        ("/aggregates?since=yesterday", "'since'"),
        ("/aggregates?shown_pid=1,x", "'shown_pid' must be up to"),
        # The tables' parameters are not the search's: unknown, rather than taken and refused for a format it has not.
        ("/spans?table=spans", "unknown query parameter 'table'"),
        ("/aggregates?columns=name", "unknown query parameter 'columns'"),
    ],
)
def test_a_bad_parameter_is_a_400_that_names_it(collector: CollectorProcess, query: str, named: str) -> None:
    status, body = collector.get(query)
    assert status == 400 and named in body.decode(), body


#: One OS process connected under a name, then again under another: two processes to the collector, one OS pid.
RENAMED = """
import sys, ringtrace.client
for name, spans in (("first-name", 5), ("second-name", 7)):
    tl = ringtrace.client.connect(sys.argv[1], process_name=name)
    for i in range(spans):
        with tl.scope("renamed work", i=i):
            pass
    assert tl.flush(5)
"""


def test_shown_pid_selects_the_process_that_shows_it_alone_where_pid_takes_its_os_pid_s_others_too() -> None:
    collector = CollectorProcess()
    try:
        run_script(collector, RENAMED)
        processes = {p["process_name"]: p for p in collector.json("/sources")["processes"]}
        first, second = processes["first-name"], processes["second-name"]
        assert first["os_pid"] == second["os_pid"] == first["pid"] != second["pid"]

        def counts(query: str) -> list[tuple[str, int]]:
            return [(row["name"], row["count"]) for row in collector.json(f"/aggregates?{query}")["rows"]]

        assert counts(f"pid={first['pid']}") == [("renamed work", 12)]  # by OS pid too: both
        assert counts(f"shown_pid={first['pid']}") == [("renamed work", 5)]
        assert counts(f"shown_pid={second['pid']}") == [("renamed work", 7)]
        spans = collector.json(f"/spans?shown_pid={first['pid']}")["spans"]
        assert len(spans) == 5 and {span["process"] for span in spans} == {"first-name"}
        shown = collector.json(f"/sources?shown_pid={first['pid']}")["processes"]
        assert [process["process_name"] for process in shown] == ["first-name"]
    finally:
        collector.stop()


def test_the_commands_print_tables_and_json(collector: CollectorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spans", collector.http_url, "--min-duration", "10ms", "--process", "beta"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["duration", "start"] and len(lines) == 6
    assert all(" ms " in line and "slow" in line and "beta" in line for line in lines[1:])
    assert err == "ringtrace spans: 5 spans; lost: nothing\n"
    assert main(["spans", collector.http_url, "--has-error", "--arg", "i=40", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["spans"]) == 2
    assert main(["top", collector.http_url, "--by", "name,process", "--name", "slow"]) == 0
    out, err = capsys.readouterr()
    assert out.split()[:9] == ["name", "process", "count", "total", "mean", "p50", "p90", "p99", "max"]
    assert err == "ringtrace top: 2 rows; 0 instants; messages: none; lost: nothing\n"
    assert main(["top", collector.http_url, "--by", "process"]) == 0
    assert "400 instants; messages: 2 warning;" in capsys.readouterr().err
    assert main(["spans", collector.http_url, "--min-duration", "soon"]) == 2
    assert "--min-duration" in capsys.readouterr().err
    assert main(["top", collector.http_url, "--by", "track"]) == 2
    assert "--by" in capsys.readouterr().err


RECORD_OPEN = """
import sys, threading, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
tl.marker("phase", "start")
tl.async_begin("load", 7, url="/x")
def finish():
    time.sleep(0.02)
    tl.async_end("load", 7, status=200)
worker = threading.Thread(target=finish)
worker.start()
worker.join()
tl.async_begin("pending", 8)
print(tl.flush(5))
"""


def test_async_slices_and_spans_still_open_are_found_open_ones_marked(capsys: pytest.CaptureFixture[str]) -> None:
    with recorded_collector(RECORD_OPEN, "gamma") as collector:
        spans = {s["name"]: s for s in collector.json("/spans?limit=100")["spans"]}
        assert spans.keys() == {"phase", "load", "pending"}
        load, phase, pending = spans["load"], spans["phase"], spans["pending"]
        assert (load["open"], load["args"], load["track"]) == (False, {"url": "/x", "status": 200}, "MainThread")
        assert load["duration_ns"] >= 2 * 10**7  # (begun on the main thread, ended on the worker 20 ms on)
        assert phase["open"] and pending["open"] and phase["args"] == {} and pending["args"] == {}
        # Open spans run to the window's end (when it is before now).
        until = pending["start_ns"] + 1_000
        windowed = {s["name"]: s for s in collector.json(f"/spans?until={until}")["spans"]}
        assert (
            windowed["pending"]["duration_ns"] == 1_000
            and windowed["phase"]["duration_ns"] == until - phase["start_ns"]
        )
        assert windowed["load"]["duration_ns"] == load["duration_ns"] and not windowed["load"]["open"]
        snapshot = collector.snapshot(f"?until={until}")["traceEvents"]
        assert {(e["name"], e["ph"]) for e in snapshot if e["ph"] in "Bbe"} == {
            ("phase", "B"), ("load", "b"), ("load", "e"), ("pending", "b"),
        }  # fmt: skip
        rows = {row["name"]: row for row in collector.json(f"/aggregates?until={until}")["rows"]}
        assert {name: (row["count"], row["open"]) for name, row in rows.items()} == {
            "phase": (1, 1), "load": (1, 0), "pending": (1, 1),
        }  # fmt: skip
        assert rows["pending"]["max_ns"] == 1_000
        assert main(["spans", collector.http_url, "--until", str(until)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert sum("(open)" in line for line in lines) == 2 and any("load" in line for line in lines)
        assert main(["top", collector.http_url, "--name", "pending"]) == 0
        assert "1 (1 open)" in capsys.readouterr().out


RECORD_END_FIRST = """
import sys, threading, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
tl.instant("main's track first")
tl.flush(5)
worker = threading.Thread(target=lambda: tl.async_begin("load", 7, url="/x"))
worker.start()
worker.join()
tl.async_end("load", 7, status=200)
print(tl.flush(5))
"""


def test_an_async_slice_whose_end_arrives_before_its_begin_is_found_ended() -> None:
    # Begun on a worker thread and ended on the main thread, whose frames went first: the end met no begin and was
    # dropped, and the begin was found open, its duration running to now.
    with recorded_collector(RECORD_END_FIRST, "delta") as collector:
        arrived = [e["ph"] for e in collector.snapshot()["traceEvents"] if e["ph"] in "be"]
        spans = collector.json("/spans?limit=100")["spans"]
        assert [(s["name"], s["open"], s["args"]) for s in spans] == [("load", False, {"url": "/x", "status": 200})], (
            arrived
        )
        rows = collector.json("/aggregates")["rows"]
        assert [(row["name"], row["count"], row["open"]) for row in rows] == [("load", 1, 0)]
        # A window after it ended holds none of it (its begin, held as begun before the window, was shown open).
        ended = spans[0]["start_ns"] + spans[0]["duration_ns"]
        assert collector.json(f"/spans?since={ended + 1}")["spans"] == []
        later = collector.snapshot(f"?since={ended + 1}")["traceEvents"]
        assert [e for e in later if e["ph"] in "be"] == []
        # A window that its end alone is in holds the whole slice, ended.
        (found,) = collector.json(f"/spans?since={ended - 1}")["spans"]
        assert (found["open"], found["duration_ns"]) == (False, spans[0]["duration_ns"])


def head(collector: CollectorProcess, path: str) -> tuple[int, str]:
    """The status and content type ``HEAD path`` answers."""
    request = urllib.request.Request(collector.http_url + path, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers.get_content_type()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get_content_type()


def test_with_every_snapshot_slot_taken_a_search_is_a_503_as_a_snapshot_is() -> None:
    collector = CollectorProcess("--max-snapshots", "1")
    try:
        with RawClient(collector.tcp_address):  # (it never acknowledges a flush: a snapshot waits for it, in its slot)

            def hold() -> None:  # (asked again if a search holds the slot when it comes)
                snapshot = "/snapshot?flush_timeout_s=60"
                wait_for(lambda: collector.get(snapshot), until=lambda got: got[0] != 503, timeout_s=60, what=snapshot)

            waiting = threading.Thread(target=hold)
            waiting.start()
            _, body = wait_for(
                lambda: collector.get("/spans?flush_timeout_s=0"),
                until=lambda answer: answer[0] == 503,
                timeout_s=60,
                what="/spans refused while a snapshot takes the one slot",
            )
            assert b"max_snapshots=1" in body
            assert collector.get("/aggregates?flush_timeout_s=0")[0] == 503
            for path in ("/spans?flush_timeout_s=0", "/aggregates?by=name"):  # HEAD: the query checked, no search
                assert head(collector, path) == (200, "application/json")
            assert head(collector, "/spans?sort=size") == (400, "text/plain")
        waiting.join(90)  # (the client gone, the snapshot waits for its flush no more)
        assert collector.get("/spans?flush_timeout_s=0")[0] == 200
    finally:
        collector.stop()
