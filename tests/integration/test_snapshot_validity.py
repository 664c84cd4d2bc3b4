"""What one client can do to the collector's snapshot for everyone, over real sockets."""

from __future__ import annotations

import http.client
import json
from typing import Any

import msgpack
import pytest
from collector_process import CollectorProcess, RawClient, events, hello, run_workload
from ringtrace.wire.frames import Events, Frame, Schema, Stats, Strings, Track
from ringtrace.wire.model import BUILTIN_KINDS, THREAD_TRACK

#: The largest integers the protocol accepts in a control frame, and as a pid: two processes' sums exceed 64 bits.
MAX_FIELD = 2**63 - 1
MAX_PID = 2**32 - 1


def snapshot_body(collector: CollectorProcess) -> bytes:
    """The body of GET /snapshot, as much of it as came if the response was cut short."""
    try:
        status, body = collector.get("/snapshot")
    except http.client.IncompleteRead as exc:
        return exc.partial
    assert status == 200, body
    return body


def declared(*extra: Frame) -> list[Frame]:
    """The tables a stream needs before its EVENTS: one kind table, one string, one thread track."""
    return [Schema(BUILTIN_KINDS), Strings(0, ("x",)), Track(1, THREAD_TRACK, "t", 1), *extra]


def one_event(payload: bytes | None = None, count: int = 1) -> Events:
    return Events(1, count, 1_000, 1_000, payload or msgpack.packb([[0], [0], [0], [0], [None]]))


@pytest.mark.parametrize("how", ["stats", "pid"])
def test_one_client_cannot_make_every_snapshot_invalid(collector: CollectorProcess, how: str) -> None:
    good = run_workload(collector.tcp_address, "--spans", "100", "--name", "innocent")
    assert good.returncode == 0, good.stderr
    for instance in ("a", "b"):  # two processes, each within the protocol's limits
        if how == "stats":
            frames: list[Frame] = [Stats(MAX_FIELD, 0, MAX_FIELD, MAX_FIELD)]
            first = hello(instance=instance)
        else:
            frames = declared(one_event())
            first = hello(pid=MAX_PID, instance=instance)
        with RawClient(collector.tcp_address, first) as raw:
            raw.send(*frames)
            raw.flush()
    trace: dict[str, Any] = json.loads(snapshot_body(collector))
    assert len([e for e in events(trace, "X") if e["name"] == "span"]) == 100


def test_a_payload_nobody_can_decode_is_counted_per_process_and_logged_once(collector: CollectorProcess) -> None:
    good = run_workload(collector.tcp_address, "--spans", "100", "--name", "innocent")
    assert good.returncode == 0, good.stderr
    with RawClient(collector.tcp_address, hello(instance="broken")) as raw:
        # The header says 3 events; the payload is not the column layout SCHEMA declared.
        raw.send(*declared(one_event(msgpack.packb({"not": "columns"}), count=3)))
        raw.send(one_event(msgpack.packb([[0], [0], [0], [0]]), count=1))  # one column short
        raw.flush()
    for _ in range(2):  # counted in every snapshot; logged once
        trace = json.loads(snapshot_body(collector))
        assert len([e for e in events(trace, "X") if e["name"] == "span"]) == 100
        by_name = {p["process_name"]: p for p in trace["otherData"]["processes"]}
        assert by_name["raw"]["undecodable_events"] == 4
        assert by_name["innocent"]["undecodable_events"] == 0
        assert trace["otherData"]["undecodable_events"] == 4
    collector.wait_for_log(lambda line: "cannot export" in line)  # (stderr is read on a thread of its own)
    logged = [line for line in collector.lines if "cannot export" in line]
    assert len(logged) == 1 and "raw (pid 4242)" in logged[0] and "payload must be an array of 5 columns" in logged[0]
