"""The HTTP API besides /snapshot, through a real collector: /, /sources, /stats, /metrics, /priority, /clear."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from collector_process import CollectorProcess, events, run_script
from prometheus_client.parser import text_string_to_metric_families
from ringtrace.collector.http.api import TAIL_KEEPALIVE_S
from waiting import wait_for

# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("http_api")

RECORD = """
import sys, threading, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
started = time.time_ns()
gpu = tl.source("GPU queue")
for i in range(50):
    with tl.scope("step", i=i):
        gpu.open()
        gpu.close()
worker = threading.Thread(target=lambda: [tl.instant("tick") for _ in range(7)], name="worker")
worker.start()
worker.join()
assert tl.flush(5)
print(started, time.time_ns())
"""
#: What RECORD stores: 50 spans and 7 instants on threads, 50 opens and 50 closes on the source.
PER_PROCESS = 157

#: A client that logs a debug message every 10 ms (off at first: its priority is info) until told to stop.
CHATTY = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="chatty")
log = tl.message("engine", "debug", "step $n")
assert tl.flush(5)
print("ready", flush=True)
n = 0
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    log(n)
    n += 1
    time.sleep(0.01)
"""


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


def test_the_index_lists_every_endpoint_and_each_answers(recorded: Any) -> None:
    collector, _ = recorded
    listed = collector.json("/")["endpoints"]
    assert {e["path"] for e in listed} >= {"/snapshot", "/sources", "/stats", "/metrics", "/priority", "/clear"}
    for endpoint in listed:
        # (a live tail does not end; a path with an id is tried where there is one: test_incidents_http.py)
        if endpoint["method"] == "GET" and endpoint["path"] != "/stream" and "{" not in endpoint["path"]:
            assert collector.get(endpoint["path"])[0] == 200, endpoint
    with urllib.request.urlopen(collector.http_url + "/stream", timeout=60) as tail:
        assert tail.status == 200 and tail.headers["Content-Type"] == "text/event-stream"


def test_sources_list_every_process_thread_and_source_with_what_is_held_and_when(recorded: Any) -> None:
    collector, runs = recorded
    processes = {p["process_name"]: p for p in collector.json("/sources")["processes"]}
    assert set(processes) == {"alpha", "beta"}
    for name, (started, ended) in runs.items():
        process = processes[name]
        assert process["connections"] == 0  # exited, still listed
        assert process["stored_events"] == process["received_events"] == PER_PROCESS
        assert process["held_bytes"] > 0
        assert started <= process["first_wall_ns"] <= process["last_wall_ns"] <= ended
        tracks = {t["name"]: t for t in process["tracks"]}
        assert tracks["GPU queue"]["kind"] == "source"
        assert tracks["GPU queue"]["stored_events"] == 100
        assert tracks["MainThread"]["kind"] == "thread" and tracks["MainThread"]["stored_events"] == 50
        assert tracks["worker"]["stored_events"] == 7
        assert all(started <= t["first_wall_ns"] <= t["last_wall_ns"] <= ended for t in tracks.values())
        assert sum(t["stored_bytes"] for t in tracks.values()) == process["stored_bytes"]


def test_sources_take_process_filters_and_refuse_others(recorded: Any) -> None:
    collector, _ = recorded
    beta = collector.json("/sources?process=bet*")["processes"]
    assert [p["process_name"] for p in beta] == ["beta"]
    # (the same process: its row's counters may move on between the two answers, as its segment settles)
    by_pid = collector.json(f"/sources?pid={beta[0]['pid']}")["processes"]
    assert [(p["pid"], p["process_name"], p["host"]) for p in by_pid] == [(beta[0]["pid"], "beta", beta[0]["host"])]
    status, body = collector.get("/sources?track=worker")
    assert status == 400 and b"'track'" in body
    status, body = collector.get("/sources?pid=one")
    assert status == 400 and b"'pid'" in body


def test_stats_and_metrics_add_up_to_what_was_received(recorded: Any) -> None:
    collector, _ = recorded
    stats = collector.json("/stats")
    assert stats["received_events"] == 2 * PER_PROCESS
    lost = sum(stats[f"{reason}_events"] for reason in ("overwritten", "capped", "discarded", "cleared"))
    assert stats["received_events"] == stats["stored_events"] + lost
    assert stats["connections_accepted"] >= 2 and stats["processes"] == 2
    assert stats["ingest_bytes"] > stats["received_bytes"] > 0  # frames besides EVENTS: HELLO, SCHEMA, ...
    status, text = collector.get("/metrics")
    assert status == 200
    metrics = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }
    assert metrics[("ringtrace_received_events_total", ())] == stats["received_events"]
    assert metrics[("ringtrace_stored_events", ())] == stats["stored_events"]
    assert metrics[("ringtrace_lost_events_total", (("reason", "overwritten"),))] == stats["overwritten_events"]
    assert metrics[("ringtrace_processes", ())] == 2
    assert metrics[("ringtrace_ingest_bytes_total", ())] >= stats["ingest_bytes"]
    assert metrics[("ringtrace_event_loop_lag_seconds_count", ())] > 0  # looked at since it started
    assert 0 <= collector.json("/healthz")["event_loop_lag_max_ms"] < 60_000
    collector.snapshot()
    status, text = collector.get("/metrics")
    served = [
        sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
        if sample.name == "ringtrace_snapshot_duration_seconds_count" and sample.labels == {"format": "chrome"}
    ]
    assert served and served[0] >= 1


@pytest.mark.parametrize("path", ["/stats?x=1", "/metrics?x=1", "/?x=1"])
def test_endpoints_without_parameters_refuse_any(recorded: Any, path: str) -> None:
    status, body = recorded[0].get(path)
    assert status == 400 and b"'x'" in body


def test_priority_turns_on_a_connected_process_s_messages(collector: CollectorProcess) -> None:
    chatty = subprocess.Popen([sys.executable, "-c", CHATTY, collector.tcp_address], stdout=subprocess.PIPE, text=True)
    try:
        assert chatty.stdout is not None and chatty.stdout.readline() == "ready\n"
        status, body = collector.post("/priority", {"priority": "trace+", "bogus": "1"})
        assert status == 400 and b"'bogus'" in body
        status, body = collector.post("/priority?priority=loud")
        assert status == 400 and b"'priority'" in body and b"trace+++" in body and b"'loud'" in body
        status, body = collector.post("/priority?priority=debug&process=nobody")
        assert status == 404 and b"nobody" in body
        assert collector.snapshot("?category=engine&flush_timeout_s=5")["otherData"]["clients_flushed"] == 1
        assert not events(collector.snapshot("?category=engine"), "i")
        status, body = collector.post("/priority", {"priority": "DEBUG", "process": "chatty"})  # any case
        assert status == 200, body
        assert [p["process_name"] for p in json.loads(body)["processes"]] == ["chatty"]
        logged = wait_for(
            lambda: events(collector.snapshot("?category=engine&flush_timeout_s=5"), "i"),
            timeout_s=30,
            what="a debug message stored",
        )
        assert logged[0]["name"].startswith("step ")
        rate = lambda: collector.json("/sources?process=chatty")["processes"][0]["events_per_s"]  # noqa: E731
        wait_for(rate, until=lambda r: (r or 0) > 0, timeout_s=30, what="a rate")  # messages flow now: the rate says so
    finally:
        chatty.kill()
        chatty.wait()
        assert chatty.stdout is not None
        chatty.stdout.close()


def test_clear_removes_what_is_stored_and_counts_it(collector: CollectorProcess) -> None:
    record(collector, "alpha")
    record(collector, "beta")
    status, body = collector.post("/clear?process=alpha")
    assert status == 200, body
    assert json.loads(body)["cleared_events"] == PER_PROCESS
    trace = collector.snapshot()
    names = {e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    assert names == {"beta"}
    alpha = next(p for p in collector.json("/sources")["processes"] if p["process_name"] == "alpha")
    assert {t["name"] for t in alpha["tracks"]} == {"MainThread", "worker", "GPU queue"}  # named, though none held
    assert not any(t["live"] for t in alpha["tracks"])  # it exited
    other = trace["otherData"]
    assert other["cleared_events"] == PER_PROCESS and other["stored_events"] == PER_PROCESS
    assert other["received_events"] == other["stored_events"] + other["cleared_events"]
    record(collector, "alpha")  # stored again after a clear
    status, body = collector.post("/clear", {})
    assert status == 200 and json.loads(body)["cleared_events"] == 2 * PER_PROCESS
    assert collector.json("/stats")["stored_events"] == 0
    status, body = collector.post("/clear?limit=3")
    assert status == 400 and b"'limit'" in body


def _post_body(collector: CollectorProcess, path: str, content_type: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(
        collector.http_url + path, data=body, method="POST", headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


@pytest.mark.parametrize("path", ["/clear", "/pop", "/priority"])
def test_a_form_body_that_cannot_be_read_gets_a_400_and_clears_nothing(collector: CollectorProcess, path: str) -> None:
    record(collector, "kept")
    bodies = [
        ("application/x-www-form-urlencoded", b"process=\xff"),  # not UTF-8
        ("multipart/form-data; boundary=xx", b"process=kept"),  # no boundary in it
        ("multipart/form-data", b"--xx\r\n"),  # no boundary given
        ("application/x-www-form-urlencoded; charset=no-such-charset", b"process=kept"),  # a charset unknown
        (  # a field in a charset unknown
            "multipart/form-data; boundary=xx",
            b'--xx\r\nContent-Disposition: form-data; name="process"\r\n'
            b"Content-Type: text/plain; charset=no-such-charset\r\n\r\nkept\r\n--xx--\r\n",
        ),
        (  # a field in a transfer encoding unknown
            "multipart/form-data; boundary=xx",
            b'--xx\r\nContent-Disposition: form-data; name="process"\r\n'
            b"Content-Transfer-Encoding: no-such-encoding\r\n\r\nkept\r\n--xx--\r\n",
        ),
        (  # a file, not a parameter: as if no filter were given, it would select every process
            "multipart/form-data; boundary=xx",
            b'--xx\r\nContent-Disposition: form-data; name="process"; filename="p.txt"\r\n'
            b"Content-Type: text/plain\r\n\r\nnobody\r\n--xx--\r\n",
        ),
    ]
    for content_type, body in bodies:
        status, answer = _post_body(collector, path, content_type, body)
        assert status == 400 and answer.count(b"\n") == 1, (content_type, body, status, answer)
        assert b"form" in answer, answer
    assert collector.json("/stats")["stored_events"] == PER_PROCESS
    status, answer = _post_body(collector, "/clear", "application/x-www-form-urlencoded", b"process=kept")
    assert status == 200 and json.loads(answer)["cleared_events"] == PER_PROCESS


class LiveTail:
    """``GET /stream`` read on a thread: its events, as they come."""

    def __init__(self, collector: CollectorProcess, query: str = "") -> None:
        self.response = urllib.request.urlopen(collector.http_url + "/stream" + query, timeout=60)
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.cleared: list[dict[str, Any]] = []
        self.first_line = self.response.readline()  # the tail has begun once it says so
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        event = "message"
        with self.response:  # until the collector ends it
            for line in self.response:
                if line.startswith(b"event: "):
                    event = line[7:].strip().decode()
                elif line.startswith(b"data: "):
                    {"message": self.events, "cleared": self.cleared}.get(event, self.errors).append(
                        json.loads(line[6:])
                    )
                    event = "message"


def tailed(tail: LiveTail, process: str, count: int) -> None:
    """Until ``tail`` has read ``count`` events of ``process``."""
    wait_for(
        lambda: sum(e["process"] == process for e in tail.events),
        until=lambda n: n == count,
        timeout_s=30,
        what=f"{count} events of {process} tailed",
    )


def test_a_live_tail_gets_each_event_stored_after_it_connected_once(collector: CollectorProcess) -> None:
    record(collector, "before")
    tail = LiveTail(collector, "?category=span")
    assert tail.first_line.startswith(b":")
    record(collector, "after")
    record(collector, "later")
    tailed(tail, "later", 50)
    by_process = {name: [e for e in tail.events if e["process"] == name] for name in ("before", "after")}
    assert not by_process["before"]
    assert sorted(e["args"]["i"] for e in by_process["after"]) == list(range(50))
    span = by_process["after"][0]
    assert (span["category"], span["name"], span["track"]) == ("span", "step", "MainThread")
    assert span["dur_ns"] >= 0 and span["wall_ns"] > 0
    assert not tail.errors
    collector.stop()  # SIGTERM: an open tail does not hold up the shutdown (stop() would kill it after 10 s)
    assert collector.proc.returncode == 0


def test_a_live_tail_is_told_of_events_cleared_before_it_read_them_and_goes_on(collector: CollectorProcess) -> None:
    tail = LiveTail(collector)
    record(collector, "read")
    tailed(tail, "read", PER_PROCESS)
    for _ in range(3):  # cleared at once: each event is read before the clear, or told of as cleared
        record(collector, "cleared")
        status, _ = collector.post("/clear")
        assert status == 200
    record(collector, "after")
    tailed(tail, "after", PER_PROCESS)
    told = sum(notice["events"] for notice in tail.cleared)
    assert sum(e["process"] == "cleared" for e in tail.events) + told == 3 * PER_PROCESS
    assert not tail.errors


def test_a_live_tail_is_not_told_of_clears_made_before_it_began(collector: CollectorProcess) -> None:
    record(collector, "earlier")
    status, _ = collector.post("/clear")  # the store is empty when the tail begins
    assert status == 200
    tail = LiveTail(collector)
    record(collector, "after")
    tailed(tail, "after", PER_PROCESS)
    assert tail.cleared == []  # the clear before it began is not its news
    record(collector, "cleared")
    status, _ = collector.post("/clear?process=cleared")
    assert status == 200
    record(collector, "last")
    tailed(tail, "last", PER_PROCESS)
    told = sum(notice["events"] for notice in tail.cleared)
    assert sum(e["process"] == "cleared" for e in tail.events) + told == PER_PROCESS  # one after it began is
    assert not tail.errors


def test_a_live_tail_whose_reader_left_frees_its_slot_at_once(collector: CollectorProcess) -> None:
    readers = [urllib.request.urlopen(collector.http_url + "/stream", timeout=30) for _ in range(16)]
    for reader in readers:
        assert reader.readline().startswith(b":")  # begun: every slot is taken
    status, body = collector.get("/stream")
    assert status == 503 and b"max_tails=16" in body
    for reader in readers:
        reader.close()

    def tails_running() -> list[float]:
        with urllib.request.urlopen(collector.http_url + "/metrics", timeout=30) as response:
            return [
                sample.value
                for family in text_string_to_metric_families(response.read().decode())
                for sample in family.samples
                if sample.name == "ringtrace_tails_running"
            ]

    # Nothing is written to them meanwhile (no events come): before, the slots stayed taken until the keepalive.
    wait_for(
        tails_running,
        until=lambda running: running == [0],
        timeout_s=TAIL_KEEPALIVE_S / 2,
        what="every tail's slot given back",
        interval_s=0.1,
    )


def test_a_live_tail_refuses_what_needs_the_whole_store(collector: CollectorProcess) -> None:
    for query in ("?limit=5", "?format=native", "?flush_timeout_s=1", "?since=yesterday"):
        status, body = collector.get("/stream" + query)
        assert status == 400, query
        assert query[1:].split("=")[0].encode() in body


POPPED = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
for line in sys.stdin:
    step = line.strip()
    if step == "first":
        tl.marker("Load", "start", page=1)
        tl.marker("Paint", "instant")
        with tl.scope("before-pop"):
            pass
    elif step == "second":
        tl.marker("Load", "end", ok=True)
        with tl.scope("after-pop"):
            pass
    elif step == "many":
        for i in range(10_050):
            tl.marker(f"never-ended-{i}", "start")
    print(tl.flush(5), flush=True)
"""


def test_pop_returns_and_removes_what_is_held_and_open_markers_wait_for_the_next_pop(
    collector: CollectorProcess,
) -> None:
    client = subprocess.Popen(
        [sys.executable, "-c", POPPED, collector.tcp_address, "popped"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert client.stdin is not None and client.stdout is not None

    def step(name: str) -> None:
        assert client.stdin is not None and client.stdout is not None
        client.stdin.write(name + "\n")
        client.stdin.flush()
        assert client.stdout.readline() == "True\n"

    try:
        record(collector, "bystander")
        step("first")
        status, body = collector.post("/pop?process=popped")
        assert status == 200, body
        first = [e for e in json.loads(body)["traceEvents"] if e["ph"] != "M"]
        assert sorted(e["name"] for e in first) == ["Paint", "before-pop"]  # "Load" waits for its end
        assert not [e for e in events(collector.snapshot(), "X") if e["name"] == "before-pop"]  # removed
        step("second")
        status, body = collector.post("/pop", {"process": "popped"})
        second = {e["name"]: e for e in json.loads(body)["traceEvents"] if e["ph"] != "M"}
        assert set(second) == {"Load", "after-pop"}
        load = second["Load"]
        assert load["ph"] == "X" and load["dur"] > 0 and load["args"] == {"page": 1, "ok": True}
        assert json.loads(body)["otherData"]["unmatched_marker_ends"] == 0
        status, body = collector.post("/pop?process=popped")
        assert [e for e in json.loads(body)["traceEvents"] if e["ph"] != "M"] == []
        step("many")  # more starts than a pop carries: the oldest past 10,000 are shown open-ended
        status, body = collector.post("/pop?process=popped")
        shown = [e for e in json.loads(body)["traceEvents"] if e["ph"] != "M"]
        assert [e["name"] for e in shown] == [f"never-ended-{i}" for i in range(50)]
        assert all(e["ph"] == "B" for e in shown)
        bystander = [e for e in events(collector.snapshot(), "X") if e["name"] == "step"]
        assert len(bystander) == 50  # another process's events stay
        status, body = collector.post("/pop?limit=3")
        assert status == 400 and b"'limit'" in body
    finally:
        client.stdin.close()
        client.wait(30)
        client.stdout.close()
