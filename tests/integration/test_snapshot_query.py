"""``GET /snapshot`` query parameters through a real collector: filters, limit, one time origin, HEAD, gzip."""

from __future__ import annotations

import datetime
import gzip
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, RawClient
from ringtrace.client import TraceFile, read_trace_streams
from ringtrace.wire.frames import Flush

# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("snapshot_query")

RECORD = """
import os, sys, threading, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
for i in range(100):
    with tl.scope(f"early{i}"):
        pass
tl.set_priority("debug")
tl.message("engine", "debug", "step $n")(1)
tl.message("engine", "warning", "slow $n")(2)
assert tl.flush(5)
time.sleep(0.05)
mid = time.time_ns()
time.sleep(0.05)
def work():
    for i in range(10):
        tl.instant(f"late{i}")
worker = threading.Thread(target=work, name="worker")
worker.start()
worker.join()
for i in range(20):
    with tl.scope(f"late-span{i}"):
        pass
print(mid, os.getpid(), tl.flush(5))
"""
PER_PROCESS = 132  # 100 early spans, 2 messages, 10 late instants on "worker", 20 late spans


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[CollectorProcess, dict[str, tuple[int, int]]]]:
    collector = CollectorProcess()
    try:
        runs = {}
        for name in ("alpha", "beta"):
            done = subprocess.run(
                [sys.executable, "-c", RECORD, collector.tcp_address, name], capture_output=True, text=True, timeout=60
            )
            mid, pid, delivered = done.stdout.split()
            assert done.returncode == 0 and delivered == "True", done.stderr
            runs[name] = (int(mid), int(pid))
        yield collector, runs
    finally:
        collector.stop()


def shown(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] != "M"]


def names(trace: dict[str, Any]) -> list[str]:
    return sorted(e["name"] for e in shown(trace))


def test_without_filters_a_snapshot_holds_both_processes(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, runs = recorded
    trace = collector.snapshot()
    assert len(shown(trace)) == 2 * PER_PROCESS
    assert {e["pid"] for e in shown(trace)} == {pid for _, pid in runs.values()}


def test_processes_are_chosen_by_name_glob_pid_and_host(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, runs = recorded
    alpha_pid, beta_pid = runs["alpha"][1], runs["beta"][1]
    for query, pid in [("process=alpha", alpha_pid), ("process=b*", beta_pid), (f"pid={beta_pid}", beta_pid)]:
        trace = collector.snapshot("?" + query)
        assert len(shown(trace)) == PER_PROCESS, query
        assert {e["pid"] for e in shown(trace)} == {pid}, query
        assert [p["os_pid"] for p in trace["otherData"]["processes"]] == [pid], query
    assert len(shown(collector.snapshot(f"?pid={alpha_pid},{beta_pid}"))) == 2 * PER_PROCESS
    assert shown(collector.snapshot("?process=gamma")) == []
    host = collector.snapshot()["otherData"]["processes"][0]["host"]
    assert len(shown(collector.snapshot(f"?host={host}"))) == 2 * PER_PROCESS
    assert shown(collector.snapshot("?host=elsewhere")) == []


def test_tracks_categories_names_and_priorities(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, _ = recorded
    assert names(collector.snapshot("?track=worker")) == sorted([f"late{i}" for i in range(10)] * 2)
    spans = shown(collector.snapshot("?category=span"))
    assert len(spans) == 2 * 120 and {e["ph"] for e in spans} == {"X"}
    assert names(collector.snapshot("?category=engine")) == sorted(["step n(1)", "slow n(2)"] * 2)
    assert names(collector.snapshot("?category=engine&min_priority=warning")) == ["slow n(2)", "slow n(2)"]
    # Events that are not messages carry no priority: min_priority keeps them.
    assert len(shown(collector.snapshot("?min_priority=warning"))) == 2 * (PER_PROCESS - 1)
    expected = sorted(["early1", *(f"early1{i}" for i in range(10))] * 2)
    assert names(collector.snapshot("?name=early1*")) == expected
    # A message by its rendered text:
    assert names(collector.snapshot("?name=slow%20n(2)")) == ["slow n(2)", "slow n(2)"]


def test_a_time_window_in_ns_rfc3339_or_relative(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, runs = recorded
    mid = runs["alpha"][0]
    late = shown(collector.snapshot(f"?process=alpha&since={mid}"))
    expected = [f"late{i}" for i in range(10)] + [f"late-span{i}" for i in range(20)]
    assert sorted(e["name"] for e in late) == sorted(expected)
    assert len(shown(collector.snapshot(f"?process=alpha&until={mid}"))) == 102
    when = datetime.datetime.fromtimestamp(mid // 10**9, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    rfc3339 = f"{when}.{mid % 10**9:09d}Z"
    assert shown(collector.snapshot(f"?process=alpha&since={rfc3339}")) == late
    assert len(shown(collector.snapshot("?since=-1h"))) == 2 * PER_PROCESS
    assert shown(collector.snapshot("?until=-1h")) == []
    trace = collector.snapshot(f"?process=alpha&since={mid}")
    assert trace["otherData"]["capture"]["query"] == {"since_ns": mid, "process": "alpha"}
    assert trace["otherData"]["capture"]["first_frame_wall_ns"] >= mid


def test_limit_keeps_the_newest_events(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, _ = recorded
    assert names(collector.snapshot("?process=beta&limit=5")) == sorted(f"late-span{i}" for i in range(15, 20))
    newest = names(collector.snapshot("?process=alpha&limit=25"))
    assert newest == sorted([f"late-span{i}" for i in range(20)] + [f"late{i}" for i in range(5, 10)])
    assert len(shown(collector.snapshot("?limit=1000000"))) == 2 * PER_PROCESS
    assert names(collector.snapshot("?category=engine&limit=1")) == ["slow n(2)"]


def test_ts_keeps_one_origin_across_snapshots(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, runs = recorded
    whole, one = collector.snapshot(), collector.snapshot("?process=beta&limit=3")
    assert whole["otherData"]["clock_origin_wall_ns"] == one["otherData"]["clock_origin_wall_ns"]
    stamps = {(e["pid"], e["name"]): e["ts"] for e in shown(whole)}
    assert all(stamps[(e["pid"], e["name"])] == e["ts"] for e in shown(one))
    assert min(stamps.values()) >= 0 and whole["otherData"]["capture"]["events_before_origin"] == 0
    # ts is microseconds since the origin: the recorded wall clock comes back.
    origin = whole["otherData"]["clock_origin_wall_ns"]
    mid, pid = runs["alpha"]
    late0 = stamps[(pid, "late0")] * 1000 + origin
    assert mid < late0 < mid + 10 * 10**9


def test_processes_and_threads_come_with_names_and_an_order(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, runs = recorded
    meta = [e for e in collector.snapshot()["traceEvents"] if e["ph"] == "M"]
    process_order = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert process_order[runs["alpha"][1]] < process_order[runs["beta"][1]]  # in the order they connected
    alpha = runs["alpha"][1]
    thread_names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name" and e["pid"] == alpha}
    order = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index" and e["pid"] == alpha}
    assert sorted(thread_names.values()) == ["MainThread", "worker"]
    assert sorted(order, key=order.__getitem__) == sorted(thread_names, key=lambda tid: thread_names[tid])


def request(collector: CollectorProcess, path: str, method: str = "GET", **headers: str) -> Any:
    return urllib.request.urlopen(urllib.request.Request(collector.http_url + path, method=method, headers=headers))


def test_gzip_when_the_request_accepts_it(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, _ = recorded
    with request(collector, "/snapshot?process=alpha", **{"Accept-Encoding": "gzip"}) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        body = response.read()
    assert len(shown(json.loads(gzip.decompress(body)))) == PER_PROCESS
    with request(collector, "/snapshot?process=alpha", **{"Accept-Encoding": "gzip;q=0, identity"}) as response:
        assert response.headers["Content-Encoding"] is None
        assert len(shown(json.loads(response.read()))) == PER_PROCESS


def test_values_from_a_list_and_yes_no_values_are_taken_in_any_case(recorded: tuple[CollectorProcess, Any]) -> None:
    collector, _ = recorded
    assert names(collector.snapshot("?format=CHROME&messages_only=yes&min_priority=WARNING")) == ["slow n(2)"] * 2
    assert len(shown(collector.snapshot("?messages_only=Off"))) == 2 * PER_PROCESS
    status, body = collector.get("/snapshot?format=Perfetto")
    assert status == 200 and not body.startswith(b"{")
    for query, named in (("messages_only=maybe", b"'messages_only'"), ("format=json", b"'format'")):
        status, body = collector.get(f"/snapshot?{query}")
        assert status == 400 and named in body and query.partition("=")[2].encode() in body, body
        assert b"any case" in body, body


def test_head_checks_the_query_and_does_no_work(collector: CollectorProcess) -> None:
    with RawClient(collector.tcp_address) as raw:  # a client that never answers a FLUSH
        raw.sock.settimeout(0.5)
        with request(collector, "/snapshot?since=-5s&format=chrome", method="HEAD") as response:
            assert response.status == 200 and response.headers["Content-Type"] == "application/json"
            assert response.read() == b""
        with pytest.raises(TimeoutError):  # nothing was asked of the client
            raw.sock.recv(1)
        with pytest.raises(urllib.error.HTTPError) as refused:
            request(collector, "/snapshot?since=soon", method="HEAD")
        refused.value.close()
        assert refused.value.code == 400
        status, _ = collector.get("/snapshot?flush_timeout_s=0.1")  # GET does ask it to flush
        assert status == 200
        raw.sock.settimeout(10)
        assert isinstance(raw.next_frame(), Flush)


def native(collector: CollectorProcess, query: str, tmp_path: Path) -> list[TraceFile]:
    status, body = collector.get("/snapshot?format=native&" + query)
    assert status == 200, body
    path = tmp_path / "snapshot.rttrace"
    path.write_bytes(body)
    streams = read_trace_streams(path)
    assert all(stream.error is None for stream in streams), [stream.error for stream in streams]
    return streams


def test_native_snapshots_read_back_with_the_same_selection(recorded: Any, tmp_path: Path) -> None:
    collector, _ = recorded
    whole = native(collector, "", tmp_path)
    assert {s.hello.process_name for s in whole if s.hello} == {"alpha", "beta"}
    assert sum(len(s.events) for s in whole) == 2 * PER_PROCESS
    starts = {(s.hello.process_name, e.name): e.ts_ns for s in whole if s.hello for e in s.events}
    for query in ["process=alpha", "track=worker", "name=early1*", "category=engine&min_priority=warning", "limit=7"]:
        chrome = collector.snapshot("?" + query)
        picked = native(collector, query, tmp_path)
        assert sorted(e.name for s in picked for e in s.events) == names(chrome), query
        # Frames cut down to their selected events keep each event's own timestamp.
        assert all(starts[(s.hello.process_name, e.name)] == e.ts_ns for s in picked if s.hello for e in s.events)
    assert native(collector, "process=gamma", tmp_path) == []
