"""The web view's HTTP side without a browser, through a real collector: ``GET /timeline`` (the compact columnar
form of the selected events: its shape, filters and refusals), the page and its files at ``/`` and ``/ui/``, their
Content-Security-Policy, and what needs the token."""

from __future__ import annotations

import fnmatch
import gzip
import json
import os
import secrets
import tomllib
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, run_script
from ringtrace.collector.http.page import wants_html

ROOT = Path(__file__).parents[2]
# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("web_view_http")

#: One of each thing the timeline draws, on threads, a task-less source and a counter.
RECORD = """
import asyncio, sys, threading, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
started = time.time_ns()
warn = tl.message("disk", "warning", "disk $n almost full")
queue = tl.source("GPU queue")
for i in range(30):
    with tl.scope("request", i=i):
        with tl.scope("parse"):
            pass
        queue.open()
        queue.close()
    tl.counter("depth", i)
warn(3)
tl.instant("tick", n=1)
tl.marker("Layout", "start")
tl.async_begin("upload", 9, path="/x")
worker = threading.Thread(target=tl.async_end, args=("upload", 9), name="worker")
worker.start()
worker.join()
async def fetch(n):
    with tl.scope("fetch", n=n):
        await asyncio.sleep(0.01)
async def both():
    await asyncio.gather(fetch(1), fetch(2))
asyncio.run(both())
assert tl.flush(5)
print(started, time.time_ns())
"""
#: What RECORD's timeline shows, by phase: 60 spans, 2 spans on asyncio task lanes and 30 source slices (X), an open
#: marker (B), a message and an instant (i), 30 counter values (C), an async begin and end.
SHOWN = {"X": 92, "B": 1, "i": 2, "C": 30, "b": 1, "e": 1}


def record(collector: CollectorProcess, name: str) -> tuple[int, int]:
    started, ended = run_script(collector, RECORD, name).split()
    return int(started), int(ended)


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[CollectorProcess, dict[str, tuple[int, int]]]]:
    collector = CollectorProcess()
    try:
        yield collector, {name: record(collector, name) for name in ("alpha", "beta")}
    finally:
        collector.stop()


def timeline(collector: CollectorProcess, query: str = "") -> dict[str, Any]:
    status, body = collector.get("/timeline" + query)
    assert status == 200, body
    document: dict[str, Any] = json.loads(body)
    return document


def events(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event of a /timeline document, one dict each, with its track's entry."""
    tracks = {track["index"]: track for track in document["tracks"]}
    out = []
    for block in document["blocks"]:
        for i, phase in enumerate(block["ph"]):
            out.append(
                {
                    "ph": phase,
                    "name": document["names"][block["name"][i]],
                    "ts": block["ts"][i],
                    "dur": block["dur"][i],
                    "args": block["args"][i],
                    "id": block["id"][i] if "id" in block else None,
                    "track": tracks[block["track"]],
                }
            )
    return out


def test_timeline_blocks_are_columns_of_one_track_each(recorded: Any) -> None:
    collector, _ = recorded
    document = timeline(collector)
    assert document["blocks"]
    for block in document["blocks"]:
        count = len(block["ph"])
        assert count > 0
        assert {len(block[column]) for column in ("name", "ts", "dur", "args", *(["id"] if "id" in block else []))} == {
            count
        }
        assert all(0 <= index < len(document["names"]) for index in block["name"])
        assert 0 <= block["track"] < len(document["tracks"])
    assert sorted(track["index"] for track in document["tracks"]) == list(range(len(document["tracks"])))


def test_timeline_shows_what_a_snapshot_shows(recorded: Any) -> None:
    collector, times = recorded
    document = timeline(collector)
    shown = events(document)
    for name, (started, ended) in times.items():
        mine = [event for event in shown if event["track"]["process_name"] == name]
        assert Counter(event["ph"] for event in mine) == SHOWN
        for event in mine:  # ns since the origin, as Chrome JSON's ts is µs since it
            assert started <= event["ts"] + document["origin_ns"] <= ended
    # The same events as the Chrome JSON snapshot of the same store, by phase and name.
    chrome = collector.snapshot()
    assert document["origin_ns"] == chrome["otherData"]["clock_origin_wall_ns"]
    in_chrome = Counter((e["ph"], e["name"]) for e in chrome["traceEvents"] if e["ph"] != "M")
    assert Counter((event["ph"], event["name"]) for event in shown) == in_chrome
    assert document["report"]["stored_events"] == chrome["otherData"]["stored_events"]


def test_timeline_carries_what_the_view_draws(recorded: Any) -> None:
    collector, _ = recorded
    document = timeline(collector, "?process=alpha")
    shown = events(document)
    kinds = Counter(event["track"]["kind"] for event in {event["track"]["index"]: event for event in shown}.values())
    assert kinds == {"thread": 2, "source": 1, "task": 2}  # MainThread and worker; two lanes of MainThread
    tracks = sorted(document["tracks"], key=lambda track: track["order"])
    assert [track["kind"] for track in tracks] == ["thread", "task", "task", "thread", "source"]
    assert tracks[0]["name"] == "MainThread"  # the main thread first, its lanes after it
    (message,) = [event for event in shown if event["args"] and event["args"].get("category") == "disk"]
    assert (message["name"], message["args"]["priority"]) == ("disk n(3) almost full", "warning")
    (marker,) = [event for event in shown if event["ph"] == "B"]
    assert (marker["name"], marker["dur"]) == ("Layout", -1)
    begin, end = sorted((event for event in shown if event["ph"] in "be"), key=lambda event: event["ph"])
    assert begin["id"] == end["id"] == "9"
    assert begin["track"]["name"] != end["track"]["name"]  # begun on one thread, ended on another
    parse = [event for event in shown if event["name"] == "parse"]
    requests = [event for event in shown if event["name"] == "request"]
    assert len(parse) == len(requests) == 30
    assert all(event["dur"] >= 0 for event in parse + requests)
    assert {event["track"]["pid"] for event in shown} == {event["track"]["os_pid"] for event in shown}


def test_timeline_takes_a_snapshot_s_filters(recorded: Any) -> None:
    collector, times = recorded
    alpha = timeline(collector, "?process=alpha")
    assert {track["process_name"] for track in alpha["tracks"]} == {"alpha"}
    pid = alpha["tracks"][0]["pid"]
    assert {track["process_name"] for track in timeline(collector, f"?pid={pid}")["tracks"]} == {"alpha"}
    assert {event["name"] for event in events(timeline(collector, "?name=parse"))} == {"parse"}
    assert [event["ph"] for event in events(timeline(collector, "?category=counter&process=beta"))] == ["C"] * 30
    assert len(events(timeline(collector, "?process=beta&category=span&limit=5"))) == 5
    started, _ = times["beta"]  # alpha recorded all before beta started
    before_beta = events(timeline(collector, f"?until={started}"))
    assert {event["track"]["process_name"] for event in before_beta} == {"alpha"}
    assert len(before_beta) == sum(SHOWN.values())
    empty = timeline(collector, "?process=nobody")
    assert (empty["blocks"], empty["tracks"]) == ([], [])
    assert empty["capture"]["query"] == {"process": "nobody"}


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?format=chrome", "'format'"),
        ("?bogus=1", "'bogus'"),
        ("?since=yesterday", "'since'"),
        ("?since=-1s&until=-2s", "'since'"),
        ("?limit=0", "'limit'"),
        ("?pid=x", "'pid'"),
        ("?process=alpha&process=beta", "'process'"),
    ],
)
def test_timeline_refuses_a_bad_query_naming_the_parameter(recorded: Any, query: str, named: str) -> None:
    collector, _ = recorded
    status, body = collector.get("/timeline" + query)
    assert status == 400
    assert named in body.decode()


def test_timeline_is_gzipped_when_asked(recorded: Any) -> None:
    collector, _ = recorded
    request = urllib.request.Request(collector.http_url + "/timeline", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        document = json.loads(gzip.decompress(response.read()))
    assert Counter(event["ph"] for event in events(document)) == Counter(
        {phase: 2 * count for phase, count in SHOWN.items()}
    )


def test_the_root_is_the_page_for_a_browser_and_the_endpoint_list_for_json(recorded: Any) -> None:
    collector, _ = recorded
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    status, page = collector.get("/", {"Accept": browser})
    assert status == 200 and b"<canvas" in page
    for accept in ("application/json", "*/*", "application/json, text/html;q=0.5", ""):
        status, body = collector.get("/", {"Accept": accept} if accept else {})
        assert status == 200, accept
        assert "/timeline" in {endpoint["path"] for endpoint in json.loads(body)["endpoints"]}


@pytest.mark.parametrize("path", ["/", "/ui/main.js", "/ui/view.css", "/ui/timeline.js", "/ui/flamegraph.js"])
def test_the_page_and_its_files_allow_the_collector_itself_only(recorded: Any, path: str) -> None:
    collector, _ = recorded
    request = urllib.request.Request(collector.http_url + path, headers={"Accept": "text/html"})
    with urllib.request.urlopen(request, timeout=30) as response:
        policy = response.headers["Content-Security-Policy"]
        kind = response.headers["Content-Type"]
        assert response.read()
    directives = dict(item.strip().split(" ", 1) for item in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == directives["connect-src"] == directives["style-src"] == "'self'"
    assert (
        kind.split(";")[0]
        == {"/": "text/html", ".js": "text/javascript", ".css": "text/css"}[
            path if path == "/" else path[path.rindex(".") :]
        ]
    )


def test_every_file_of_the_page_is_served_and_in_the_distribution(recorded: Any) -> None:
    # A file left out of pyproject's package data would be missing from every non-editable install.
    collector, _ = recorded
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    static = sorted((ROOT / "collector" / "http" / "static").iterdir())
    assert static
    for path in static:
        status, body = collector.get(f"/ui/{path.name}")
        assert (status, body) == (200, path.read_bytes()), path.name
        assert any(fnmatch.fnmatch(f"static/{path.name}", glob) for glob in globs["ringtrace.collector.http"])


def test_no_other_file_is_served_under_ui(recorded: Any) -> None:
    collector, _ = recorded
    for path in ("/ui/nothing.js", "/ui/..%2Fapi.py", "/ui/%2e%2e/page.py", "/ui/"):
        assert collector.get(path)[0] == 404, path


def test_with_a_token_the_page_is_served_but_no_data_without_it() -> None:
    token = "web-view-" + secrets.token_hex(16)
    collector = CollectorProcess(env={**os.environ, "RINGTRACE_TOKEN": token})
    try:
        anonymous = {"Accept": "text/html"}
        assert collector.get("/", anonymous)[0] == 200
        assert collector.get("/ui/main.js", {})[0] == 200
        for path in ("/timeline", "/sources", "/stats", "/snapshot"):
            assert collector.get(path, {})[0] == 401, path
            assert collector.get(path, {"Authorization": "Bearer wrong"})[0] == 401, path
            assert collector.get(path, {"Authorization": f"Bearer {token}"})[0] == 200, path
        # The endpoint list (JSON) is no page: it needs the token as before.
        assert collector.get("/", {"Accept": "application/json"})[0] == 401
    finally:
        collector.stop()


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", True),
        ("text/html", True),
        ("*/*", False),
        ("", False),
        ("application/json", False),
        ("application/json;q=0.9, text/html", True),
        ("text/html;q=0.5, application/json", False),
        ("text/html;q=0", False),
        ("text/html;q=bogus", False),
    ],
)
def test_which_accept_headers_get_the_page(accept: str, html: bool) -> None:
    assert wants_html(accept) is html


def _timelines_served(collector: CollectorProcess) -> float:
    """How many ``/timeline`` snapshots the collector has served, by its ``/metrics``."""
    status, body = collector.get("/metrics")
    assert status == 200
    prefix = 'ringtrace_snapshot_duration_seconds_count{format="timeline"} '
    return sum(float(line[len(prefix) :]) for line in body.decode().splitlines() if line.startswith(prefix))


def test_head_timeline_checks_the_query_and_does_no_work(recorded: Any) -> None:
    collector, _ = recorded
    collector.get("/timeline")
    before = _timelines_served(collector)
    assert before >= 1
    with urllib.request.urlopen(urllib.request.Request(collector.http_url + "/timeline", method="HEAD")) as response:
        assert response.headers["Content-Type"] == "application/json"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(collector.http_url + "/timeline?limit=0", method="HEAD"))
    refused.value.close()
    assert refused.value.code == 400
    assert _timelines_served(collector) == before
