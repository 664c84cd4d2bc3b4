"""``GET /snapshot?format=perfetto`` through a real collector, read back with Perfetto's own protobuf definitions:
tracks, slices, instants, counters and attributes are those of the Chrome snapshot of the same store, filter by filter.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, metadata
from perfetto_model import PerfettoTrace, Slice, pb
from ringtrace.collector.command.main import main
from ringtrace.collector.read.event_walk import TOTALS

# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("snapshot_perfetto")

RECORD = """
import asyncio, os, sys, threading, time, ringtrace.client
from ringtrace.client import Event, string, u16

class Packet(Event):
    size: u16
    proto: string

tl = ringtrace.client.connect(sys.argv[1], process_name="perfetto-demo")
gpu = tl.source("GPU queue")
slow = tl.message("engine", "warning", "slow $n")
with tl.scope("setup", step=1):
    with tl.scope("load", path="/etc", sizes=[1, 2.5, None], deep={"a": {"b": True}}):
        tl.instant("loaded", files=3)
tl.counter("queue depth", 3)
tl.async_begin("request", 42, path="/users")
gpu.open()
gpu.open()
gpu.close()
gpu.close()
slow(2)
tl.push(Packet(size=1500, proto="udp"))
with tl.marker_scope("Style", elements=120):
    pass
tl.marker("Layout", "start")
assert tl.flush(5)
time.sleep(0.05)
mid = time.time_ns()
time.sleep(0.05)

def work():
    for i in range(5):
        with tl.scope("chunk", i=i):
            pass
    tl.counter("queue depth", 5)
    tl.counter("queue depth", 2.5)
    tl.async_end("request", 42, status=200)

worker = threading.Thread(target=work, name="worker")
worker.start()
worker.join()

async def task(n):
    with tl.scope("fetch", n=n):
        await asyncio.sleep(0.001)

async def main():
    await asyncio.gather(task(1), task(2))

asyncio.run(main())
print(os.getpid(), mid, tl.flush(5))
"""


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[CollectorProcess, int, int]]:
    collector = CollectorProcess()
    try:
        done = subprocess.run(
            [sys.executable, "-c", RECORD, collector.tcp_address], capture_output=True, text=True, timeout=60
        )
        pid, mid, delivered = done.stdout.split()
        assert done.returncode == 0 and delivered == "True", done.stderr
        yield collector, int(pid), int(mid)
    finally:
        collector.stop()


def perfetto(collector: CollectorProcess, query: str = "") -> PerfettoTrace:
    status, body = collector.get("/snapshot?format=perfetto" + (f"&{query}" if query else ""))
    assert status == 200, body
    return PerfettoTrace(body)


def chrome(collector: CollectorProcess, query: str = "") -> dict[str, Any]:
    return collector.snapshot("?" + query if query else "")


Record = tuple[Any, ...]


def chrome_records(trace: dict[str, Any]) -> list[Record]:
    """What a Chrome snapshot shows, in wall-clock ns: slices (async ones by name and id), instants, counter values,
    each with its track's name and its args; async ends whose begin it does not hold."""
    origin = trace["otherData"]["clock_origin_wall_ns"]
    names = metadata(trace, "thread_name")

    def ns(us: float) -> int:
        return origin + round(us * 1000)

    records: list[Record] = []
    began: dict[tuple[int, str, str], dict[str, Any]] = {}
    for e in trace["traceEvents"]:
        label, args = names.get((e["pid"], e["tid"])), e.get("args", {})
        if e["ph"] == "X":
            records.append(("slice", label, e["name"], ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000), args))
        elif e["ph"] == "B":
            records.append(("slice", label, e["name"], ns(e["ts"]), None, args))
        elif e["ph"] == "i":
            records.append(("instant", label, e["name"], ns(e["ts"]), e.get("cat"), args))
        elif e["ph"] == "C":  # a counter's track: its name and id (the track it was recorded on)
            assert e["id"] == str(e["tid"])
            records += [("counter", label, e["name"] if k == "value" else f"{e['name']} {k}", ns(e["ts"]), v)
                        for k, v in args.items()]  # fmt: skip
        elif e["ph"] == "b":
            began[(e["pid"], e["id"], e["name"])] = e
        elif e["ph"] == "e":
            begin = began.pop((e["pid"], e["id"], e["name"]), None)
            if begin is None:
                records.append(("unmatched end", e["name"], ns(e["ts"])))
            else:
                both = {**begin.get("args", {}), **args}
                records.append(("async", begin["name"], ns(begin["ts"]), ns(e["ts"]), both))
    records += [("async", e["name"], ns(e["ts"]), None, e.get("args", {})) for e in began.values()]
    return sorted(records, key=repr)


def perfetto_records(trace: PerfettoTrace, thread_names: set[str]) -> list[Record]:
    """The same, read from a Perfetto trace: a slice on a track no Chrome thread is named after is an async one."""
    records: list[Record] = []
    for s in trace.slices:
        label = trace.label(s.track)
        if label in thread_names:
            records.append(("slice", label, s.name, s.start_ns, s.end_ns, s.args))
        else:
            records.append(("async", s.name, s.start_ns, s.end_ns, s.args))
    for i in trace.instants:
        records.append(("instant", trace.label(i.track), i.name, i.ts_ns, i.categories[0] if i.categories else None,
                        i.args))  # fmt: skip
    records += [("counter", trace.label(trace.tracks[c.track].parent), trace.label(c.track), c.ts_ns, c.value)
                for c in trace.counters]  # fmt: skip
    records += [("unmatched end", name, ts) for _, name, ts in trace.unmatched_ends]
    return sorted(records, key=repr)


def thread_names(trace: dict[str, Any]) -> set[str]:
    return set(metadata(trace, "thread_name").values())


def assert_nested(trace: PerfettoTrace) -> None:
    """Every slice lies within the slice it is nested in."""
    by_track: dict[int, list[Slice]] = {}
    for s in trace.slices:
        by_track.setdefault(s.track, []).append(s)
    for slices in by_track.values():
        open_: list[Slice] = []
        for s in sorted(slices, key=lambda s: (s.start_ns, s.depth)):
            open_ = open_[: s.depth]
            assert len(open_) == s.depth, s
            if open_ and open_[-1].end_ns is not None and s.end_ns is not None:
                assert open_[-1].start_ns <= s.start_ns and s.end_ns <= open_[-1].end_ns, (open_[-1], s)
            open_.append(s)


def test_processes_threads_lanes_sources_and_counters_are_tracks(recorded: tuple[CollectorProcess, int, int]) -> None:
    collector, pid, _ = recorded
    trace, json_trace = perfetto(collector), chrome(collector)
    tracks = list(trace.tracks.values())
    (process,) = [t for t in tracks if t.kind == "process"]
    host = json_trace["otherData"]["processes"][0]["host"]
    assert (process.pid, process.name, list(process.descriptor.process.process_labels)) == (
        pid,
        "perfetto-demo",
        [host],
    )
    threads = {t.name: t for t in tracks if t.kind == "thread"}
    assert set(threads) == {"MainThread", "worker"}
    chrome_threads = {(p, tid): name for (p, tid), name in metadata(json_trace, "thread_name").items() if tid < 2**31}
    assert {(t.pid, t.descriptor.thread.tid): t.name for t in threads.values()} == chrome_threads
    # In the order they were declared, as Chrome's thread_sort_index has them.
    assert trace.root.process_ordering == pb.TrackDescriptor.PROCESS_ORDERING_EXPLICIT
    assert trace.root.thread_ordering == pb.TrackDescriptor.THREAD_ORDERING_EXPLICIT
    ranks = {name: t.descriptor.sibling_order_rank for name, t in threads.items()}
    assert ranks["MainThread"] < ranks["worker"]
    others = {t.name: t for t in tracks if t.kind == "track"}
    lanes = {name for name in others if name.startswith("MainThread tasks")}
    assert lanes == {"MainThread tasks [1]", "MainThread tasks [2]"}
    assert all(others[name].parent == threads["MainThread"].uuid for name in lanes)
    assert others["GPU queue"].parent == process.uuid
    counters = [t for t in tracks if t.kind == "counter"]  # one per thread that set it, under its thread
    assert sorted((t.name, t.parent) for t in counters) == sorted(
        ("queue depth", threads[name].uuid) for name in ("MainThread", "worker")
    )
    assert all(trace.pid(t.uuid) == pid for t in tracks)
    assert thread_names(json_trace) == {t.name for t in tracks if t.kind in ("thread", "track")} - {"request"}


def test_the_root_track_uuid_0_carries_the_ordering_alone_and_no_event_is_on_it(
    recorded: tuple[CollectorProcess, int, int],
) -> None:
    # Perfetto's track_descriptor.proto: process_ordering and thread_ordering are "only valid on the root track
    # descriptor (uuid = 0)", and its trace processor reads them there alone; the ranks are on each process and thread.
    trace = perfetto(recorded[0])
    described = [packet.track_descriptor for packet in trace.packets if packet.HasField("track_descriptor")]
    (root,) = [d for d in described if d.uuid == 0]
    assert root is described[0] and root.HasField("uuid")  # written, not left out as a default
    assert sorted(field.name for field, _ in root.ListFields()) == ["process_ordering", "thread_ordering", "uuid"]
    on_tracks = [packet.track_event for packet in trace.packets if packet.HasField("track_event")]
    assert on_tracks and all(event.HasField("track_uuid") and event.track_uuid for event in on_tracks)
    ordered = [d for d in described if d.HasField("process") or d.HasField("thread")]
    assert ordered and all(d.HasField("sibling_order_rank") for d in ordered)


def test_the_events_are_those_of_the_chrome_snapshot(recorded: tuple[CollectorProcess, int, int]) -> None:
    collector, _, _ = recorded
    trace, json_trace = perfetto(collector), chrome(collector)
    records = perfetto_records(trace, thread_names(json_trace))
    assert records == chrome_records(json_trace)
    assert_nested(trace)
    slices = {s.name: s for s in trace.slices}
    assert slices["load"].depth == 1 and slices["setup"].depth == 0
    assert slices["load"].args == {"path": "/etc", "sizes": [1, 2.5, None], "deep": {"a": {"b": True}}}
    gpu = sorted((s for s in trace.slices if s.name == "GPU queue"), key=lambda s: s.depth)
    assert [(s.depth, s.args) for s in gpu] == [(0, {}), (1, {"activity": 2, "overlap": True})]
    assert slices["Layout"].end_ns is None and "not ended" in slices["Layout"].args["ringtrace"]
    request = slices["request"]
    assert request.args == {"path": "/users", "status": 200} and request.end_ns is not None
    assert request.categories == ["async"]
    (message,) = [i for i in trace.instants if i.categories == ("engine",)]
    assert (message.name, message.args) == ("slow n(2)", {"category": "engine", "priority": "warning", "n": 2})
    (packet,) = [i for i in trace.instants if i.name == "Packet"]
    assert packet.args["size"] == 1500 and packet.args["proto"] == "udp"
    assert sorted(c.value for c in trace.counters) == [2.5, 3, 5]
    assert trace.unmatched_ends == []


@pytest.mark.parametrize(
    "query",
    [
        "pid={pid}",
        "process=perfetto-*",
        "process=other",
        "since={mid}",
        "until={mid}",
        "limit=5",
        "category=span",
        "category=engine&min_priority=warning",
        "category=async",
        "track=worker",
        "track=GPU*",
        "name=chunk*",
        "since={mid}&limit=3",
    ],
)
def test_filters_select_the_same_events_as_in_chrome(recorded: tuple[CollectorProcess, int, int], query: str) -> None:
    collector, pid, mid = recorded
    query = query.format(pid=pid, mid=mid)
    json_trace = chrome(collector, query)
    expected = chrome_records(json_trace)
    assert perfetto_records(perfetto(collector, query), thread_names(json_trace)) == expected
    if query in (f"since={mid}", f"until={mid}"):  # the async slice began before and ended after: shown whole
        assert [r[:2] for r in expected if r[0] == "unmatched end"] == []
        (whole,) = [r for r in expected if r[0] == "async"]
        assert whole[1] == "request" and whole[2] < mid < whole[3]


def test_loss_counters_and_the_capture_window_are_the_traces_attributes(
    recorded: tuple[CollectorProcess, int, int],
) -> None:
    collector, pid, mid = recorded
    query = f"pid={pid}&since={mid}"
    attributes = perfetto(collector, query).attributes
    other = chrome(collector, query)["otherData"]
    report = json.loads(str(attributes["ringtrace.report"]))
    assert {name: report[name] for name in TOTALS} == {name: other[name] for name in TOTALS}
    assert report["processes"] == other["processes"] and report["stored_events"] > 0
    assert report["capture"] == {k: v for k, v in other["capture"].items() if k != "events_before_origin"}
    assert report["capture"]["query"] == {"since_ns": mid, "pid": [pid]}
    assert all(attributes[f"ringtrace.{name}"] == other[name] for name in TOTALS)
    # (frames before the window are read too: those of pairs that may reach into it)
    assert attributes["ringtrace.first_frame_wall_ns"] == other["capture"]["first_frame_wall_ns"]
    assert attributes["ringtrace.collector_version"] == other["collector_version"]
    assert json.loads(str(attributes["ringtrace.query"])) == {"since_ns": mid, "pid": [pid]}


def test_gzip_when_accepted_and_head(recorded: tuple[CollectorProcess, int, int]) -> None:
    collector, _, _ = recorded
    url = collector.http_url + "/snapshot?format=perfetto"
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["Content-Type"] == "application/octet-stream"
        compressed = PerfettoTrace(gzip.decompress(response.read()))
    assert len(compressed.slices) == len(perfetto(collector).slices) > 0
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD")) as response:
        assert response.headers["Content-Type"] == "application/octet-stream" and response.read() == b""


def test_the_command_writes_perfetto_traces(
    recorded: tuple[CollectorProcess, int, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    collector, _, _ = recorded
    path = tmp_path / "snapshot.pftrace"
    assert main(["snapshot", collector.http_url, "-o", str(path), "--format", "perfetto", "--track", "worker"]) == 0
    names = thread_names(chrome(collector, "track=worker"))
    assert perfetto_records(PerfettoTrace(path.read_bytes()), names) == chrome_records(
        chrome(collector, "track=worker")
    )
    native = tmp_path / "snapshot.rtsnap"
    assert main(["snapshot", collector.http_url, "-o", str(native), "--format", "native"]) == 0
    converted = tmp_path / "converted.pftrace"
    assert main(["convert", str(native), "-o", str(converted), "--format", "perfetto", "--category", "span"]) == 0
    spans = PerfettoTrace(converted.read_bytes())
    assert sorted(s.name for s in spans.slices) == sorted(["setup", "load", "fetch", "fetch", *["chunk"] * 5])
    err = capsys.readouterr().err  # a Perfetto trace is not read back to count what matched
    assert err.startswith("ringtrace snapshot: filters applied to ") and err.endswith(
        " ringtrace dump does): --track worker\n"
    )
