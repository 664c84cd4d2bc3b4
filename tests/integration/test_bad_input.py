"""Bad input closes that one connection with a logged reason and loses nothing else."""

from __future__ import annotations

import json
import os
import socket
import struct

from collector_process import CollectorProcess, events, run_workload
from ringtrace.client.protocol import FRAME_HEADER, FrameType, Hello, encode, preamble


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    """Read until the collector closes the connection (True) or the read times out (False)."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _hello() -> bytes:
    return preamble() + encode(
        Hello(
            pid=os.getpid(),
            host="test",
            process_name="bad",
            instance_id="bad-1",
            boot_id="",
            monotonic_ns=1,
            wall_ns=2,
            client_version="test",
        )
    )


def test_bad_connections_are_closed_and_good_data_survives(collector: CollectorProcess) -> None:
    before = run_workload(collector.tcp_address, "--threads", "2", "--spans", "1000", "--name", "before")
    assert before.returncode == 0, before.stderr

    with _connect(collector.tcp_address) as garbage:
        garbage.sendall(os.urandom(4096))
        assert _closed_by_peer(garbage)
    line = collector.wait_for_log(lambda line: "closing connection" in line and "magic" in line)
    assert "WARNING" in line

    with _connect(collector.tcp_address) as oversize:
        oversize.sendall(_hello() + FRAME_HEADER.pack(64 * 1024 * 1024, FrameType.EVENTS))
        assert _closed_by_peer(oversize)
    line = collector.wait_for_log(lambda line: "max_frame_bytes=1048576" in line)
    assert f"{64 * 1024 * 1024 + FRAME_HEADER.size} bytes" in line

    with _connect(collector.tcp_address) as undeclared:
        events_body = struct.pack("<IIQQ", 99, 1, 0, 0) + b"\x90"
        undeclared.sendall(_hello() + FRAME_HEADER.pack(len(events_body), FrameType.EVENTS) + events_body)
        assert _closed_by_peer(undeclared)
    collector.wait_for_log(lambda line: "'source_id' 99 was never declared" in line)

    after = run_workload(collector.tcp_address, "--threads", "2", "--spans", "1000", "--name", "after")
    assert after.returncode == 0, after.stderr

    spans = events(collector.snapshot(), "X")
    pids = {json.loads(before.stdout)["pid"], json.loads(after.stdout)["pid"]}
    assert len(spans) == 4000
    assert {s["pid"] for s in spans} == pids


def test_bad_http_queries_get_400_with_a_message(collector: CollectorProcess) -> None:
    status, body = collector.get("/snapshot?flush_timeout_s=soon")
    assert status == 400 and b"flush_timeout_s" in body and b"number" in body
    status, body = collector.get("/snapshot?flush_timeout_s=1e9")
    assert status == 400 and b"between" in body
    status, body = collector.get("/snapshot?limit=5")
    assert status == 400 and b"unknown query parameter 'limit'" in body
    status, body = collector.get("/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
