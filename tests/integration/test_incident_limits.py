"""Incidents against what could stall or break them: events stamped far in the future (OTLP, as a bad clock sends
them), a stray file in the incidents directory at start; a real collector (a subprocess, port 0) each time."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from pathlib import Path

import pytest
from collector_process import CollectorProcess
from incident_runs import Peer, incident_events, incidents, stats, wait_for_incidents
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from ringtrace.collector.incidents.engine import CRASH_GRACE_S
from test_otlp import OtlpCollector, request_of, span
from waiting import wait_for

pytestmark = pytest.mark.integration

ERRORS = "errors: otlp_error=true, before=1s, after=1s, max_per_minute=100"


def _error_span(name: str, start: int, span_id: int) -> Span:
    failed = span(name, start, start + 10**6, span_id)
    failed.status.code = Status.STATUS_CODE_ERROR
    return failed


def test_errors_stamped_in_the_future_neither_hold_captures_nor_keep_an_incident_waiting(tmp_path: Path) -> None:
    collector = OtlpCollector("--incidents-dir", str(tmp_path / "incidents"), "--trigger", ERRORS)
    try:
        now = time.time_ns()
        an_hour_ahead = request_of(*(_error_span(f"far {i}", now + 3600 * 10**9, i + 1) for i in range(10)))

        def refused_after_export() -> int:  # (what is stored before the watch's first step is not read: sent again)
            status, _, body = collector.export(an_hour_ahead.SerializeToString())
            assert status == 200, body
            return int(stats(collector)["refused"])

        wait_for(refused_after_export, until=lambda refused: refused >= 10, timeout_s=30, what="the firings refused")
        # Each refused, saying why, and counted: none took a capture.
        collector.wait_for_log(lambda line: "refused a firing" in line and "in the future" in line)
        status, _, body = collector.export(request_of(_error_span("soon", now + 30 * 10**9, 99)).SerializeToString())
        assert status == 200, body
        [record] = wait_for_incidents(collector, 1)
        assert record["saved_wall_ns"] < record["window"]["until_ns"], "written once after ran, not at its event's time"
        counted = stats(collector)
        assert counted["by_rule"]["suppressed"] == {"errors": counted["refused"]}
        assert counted["by_rule"]["fired"] == {"errors": 1}
        status, body = collector.post("/incidents?reason=still+free&before=1s&after=0s")
        assert status == 202, body
        wait_for_incidents(collector, 2)
    finally:
        collector.stop()


def test_a_stray_pending_file_does_not_stop_the_start_and_is_left_alone(tmp_path: Path) -> None:
    kept = tmp_path / "incidents"
    kept.mkdir()
    (kept / "bad id.pending.json").write_text(json.dumps({"id": "bad id", "rule": "x"}))
    (kept / "20261129T104501000Z-x-3f9a.pending.json").write_text(json.dumps({"id": 5, "window": "none"}))
    collector = CollectorProcess("--incidents-dir", str(kept), "--trigger", "crashed: crash=true")
    try:
        peer = Peer(collector, "after-a-stray")
        try:
            peer.send("ticks 5")
            peer.send("flush")
            status, body = collector.post(f"/incidents?reason=after+a+stray&pid={peer.pid}&before=1s&after=0s")
            assert status == 202, body
            assert [r["reason"] for r in wait_for_incidents(collector, 1)] == ["after a stray"]
        finally:
            peer.close()
        assert (kept / "bad id.pending.json").exists(), "not an incident's: left alone"
        collector.wait_for_log(lambda line: "bad id.pending.json" in line)
    finally:
        collector.stop()


def test_a_webhook_that_does_not_answer_holds_no_capture_and_a_failure_is_logged_once(tmp_path: Path) -> None:
    holding, release = threading.Event(), threading.Event()

    class Held(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            holding.set()
            release.wait(60)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    slow = "slow checkout: span=checkout, min_duration=200ms, before=1s, after=0s"
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Held) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/incident"
        collector = CollectorProcess("--incidents-dir", str(tmp_path / "incidents"), "--trigger", f"{slow}, url={url}")
        try:
            peer = Peer(collector, "hooked")
            try:
                peer.send("slow checkout 250")
                wait_for_incidents(collector, 1)
                wait_for(holding.is_set, timeout_s=30, what="the webhook's POST")
                # Saved and its capture done while its webhook is still waited for.
                wait_for(lambda: stats(collector)["captures"], until=lambda n: n == 0, timeout_s=30, what="no capture")
                assert holding.is_set() and not release.is_set()
                assert incidents(collector)[0]["webhook"]["status"] is None
            finally:
                release.set()
                peer.close()
        finally:
            collector.stop()
    with socket.socket() as closed:  # a port nobody listens on: each attempt fails at once
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/incident"
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "again"), "--trigger", f"{slow}, url={url}")
    try:
        peer = Peer(collector, "hooked")
        try:
            peer.send("slow checkout 250")
            wait_for(
                lambda: incidents(collector)[:1],
                until=lambda records: bool(records) and records[0]["webhook"]["status"] is not None,
                timeout_s=60,
                what="the webhook's outcome",
            )
        finally:
            peer.close()
        said = [line for line in collector.lines if url in line]
        assert len(said) == 1 and "failed" in said[0], said
    finally:
        collector.stop()


def test_with_after_0s_the_event_that_fired_is_in_its_own_incident(tmp_path: Path) -> None:
    rule = "asked: incident_call=true, before=1s, after=0s"
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "incidents"), "--trigger", rule)
    try:
        peer = Peer(collector, "asking")
        try:
            peer.send("incidents 1 payment-failed")
            [record] = wait_for_incidents(collector, 1)
        finally:
            peer.close()
        assert record["window"]["until_ns"] > record["time_ns"]
        assert [e["name"] for e in incident_events(collector, record["id"])] == ["payment-failed"]
    finally:
        collector.stop()


def test_with_crash_rules_alone_what_the_ring_overwrote_of_the_window_is_counted(tmp_path: Path) -> None:
    collector = CollectorProcess(
        "--capacity", "3MB", "--incidents-dir", str(tmp_path / "incidents"),
        "--trigger", "crashed: crash=true, before=10m, after=0s",
    )  # fmt: skip
    try:
        peer = Peer(collector, "crashing")
        try:
            for _ in range(4):
                peer.send("flood 10000")
            peer.send("flush")
            overwritten = collector.json("/stats")["overwritten_events"]
            assert overwritten > 10_000, "the ring turned over"
            peer.send("crash")
            [record] = wait_for_incidents(collector, 1)
        finally:
            peer.close()
        assert record["lost"]["overwritten_before_fire"] == overwritten
    finally:
        collector.stop()


def test_post_incidents_naming_no_process_keeps_the_fleet_and_errors_are_a_line_of_text(tmp_path: Path) -> None:
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "incidents"))
    try:
        first, second = Peer(collector, "first"), Peer(collector, "second")
        try:
            for peer in (first, second):
                peer.send("ticks 5")
                peer.send("flush")
            status, body = collector.post("/incidents?reason=all+of+it&before=1m&after=0s")
            assert status == 202, body
            [record] = wait_for_incidents(collector, 1)
        finally:
            first.close()
            second.close()
        assert record["scope"] == "fleet"
        assert sorted(p["name"] for p in record["processes"]) == ["first", "second"]
        status, body = collector.get("/incidents/no-such-incident")
        assert status == 404 and body == b"no incident 'no-such-incident'\n", body
    finally:
        collector.stop()


def test_an_otlp_stream_closed_when_idle_is_no_crash(tmp_path: Path) -> None:
    collector = OtlpCollector(
        "--idle-timeout", "1", "--incidents-dir", str(tmp_path / "incidents"), "--trigger", "crashed: crash=true"
    )
    try:
        now = time.time_ns()
        status, _, body = collector.export(request_of(span("request", now - 10**6, now)).SerializeToString())
        assert status == 200, body
        collector.wait_for_log(lambda line: "closing connection from otlp:checkout" in line, timeout_s=30)
        # Saved once after has run: past the crash rules' reconnect grace, when a crash would have fired.
        status, body = collector.post(f"/incidents?reason=after+the+idle+close&before=1s&after={CRASH_GRACE_S + 2}s")
        assert status == 202, body
        [record] = wait_for_incidents(collector, 1)
        assert record["rule"] == "by hand"
        assert stats(collector)["by_rule"]["fired"] == {"by hand": 1}
    finally:
        collector.stop()
