"""Samples through a real collector: a client's stack table (STACKS) and samples beside spans, sent on a real
socket, read back as ``GET /flamegraph`` (each filter applied, a bad parameter a 400 naming it), as Chrome JSON and
as a Perfetto trace, and drawn as the web view's flame graph in a real browser (headless Chromium, driven by
Playwright; skipped, saying why, where none is installed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, generous, missing_browser, uncheck_follow, until
from collector_process import CollectorProcess, RawClient
from perfetto_model import PerfettoTrace
from pprof_model import PprofProfile
from ringtrace.wire.frames import Events, encode
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, SAMPLE, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stream_encoder import StreamEncoder
from sampled_program import HOT_PROGRAM
from waiting import wait_for

MAIN = ("main", "/app/main.py", 10)
WORK = ("work", "/app/jobs.py", 20)
HOT = ("hot", "/app/jobs.py", 31)
COLD = ("cold", "/app/jobs.py", 40)
#: Stack ids 0..3 of the stream's table.
STACKS = Stacks(0, (MAIN, WORK, HOT, COLD), 0, ((None, 0), (0, 1), (1, 2), (1, 3)))
#: Samples per stack id on the main thread (the one on "other": stack 3 once).
ON_MAIN = {0: 1, 1: 2, 2: 6, 3: 3}
PID = 31337


def send_samples(collector: CollectorProcess) -> None:
    """A process that declares its stacks, then sends spans with samples among them on its main thread and one sample
    on another thread, all within the last second; waits until the collector acknowledged all of it."""
    hello = Hello(PID, "test-host", "sampled", "i-sampled", "", time.monotonic_ns(), time.time_ns(), "test")
    encoder = StreamEncoder()
    main, other = TrackInfo(1, THREAD_TRACK, "MainThread", 101), TrackInfo(2, THREAD_TRACK, "other", 102)
    first_ns = time.monotonic_ns() - 500_000_000
    frames: list[bytes] = []
    # The tracks and the names (the samples' frames are packed here, as the sampler packs its own).
    for track, name in ((main, "step"), (other, ""), (main, "task-a")):
        batch = encoder.encode(track, [INSTANT, name, first_ns, first_ns, None])
        frames += [*batch.control, *(frame for frame, _ in batch.events)]
    frames.append(encode(STACKS))
    names = encoder.strings
    rows: list[tuple[int, int, int, int, Any]] = []
    at = 1000
    for stack_id, count in ON_MAIN.items():
        for n in range(count):
            rows.append((SPAN, names["step"], at, 900, {"n": n}))
            rows.append((SAMPLE, names["task-a" if n % 2 else ""], at + 100, 0, stack_id))
            at += 1000
    frames.append(_events(main.track_id, first_ns, rows))
    frames.append(_events(other.track_id, first_ns, [(SAMPLE, names[""], at, 0, 3)]))
    with RawClient(collector.tcp_address, hello) as client:
        client.send_raw(b"".join(frames))
        client.flush()


def _events(track_id: int, first_ts: int, rows: list[tuple[int, int, int, int, Any]]) -> bytes:
    payload = msgpack.packb([list(column) for column in zip(*rows, strict=True)])
    last_ts = first_ts + max(row[2] + row[3] for row in rows)
    return encode(Events(track_id, len(rows), first_ts, last_ts, payload))


@pytest.fixture(scope="module")
def sampled() -> Iterator[CollectorProcess]:
    collector = CollectorProcess()
    try:
        send_samples(collector)
        yield collector
    finally:
        collector.stop()


def flame_graph(collector: CollectorProcess, query: str = "") -> dict[str, Any]:
    status, body = collector.get("/flamegraph" + query)
    assert status == 200, body
    document: dict[str, Any] = json.loads(body)
    return document


def counted(document: dict[str, Any]) -> dict[tuple[str, ...], tuple[int, int]]:
    """Each node's path of function names from the root: its (self, total) samples."""
    nodes = document["nodes"]
    names: list[tuple[str, ...]] = [()]
    out = {}
    columns = (nodes["function"], nodes["parent"], nodes["self"], nodes["total"])
    for function, parent, own, total in zip(*columns, strict=True):
        names.append((*names[parent], function))
        out[names[-1]] = (own, total)
    return out


def test_the_flame_graph_counts_the_samples_selected(sampled: CollectorProcess) -> None:
    document = flame_graph(sampled)
    assert document["samples"] == 13
    assert counted(document) == {
        ("main",): (1, 13),
        ("main", "work"): (2, 12),
        ("main", "work", "hot"): (6, 6),
        ("main", "work", "cold"): (4, 4),
    }
    assert flame_graph(sampled, "?track=other")["samples"] == 1
    assert flame_graph(sampled, f"?pid={PID}&since=-60s")["samples"] == 13
    assert flame_graph(sampled, "?pid=1")["samples"] == 0
    assert flame_graph(sampled, "?since=-60s&until=-59s")["samples"] == 0


def test_a_flame_graph_s_limit_counts_samples_alone(sampled: CollectorProcess) -> None:
    # The newest 5 samples (one on "other", the main thread's last four: hot once, cold three times), whatever the
    # spans among them: a limit of every kind of event would leave 3 samples of the newest 5 events.
    document = flame_graph(sampled, "?limit=5")
    assert document["samples"] == 5
    assert counted(document) == {
        ("main",): (0, 5),
        ("main", "work"): (0, 5),
        ("main", "work", "hot"): (1, 1),
        ("main", "work", "cold"): (4, 4),
    }
    assert document["capture"]["query"] == {"limit": 5}  # (as given)
    assert flame_graph(sampled, "?limit=5&track=MainThread")["samples"] == 5
    assert flame_graph(sampled, "?limit=100")["samples"] == 13
    assert flame_graph(sampled, "?limit=5&category=span")["samples"] == 0


@pytest.mark.parametrize(("query", "named"), [("?since=soon", "since"), ("?format=chrome", "format"), ("?x=1", "x")])
def test_a_bad_flame_graph_parameter_is_a_400_naming_it(sampled: CollectorProcess, query: str, named: str) -> None:
    status, body = sampled.get("/flamegraph" + query)
    assert status == 400 and named in body.decode()


def test_the_samples_are_in_chrome_json_and_perfetto_snapshots(sampled: CollectorProcess) -> None:
    document = sampled.snapshot()
    samples = [e for e in document["traceEvents"] if e["ph"] == "P"]
    assert len(samples) == 13 and len(document["stackFrames"]) == 4
    leaves = sorted(document["stackFrames"][str(s["sf"])]["name"] for s in samples)
    assert leaves == sorted(["main"] + ["work"] * 2 + ["hot"] * 6 + ["cold"] * 4)
    status, body = sampled.get("/snapshot?format=perfetto")
    assert status == 200
    trace = PerfettoTrace(body)
    assert sorted(len(s.stack) for s in trace.samples) == sorted([1] * 1 + [2] * 2 + [3] * 10)
    assert {(s.pid, s.tid) for s in trace.samples} == {(PID, 101), (PID, 102)}


def test_the_timeline_document_has_the_samples_without_their_stacks(sampled: CollectorProcess) -> None:
    status, body = sampled.get("/timeline")
    assert status == 200
    blocks = json.loads(body)["blocks"]
    samples = [arg for block in blocks for phase, arg in zip(block["ph"], block["args"], strict=True) if phase == "P"]
    assert samples == [None] * 13  # (the flame graph's document has the stacks)


def test_a_sampled_program_s_hot_function_leads_its_flame_graph(collector: CollectorProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HOT_PROGRAM, collector.tcp_address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    document = flame_graph(collector, "?process=busy&track=*MainThread*")
    nodes = document["nodes"]
    hot = [i for i, name in enumerate(nodes["function"]) if name == "spin_in_the_hot_loop"]
    assert hot, nodes["function"]
    in_hot = sum(nodes["total"][i] for i in hot)
    # Of the main thread's samples, most are in the hot loop (the others: starting, connecting, flushing).
    assert document["samples"] >= 20 and in_hot >= document["samples"] // 2
    # The thread's name alone selects its samples (they are on its sampler's track, "MainThread samples").
    assert flame_graph(collector, "?process=busy&track=MainThread")["samples"] == document["samples"]
    # The program has one thread: ringtrace's own (flusher, streamer, sampler) are not sampled.
    assert flame_graph(collector, "?process=busy")["samples"] == document["samples"]
    callers = {nodes["function"][nodes["parent"][i] - 1] for i in hot if nodes["parent"][i]}
    assert callers == {"main"}
    trace = PerfettoTrace(collector.get("/snapshot?format=perfetto&process=busy")[1])
    assert any(frame[0] == "spin_in_the_hot_loop" for sample in trace.samples for frame in sample.stack)
    profile = PprofProfile(collector.get("/snapshot?format=pprof&process=busy&track=*MainThread*")[1])
    in_hot_pprof = sum(s.values[0] for s in profile.samples if "spin_in_the_hot_loop" in {f[0] for f in s.stack})
    assert in_hot_pprof == in_hot and sum(s.values[0] for s in profile.samples) == document["samples"]


_MISSING = missing_browser()


@pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))
@pytest.mark.xdist_group("web_view_browser")
def test_the_web_view_draws_the_flame_graph_and_zooms_into_a_frame(sampled: CollectorProcess) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = generous(browser.new_page(viewport={"width": 1100, "height": 900}))
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(sampled.http_url + "/?seconds=600")
            until(page, "() => /13 samples/.test(document.getElementById('flame-info').textContent)")
            uncheck_follow(page)
            width = page.evaluate("document.getElementById('flamegraph').getBoundingClientRect().width")

            def frame_width(name: str) -> float:
                box = page.locator(f"#flamegraph g[data-name={name}] rect").first.bounding_box()
                assert box is not None
                return float(box["width"])

            # hot holds 6 of 13 samples, cold 4: each as wide as its share of the root's width.
            assert frame_width("hot") == pytest.approx(width * 6 / 13, abs=2)
            assert frame_width("cold") == pytest.approx(width * 4 / 13, abs=2)
            page.hover("#flamegraph g[data-name=hot] rect")
            tooltip = page.inner_text("#flame-tooltip")
            assert "hot" in tooltip and "/app/jobs.py:31" in tooltip and "6 samples" in tooltip
            page.click("#flamegraph g[data-name=cold] rect")  # zoomed: cold takes the whole width
            wait_for(lambda: frame_width("cold") > width - 3, timeout_s=30, what="cold zoomed to the whole width")
            assert page.locator("#flamegraph g[data-name=hot]").count() == 0
            page.click("#flamegraph g[data-name=all] rect")
            wait_for(lambda: page.locator("#flamegraph g[data-name=hot]").count() == 1, timeout_s=30, what="zoomed out")
            # A thread asked for: the one sample of "other".
            page.fill("#flame-thread", "other")
            page.press("#flame-thread", "Enter")
            until(page, "() => /^1 sample ·/.test(document.getElementById('flame-info').textContent)")
            assert errors == []
        finally:
            browser.close()
