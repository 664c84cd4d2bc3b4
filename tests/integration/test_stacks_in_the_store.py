"""STACKS from a hostile or busy peer through a real collector: a chain of stack nodes as deep as the limits allow
is served cut to its innermost frames, and samples stored past the ring's overwrite of the frame that declared their
stacks, and after a SIGKILL and a restart on the same --data-dir, still resolve to their stacks (each new segment
replays the stack table)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, generous, missing_browser, until
from collector_process import CollectorProcess, RawClient
from ringtrace.wire.frames import Events, encode
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, SAMPLE, THREAD_TRACK, TrackInfo
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stack_tree import MAX_RESOLVED_DEPTH
from ringtrace.wire.stream_encoder import StreamEncoder
from waiting import wait_for

#: Nodes of the chain: a peer may declare this many in well under a MiB.
DEPTH = 20_000
_MISSING = missing_browser()


def _hello(pid: int) -> Hello:
    return Hello(pid, "test-host", f"stacks-{pid}", f"i-{pid}", "", time.monotonic_ns(), time.time_ns(), "test")


def _chain() -> list[bytes]:
    """A chain of DEPTH nodes, each a code location of its own, in frames of 1000."""
    frames = []
    for first in range(0, DEPTH, 1000):
        locations = tuple((f"f{i}", "deep.py", i + 1) for i in range(first, first + 1000))
        nodes = tuple((i - 1 if i else None, i) for i in range(first, first + 1000))
        frames.append(encode(Stacks(first, locations, first, nodes)))
    return frames


def _samples(first_ns: int, stack_ids: list[int], at: int) -> bytes:
    rows = [(SAMPLE, 0, at + 1000 * n, 0, stack_id) for n, stack_id in enumerate(stack_ids)]
    payload = msgpack.packb([list(column) for column in zip(*rows, strict=True)])
    return encode(Events(1, len(rows), first_ns, first_ns + rows[-1][2], payload))


def _open_stream() -> list[bytes]:
    """SCHEMA, STRINGS (the empty name, id 0) and the main thread's track (1), as a client's encoder sends them."""
    encoder = StreamEncoder()
    now = time.monotonic_ns()
    batch = encoder.encode(TrackInfo(1, THREAD_TRACK, "MainThread", 101), [INSTANT, "", now, now, None])
    assert encoder.strings[""] == 0
    return [*batch.control, *(frame for frame, _ in batch.events)]


def _flame_graph(collector: CollectorProcess) -> dict[str, Any]:
    status, body = collector.get("/flamegraph")
    assert status == 200, body
    document: dict[str, Any] = json.loads(body)
    return document


def _depths(document: dict[str, Any]) -> tuple[int, int]:
    """The deepest node's depth, and the samples whose stack is empty (the roots' totals short of all samples)."""
    nodes = document["nodes"]
    depth = [0]
    for parent in nodes["parent"]:
        depth.append(depth[parent] + 1)
    rooted = sum(total for parent, total in zip(nodes["parent"], nodes["total"], strict=True) if parent == 0)
    return max(depth), document["samples"] - rooted


def test_a_chain_of_nodes_at_the_limits_is_served_cut_to_its_innermost_frames() -> None:
    collector = CollectorProcess()
    try:
        first_ns = time.monotonic_ns() - 1_000_000_000
        deepest = list(range(DEPTH - 1, DEPTH - 1 - 150, -1))  # (150 x 1024 nodes: within bounds)
        with RawClient(collector.tcp_address, _hello(4101)) as client:
            client.send_raw(b"".join([*_open_stream(), *_chain(), _samples(first_ns, deepest, 1000)]))
            client.flush()
        document = _flame_graph(collector)
    finally:
        collector.stop()
    assert document["samples"] == 150
    assert _depths(document) == (MAX_RESOLVED_DEPTH, 0)


def test_samples_keep_their_stacks_past_the_ring_s_overwrite_and_a_kill_9(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    args = ("--data-dir", data_dir, "--capacity", "1MiB", "--max-frame-size", "64KiB")
    collector = CollectorProcess(*args)
    stacks = Stacks(0, (("main", "app.py", 1), ("work", "app.py", 2)), 0, ((None, 0), (0, 1)))
    try:
        first_ns = time.monotonic_ns() - 1_000_000_000
        with RawClient(collector.tcp_address, _hello(4102)) as client:
            client.send_raw(b"".join([*_open_stream(), encode(stacks)]))
            at = 0
            for _ in range(40):  # about 2 MiB of samples: the ring overwrites the segment that got the STACKS frame
                client.send_raw(b"".join(_samples(first_ns, [1] * 2000, at + k * 2_000_000) for k in range(10)))
                at += 20_000_000
            client.flush()
        wait_for(
            lambda: collector.json("/stats"),
            until=lambda stats: stats["overwritten_events"] > 0 and stats["stored_events"] > 0,
            timeout_s=30,
            what="the ring to overwrite its oldest segment",
        )
        before = _flame_graph(collector)
        collector.proc.send_signal(signal.SIGKILL)
        collector.proc.wait()
    finally:
        collector.stop()
    assert 0 < before["samples"] < 800_000 and _depths(before) == (2, 0)
    restarted = CollectorProcess(*args)
    try:
        restarted.wait_for_log(lambda line: "recovered" in line)
        after = _flame_graph(restarted)
    finally:
        restarted.stop()
    assert after["samples"] > 0 and _depths(after) == (2, 0)


def test_stacks_frames_that_add_nothing_cost_the_tables_nothing() -> None:
    collector = CollectorProcess()
    stacks = Stacks(0, (("main", "app.py", 1),), 0, ((None, 0),))
    try:
        with RawClient(collector.tcp_address, _hello(4103)) as client:
            client.send_raw(b"".join([*_open_stream(), encode(stacks)]))
            client.flush()
            charged = collector.json("/stats")["table_bytes"]
            client.send_raw(encode(Stacks(1, (), 1, ())) * 20_000)  # each keeps the rules, and declares nothing
            client.flush()
            stats = collector.json("/stats")
    finally:
        collector.stop()
    assert stats["connections"] == 1 and stats["table_bytes"] == charged


def _many_stacks(roots: range, depth: int) -> bytes:
    """A stack of ``depth`` frames under each root function, its inner frames shared: ``depth`` nodes a root."""
    inner = tuple((f"inner{i}", "inner.py", i + 1) for i in range(1, depth))
    frames, nodes = [encode(Stacks(0, inner, 0, ()))], []
    declared = len(inner)
    for n, root in enumerate(roots):
        first = n * depth
        chain = ((None, declared), *((first + i - 1, i - 1) for i in range(1, depth)))
        frames.append(encode(Stacks(declared, ((f"root{root}", "app.py", root + 1),), first, chain)))
        declared += 1
        nodes.append(first + depth - 1)
    return b"".join(frames) + _samples(time.monotonic_ns() - 1_000_000_000, nodes, 1000)


@pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))
@pytest.mark.xdist_group("web_view_browser")
def test_the_web_view_draws_a_flame_graph_of_more_frames_than_a_call_s_arguments_may_be() -> None:
    from playwright.sync_api import sync_playwright

    collector = CollectorProcess()
    try:
        for pid, roots in ((4104, range(0, 500)), (4105, range(500, 1000))):  # 75,000 nodes each, within the limit
            with RawClient(collector.tcp_address, _hello(pid)) as client:
                client.send_raw(b"".join([*_open_stream(), _many_stacks(roots, 150)]))
                client.flush()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = generous(browser.new_page(viewport={"width": 1600, "height": 900}))
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                page.goto(collector.http_url + "/?seconds=600")
                until(page, "() => /samples|rror|exceeded/.test(document.getElementById('flame-info').textContent)")
                info = page.inner_text("#flame-info")
                drawn = int(page.get_attribute("#flamegraph", "data-frames") or 0)
            finally:
                browser.close()
    finally:
        collector.stop()
    assert "150,000 frames" in info and "exceeded" not in info, info
    assert drawn == 150_001 and errors == []  # every frame and the root
