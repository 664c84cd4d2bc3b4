"""``tl.incident`` through a real collector: a client process that records one (and calls no ``flush()``) has it
stored long before its flusher's interval would have come round, and every reader shows it as an incident: Chrome
JSON and Perfetto (an instant of category ``incident``, its reason among its args), the web view's ``/timeline`` (its
block's ``cat`` column) and the live tail (``GET /stream``)."""

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
from perfetto_model import PerfettoTrace
from waiting import wait_for

pytestmark = pytest.mark.xdist_group("incident_events")

#: Records an incident inside a span, then waits, connected, for a line on stdin: it never calls flush(), and its
#: flusher sweeps once a minute (argv[2]) unless woken.
RECORD = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="shop", batch_interval_s=float(sys.argv[2]))
with tl.scope("checkout", order=7):
    tl.incident("payment declined", order=7, code=503)
print("recorded", flush=True)
sys.stdin.readline()
"""
#: The flusher's interval in RECORD: far past the test's deadline for the incident to be stored.
SLOW_INTERVAL_S = 600.0
PAYMENT = {"reason": "payment declined", "order": 7, "code": 503}


class Tail:
    """``GET /stream`` read on a thread: its events, as they come."""

    def __init__(self, collector: CollectorProcess, query: str) -> None:
        self.response = urllib.request.urlopen(collector.http_url + "/stream" + query, timeout=60)
        self.events: list[dict[str, Any]] = []
        self.response.readline()  # its banner: the tail has begun
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with self.response:
            for line in self.response:
                if line.startswith(b"data: "):
                    self.events.append(json.loads(line[6:]))


@pytest.fixture(scope="module")
def stored() -> Iterator[tuple[CollectorProcess, Tail]]:
    collector = CollectorProcess()
    tail = Tail(collector, "?category=incident")
    program = subprocess.Popen(
        [sys.executable, "-c", RECORD, collector.tcp_address, str(SLOW_INTERVAL_S)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert program.stdout is not None and program.stdout.readline() == "recorded\n"
        # Read on the live tail, which asks no client to flush (a snapshot would: it would bring the incident too).
        wait_for(
            lambda: tail.events,
            timeout_s=60,  # (a tenth of the flusher's interval: only its wake-up brings the incident this soon)
            what="the incident stored without a flush(), its flusher woken",
        )
        yield collector, tail
    finally:
        _, stderr = program.communicate("\n", timeout=60)
        assert program.returncode == 0, stderr
        collector.stop()


def test_chrome_json_shows_the_incident_as_an_instant_of_category_incident(stored: Any) -> None:
    collector, _ = stored
    (incident,) = [e for e in events(collector.snapshot(), "i") if e.get("cat") == "incident"]
    assert (incident["name"], incident["s"], incident["args"]) == ("payment declined", "t", PAYMENT)


def test_perfetto_shows_the_incident_as_an_instant_of_category_incident(stored: Any) -> None:
    collector, _ = stored
    status, body = collector.get("/snapshot?format=perfetto")
    assert status == 200
    shown = [(i.name, i.args, i.categories) for i in PerfettoTrace(body).instants if i.categories]
    assert shown == [("payment declined", PAYMENT, ("incident",))]


def test_the_web_views_timeline_marks_the_incident_in_its_block(stored: Any) -> None:
    collector, _ = stored
    document = collector.json("/timeline")
    names = document["names"]
    marked = [
        (names[block["name"][i]], block["args"][i])
        for block in document["blocks"]
        for i, category in enumerate(block.get("cat", ()))
        if category == "incident"
    ]
    assert marked == [("payment declined", PAYMENT)]


def test_the_live_tail_shows_the_incident_with_its_reason(stored: Any) -> None:
    _, tail = stored
    (incident,) = tail.events
    assert (incident["kind"], incident["category"], incident["name"]) == ("incident", "incident", "payment declined")
    assert incident["args"] == PAYMENT and incident["process"] == "shop"


#: Four threads each recording 25,000 incidents with a 200-character arg, as fast as they can, into a small queue.
FLOOD = """
import sys, threading, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="flood", max_queue_bytes=1 << 20)
def flood(k):
    for i in range(25_000):
        tl.incident(f"flood {i % 100}", k=k, i=i, pad="x" * 200)
threads = [threading.Thread(target=flood, args=(k,)) for k in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
tl.flush(30)
"""
LOSSES = ("overwritten_events", "capped_events", "discarded_events", "client_dropped_events", "rejected_events")


def test_a_flood_of_incidents_is_just_events_each_stored_or_counted(collector: CollectorProcess) -> None:
    run_script(collector, FLOOD)  # (exits 0: nothing raised into the program)

    def accounted() -> int:
        (process,) = collector.json("/sources?process=flood")["processes"]
        return int(process["stored_events"]) + sum(int(process.get(key) or 0) for key in LOSSES)

    wait_for(accounted, until=lambda n: n == 100_000, timeout_s=60, what="every incident stored or counted lost")
    assert collector.json("/healthz")["stored_events"] > 0
