"""What one client can do to the collector's snapshot for everyone, over real sockets."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

import msgpack
import pytest
from collector_process import CollectorProcess, events, run_workload
from ringtrace.client.model import KINDS
from ringtrace.client.protocol import (
    Events,
    Flush,
    FlushAck,
    Frame,
    FrameReader,
    Hello,
    Schema,
    Source,
    Stats,
    Strings,
    encode,
    preamble,
)

#: The largest integers the protocol accepts in a control frame, and as a pid: two processes' sums exceed 64 bits.
MAX_FIELD = 2**63 - 1
MAX_PID = 2**32 - 1


def raw_client(address: str, frames: list[Frame], *, pid: int = 4242, instance: str = "raw") -> None:
    """Connect, say HELLO and ``frames``, wait until the collector acknowledged them all, hang up."""
    host, port = address.rsplit(":", 1)
    hello = Hello(pid, "review-host", "raw", instance, "", 1, 2, "test")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(preamble() + b"".join(encode(f) for f in [hello, *frames, Flush(77)]))
        reader = FrameReader("collector")
        while True:
            data = sock.recv(65536)
            assert data, "collector closed the connection"
            reader.receive_data(data)
            if any(isinstance(frame, FlushAck) and frame.token == 77 for frame in reader):
                return


def snapshot_body(collector: CollectorProcess) -> bytes:
    """The body of GET /snapshot, as much of it as came if the response was cut short."""
    try:
        status, body = collector.get("/snapshot")
    except http.client.IncompleteRead as exc:
        return exc.partial
    assert status == 200, body
    return body


def one_event(source_id: int = 1) -> Events:
    payload = msgpack.packb([[0], [0], [0], [0], [None]])
    return Events(source_id, 1, 1_000, 1_000, payload)


@pytest.mark.parametrize("how", ["stats", "pid"])
def test_one_client_cannot_make_every_snapshot_invalid(collector: CollectorProcess, how: str) -> None:
    good = run_workload(collector.tcp_address, "--spans", "100", "--name", "innocent")
    assert good.returncode == 0, good.stderr
    for instance in ("a", "b"):  # two processes, each within the protocol's limits
        if how == "stats":
            raw_client(collector.tcp_address, [Stats(MAX_FIELD, 0)], instance=instance)
        else:
            frames: list[Frame] = [Schema(KINDS), Strings(0, ("x",)), Source(1, "t", 1), one_event()]
            raw_client(collector.tcp_address, frames, pid=MAX_PID, instance=instance)
    trace: dict[str, Any] = json.loads(snapshot_body(collector))
    assert len([e for e in events(trace, "X") if e["name"] == "span"]) == 100
