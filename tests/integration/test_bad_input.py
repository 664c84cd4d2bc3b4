"""Bad input closes that one connection with a logged reason and loses nothing else."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from collector_process import CollectorProcess, RawClient, closed_by_peer, events, hello, run_workload
from ringtrace.wire.arg_values import MAX_STRING_CHARS
from ringtrace.wire.frame_types import EVENTS_HEADER, FRAME_HEADER, IGNORABLE, PROTOCOL_VERSIONS, FrameType
from ringtrace.wire.frames import Goodbye, Stats, encode, preamble
from ringtrace.wire.handshake_frames import Welcome
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.table_frames import Strings, Track
from sampled_program import HOT_PROGRAM


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_bad_connections_are_closed_and_good_data_survives(collector: CollectorProcess) -> None:
    before = run_workload(collector.tcp_address, "--threads", "2", "--spans", "1000", "--name", "before")
    assert before.returncode == 0, before.stderr

    with _connect(collector.tcp_address) as garbage:
        garbage.sendall(os.urandom(4096))
        assert closed_by_peer(garbage)
    line = collector.wait_for_log(lambda line: "closing connection" in line and "magic" in line)
    assert "WARNING" in line

    with RawClient(collector.tcp_address) as oversize:
        oversize.send_raw(FRAME_HEADER.pack(64 * 1024 * 1024, FrameType.EVENTS))
        assert oversize.closed_by_peer()
    line = collector.wait_for_log(lambda line: "max_frame_bytes=1048576" in line)
    assert f"{64 * 1024 * 1024 + FRAME_HEADER.size} bytes" in line

    with RawClient(collector.tcp_address) as undeclared:
        body = EVENTS_HEADER.pack(EVENTS_HEADER.size, 0, 99, 1, 0, 0) + b"\x90"
        undeclared.send_raw(FRAME_HEADER.pack(len(body), FrameType.EVENTS) + body)
        assert undeclared.closed_by_peer()
    collector.wait_for_log(lambda line: "'track' 99 was never declared" in line)

    with RawClient(collector.tcp_address) as long_string:
        long_string.send(Strings(0, ("s" * (MAX_STRING_CHARS + 1),)))
        assert long_string.closed_by_peer()
    collector.wait_for_log(lambda line: f"{MAX_STRING_CHARS + 1} exceeds max_string_chars={MAX_STRING_CHARS}" in line)

    with _connect(collector.tcp_address) as early:
        # An unknown ignorable frame is skipped, but it came before HELLO, which must be first.
        early.sendall(preamble() + FRAME_HEADER.pack(3, 99 | IGNORABLE) + b"abc" + encode(Stats(0, 0)))
        assert closed_by_peer(early)
    collector.wait_for_log(lambda line: "first frame from a client must be HELLO" in line)

    after = run_workload(collector.tcp_address, "--threads", "2", "--spans", "1000", "--name", "after")
    assert after.returncode == 0, after.stderr

    spans = events(collector.snapshot(), "X")
    pids = {json.loads(before.stdout)["pid"], json.loads(after.stdout)["pid"]}
    assert len(spans) == 4000
    assert {s["pid"] for s in spans} == pids


def test_a_client_speaking_no_common_version_is_told_why(collector: CollectorProcess) -> None:
    future = PROTOCOL_VERSIONS[1] + 1
    with RawClient(collector.tcp_address, hello(protocol_min=future, protocol_max=future + 3)) as raw:
        assert isinstance(raw.answer, Goodbye)
        assert f"client speaks {future}..{future + 3}" in raw.answer.reason
        assert f"this collector {PROTOCOL_VERSIONS[0]}..{PROTOCOL_VERSIONS[1]}" in raw.answer.reason
        assert raw.closed_by_peer()
    collector.wait_for_log(lambda line: "no common protocol version" in line)
    # A client that also speaks the current version is welcomed with it.
    with RawClient(collector.tcp_address, hello(protocol_min=1, protocol_max=future)) as raw:
        assert isinstance(raw.answer, Welcome) and raw.answer.protocol_version == PROTOCOL_VERSIONS[1]


def test_unknown_ignorable_frames_are_skipped_and_tracks_over_the_limit_refused() -> None:
    collector = CollectorProcess("--max-tracks", "3")
    try:
        with RawClient(collector.tcp_address) as raw:
            assert isinstance(raw.answer, Welcome) and raw.answer.max_tracks == 3
            raw.send_raw(FRAME_HEADER.pack(4, 0x42 | IGNORABLE) + b"news")
            raw.send(*(Track(i, 0, f"t{i}", 100 + i) for i in range(3)))
            raw.flush()  # still connected
            raw.send(Track(3, 0, "one too many", 103))
            assert raw.closed_by_peer()
        collector.wait_for_log(lambda line: "exceeds max_tracks=3" in line)
    finally:
        collector.stop()


def test_the_stack_limits_are_stated_in_welcome_adopted_by_a_client_and_enforced() -> None:
    where, main, spin = ("<module>", "app.py", 1), ("main", "app.py", 5), ("spin", "app.py", 9)
    collector = CollectorProcess("--max-stacks", "3", env={**os.environ, "RINGTRACE_MAX_STACK_FRAMES": "3"})
    try:
        with RawClient(collector.tcp_address) as raw:
            assert isinstance(raw.answer, Welcome)
            assert (raw.answer.max_stacks, raw.answer.max_stack_frames) == (3, 3)
            raw.send(Stacks(0, (where, main, spin), 0, ((None, 0), (0, 1), (1, 2))))  # at both limits
            raw.flush()  # still connected
            raw.send(Stacks(3, (("one", "too many", 1),), 3, ()))
            assert raw.closed_by_peer()
        collector.wait_for_log(lambda line: "code location count: 4 exceeds max_stack_frames=3" in line)
        with RawClient(collector.tcp_address) as raw:
            raw.send(Stacks(0, (where,), 0, ((None, 0), (0, 0), (1, 0), (2, 0))))
            assert raw.closed_by_peer()
        collector.wait_for_log(lambda line: "stack count: 4 exceeds max_stacks=3" in line)
        # A sampled program keeps within them: the stacks that fit are declared (which do depends on where the
        # first samples fell), the others' samples come without one, and its connection is never refused.
        done = subprocess.run(
            [sys.executable, "-c", HOT_PROGRAM, collector.tcp_address], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        status, body = collector.get("/flamegraph?process=busy")
        assert status == 200, body
        graph = json.loads(body)
        # (Each stream keeps within the limits, as the collector enforces; a process that reconnected under load has
        # a second stream, whose stacks may differ: the graph's nodes are not bounded by one stream's limits.)
        assert graph["samples"] >= 20, graph
        (busy,) = (p for p in collector.json("/sources")["processes"] if p["process_name"] == "busy")
        assert (busy["rejected_events"], busy["client_dropped_events"]) == (0, 0)
        assert not [line for line in collector.lines if "closing connection" in line and "busy" in line]
    finally:
        collector.stop()


def test_bad_http_queries_get_400_with_a_message(collector: CollectorProcess) -> None:
    status, body = collector.get("/snapshot?flush_timeout_s=soon")
    assert status == 400 and b"flush_timeout_s" in body and b"number" in body
    status, body = collector.get("/snapshot?flush_timeout_s=1e9")
    assert status == 400 and b"between" in body
    status, body = collector.get("/snapshot?limt=5")
    assert status == 400 and b"unknown query parameter 'limt'" in body and b"limit" in body
    status, body = collector.get("/snapshot?limit=5&limit=6")
    assert status == 400 and b"'limit' is given more than once" in body
    for query, named in [
        ("limit=0", b"'limit'"),
        ("limit=-3", b"'limit'"),
        ("since=yesterday", b"'since'"),
        ("until=2026-13-01T00:00:00Z", b"'until'"),
        ("since=-1s&until=-2s", b"before 'until'"),
        ("pid=12,x", b"'pid'"),
        ("min_priority=loud", b"'min_priority'"),
        ("format=svg", b"chrome, native"),
        ("process=", b"'process'"),
    ]:
        status, body = collector.get("/snapshot?" + query)
        assert status == 400 and named in body, (query, body)
    status, body = collector.get("/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
