"""What the OTLP listener's peers may hold or cost, through the real collector over real sockets: request bodies are
counted in flight by what they inflate to, the listener has a connection limit of its own that leaves the HTTP API
answering, and requests aiohttp cannot parse are one log line, not a traceback each."""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import re
import socket
import urllib.request
from pathlib import Path
from typing import Any

from collector_process import CollectorProcess, events
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from ringtrace.collector.ingest.otlp.request_shape import MAX_ITEMS, MAX_SCOPES
from test_otlp import T0, OtlpCollector, request_of, span
from waiting import wait_for

MIB = 1024 * 1024


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """The collector's resident memory now (``VmRSS``), or the most it ever had (``VmHWM``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(field + r":\s+(\d+)", status).group(1)) * 1024  # type: ignore[union-attr]


def gzip_bomb(inflated_bytes: int) -> bytes:
    """An export request of ``inflated_bytes``, one span whose name is most of it, gzipped: about 1/1000 of it."""
    name_bytes = inflated_bytes - 200
    export = request_of(span("a" * name_bytes, T0, T0 + 1)).SerializeToString()
    exact = request_of(span("a" * (name_bytes + inflated_bytes - len(export)), T0, T0 + 1)).SerializeToString()
    assert len(exact) == inflated_bytes
    return gzip.compress(exact, 9)


def otlp_socket(collector: OtlpCollector) -> socket.socket:
    host, port = collector.otlp_base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def announcing_the_largest_body(collector: OtlpCollector) -> socket.socket:
    """A request that has said its body is the largest there may be (``--otlp-max-body``, 64 KiB here), and sends it
    later: its bytes are in flight meanwhile."""
    sock = otlp_socket(collector)
    sock.sendall(
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {64 * 1024}\r\n\r\n".encode()
    )
    return sock


def test_a_gzip_body_counts_in_flight_by_what_it_inflates_to() -> None:
    # Eight bodies of 64 KiB in flight at most; those held on purpose, not ended for sending nothing.
    collector = OtlpCollector("--otlp-max-body", "64KiB", "--http-timeout", "300")
    plain = request_of(span("small", T0, T0 + 1)).SerializeToString()
    waiting = []
    try:
        waiting = [announcing_the_largest_body(collector) for _ in range(8)]
        wait_for(
            lambda: collector.export(plain)[0],
            until=lambda status: status == 503,
            timeout_s=30,
            what="the eight bodies in flight",
        )
        with waiting.pop() as released:  # its body comes (padding past the request: a 400): one body's room is left
            released.sendall(plain + bytes(64 * 1024 - len(plain)))
            assert released.recv(100).startswith(b"HTTP/1.1 400")
        bomb = gzip_bomb(64 * 1024)
        assert len(bomb) < 1024  # sent as less than 1 KiB, it needs the room left once inflated, and its own bytes
        status, headers, answer = collector.export(bomb, **{"Content-Encoding": "gzip"})
        assert status == 503 and headers.get("Retry-After") == "1", answer
        assert b"bytes in flight (as received and inflated)" in answer
        assert collector.export(plain)[0] == 200  # what fits in the room left is taken
        assert collector.export(gzip.compress(plain), **{"Content-Encoding": "gzip"})[0] == 200
        stats = collector.json("/stats")
        assert stats["otlp_bytes_in_flight"] == 7 * 64 * 1024
        assert stats["otlp_bytes_in_flight_peak"] == stats["otlp_max_bytes_in_flight"] == 8 * 64 * 1024
    finally:
        for sock in waiting:
            sock.close()
        collector.stop()


def test_gzip_bombs_at_once_hold_no_more_than_the_bound_in_flight() -> None:
    collector = OtlpCollector()  # --otlp-max-body 8MiB: 64 MiB in flight at most
    try:
        bomb = gzip_bomb(8 * MIB)
        assert len(bomb) < 10 * 1024
        before = rss_bytes(collector.proc.pid)

        def send(_: int) -> tuple[int, str | None]:
            status, headers, _body = collector.export(bomb, **{"Content-Encoding": "gzip"})
            return status, headers.get("Retry-After")

        with concurrent.futures.ThreadPoolExecutor(60) as pool:
            answers = list(pool.map(send, range(60)))
        grown = rss_bytes(collector.proc.pid, "VmHWM") - before
        assert set(answers) <= {(200, None), (503, "1")}, answers  # stored, or to be sent again later
        # The bodies in flight, and one request decoded at a time (a few times its body): not 60 bodies of 8 MiB.
        assert grown <= 64 * MIB + 16 * 8 * MIB, f"grew by {grown} bytes"  # (measured: 117 MiB; 464 MiB before)
        stats = collector.json("/stats")
        assert stats["otlp_items"]["/v1/traces"]["accepted"] == answers.count((200, None))
        assert stats["otlp_bytes_in_flight_peak"] <= stats["otlp_max_bytes_in_flight"] == 64 * MIB
        assert stats["otlp_bytes_in_flight"] == 0
    finally:
        collector.stop()


def healthz_answers(collector: CollectorProcess) -> bool:
    """``GET /healthz`` is answered 200 within a generous deadline (a liveness probe's is a second or a few)."""
    with urllib.request.urlopen(collector.http_url + "/healthz", timeout=30) as response:
        return bool(response.status == 200)


def test_a_flood_of_otlp_connections_leaves_healthz_answering() -> None:
    collector = OtlpCollector("--max-http-connections", "20", "--http-timeout", "300")
    idle = []
    try:
        for _ in range(40):  # more than the API may hold, on the OTLP port: requests begun, never finished
            sock = otlp_socket(collector)
            sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
            idle.append(sock)
        body = request_of(span("flood", T0, T0 + 1)).SerializeToString()
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            flood = [pool.submit(collector.export, body) for _ in range(300)]
            polls = [healthz_answers(collector) for _ in range(7)]
            statuses = [answer.result()[0] for answer in flood]
        assert polls == [True] * 7
        assert statuses == [200] * 300
        wait_for(
            lambda: collector.json("/stats"),
            until=lambda s: s["otlp_connections"] == 40,
            timeout_s=30,
            what="the forty idle ones open",
        )
        stats = collector.json("/stats")
        assert stats["http_connections_refused"] == stats["otlp_connections_refused"] == 0
    finally:
        for sock in idle:
            sock.close()
        collector.stop()


def test_past_otlp_max_connections_a_connection_gets_503_with_retry_after_at_once() -> None:
    collector = OtlpCollector("--otlp-max-connections", "10")
    held = []
    try:
        for _ in range(10):
            sock = otlp_socket(collector)
            sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
            held.append(sock)
        wait_for(
            lambda: collector.json("/stats"),
            until=lambda s: s["otlp_connections"] == 10,
            timeout_s=30,
            what="the ten open",
        )
        for _ in range(20):
            with otlp_socket(collector) as extra:
                answer = b""
                while chunk := extra.recv(4096):  # answered before it sends anything, and closed
                    answer += chunk
            head, _, text = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503") and b"\r\nRetry-After: 1\r\n" in head
            assert text == b"10 connections open, the most (otlp_max_connections); retry later\n"
        assert healthz_answers(collector)
        assert collector.json("/stats")["otlp_connections_refused"] == 20
    finally:
        for sock in held:
            sock.close()
        collector.stop()
    refusals = [line for line in collector.lines if "refusing OTLP connection" in line]
    assert len(refusals) == 1 and "otlp_max_connections=10 reached" in refusals[0]  # once a minute at most


def test_malformed_requests_are_one_log_line_a_listener_not_a_traceback_each() -> None:
    collector = OtlpCollector()
    try:
        http_port = int(collector.http_url.rsplit(":", 1)[1])
        otlp_port = int(collector.otlp_base.rsplit(":", 1)[1])
        started = len(collector.lines)
        for port, path in ((http_port, "/healthz"), (otlp_port, "/v1/traces")):
            for _ in range(100):
                with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Bad: a\0b\r\n\r\n".encode())
                    assert sock.recv(4096).startswith(b"HTTP/1.0 400")
        stats: dict[str, Any] = collector.json("/stats")
    finally:
        collector.stop()  # (every line it wrote is read)
    logged = collector.lines[started:]
    assert not [line for line in logged if "Traceback" in line or "ERROR" in line]
    malformed = [line for line in logged if "malformed" in line]
    assert len(malformed) == 2, malformed
    assert (
        "WARNING" in malformed[0] and "malformed HTTP request from 127.0.0.1: Invalid header value char" in malformed[0]
    )
    assert "malformed OTLP request from 127.0.0.1" in malformed[1]
    assert stats["http_requests_malformed"] == stats["otlp_requests_malformed"] == 100


def test_a_peer_that_closes_midway_through_its_body_gives_its_bytes_back_and_logs_no_traceback() -> None:
    collector = OtlpCollector()
    try:
        started = len(collector.lines)
        for _ in range(20):  # an exporter that gives up midway (its timeout, its process stopping)
            with otlp_socket(collector) as sock:
                sock.sendall(
                    b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                    b"Content-Length: 100000\r\n\r\n" + bytes(5000)
                )
        wait_for(
            lambda: collector.json("/stats"),
            until=lambda s: s["otlp_requests_refused"].get("400") == 20,
            timeout_s=30,
            what="the twenty counted",
        )
        assert collector.json("/stats")["otlp_bytes_in_flight"] == 0
    finally:
        collector.stop()  # (every line it wrote is read)
    logged = collector.lines[started:]
    assert not [line for line in logged if "Traceback" in line or "ERROR" in line]


def test_a_peer_that_does_not_speak_http_at_all_is_counted_malformed_and_logged_once() -> None:
    collector = OtlpCollector()
    try:
        started = len(collector.lines)
        for _ in range(10):  # an exporter told https:// of a plain listener: its TLS ClientHello first
            with otlp_socket(collector) as sock:
                sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64) + b"\r\n\r\n")
                assert sock.recv(4096).startswith(b"HTTP/1.0 400")
        stats: dict[str, Any] = collector.json("/stats")
    finally:
        collector.stop()  # (every line it wrote is read)
    assert stats["otlp_requests_malformed"] == 10
    malformed = [line for line in collector.lines[started:] if "malformed" in line]
    assert len(malformed) == 1 and "WARNING" in malformed[0], malformed
    assert "malformed OTLP request from 127.0.0.1: " in malformed[0]


def test_bodies_that_stop_coming_are_ended_after_http_timeout_and_give_their_bytes_back() -> None:
    collector = OtlpCollector("--otlp-max-body", "64KiB", "--http-timeout", "0.5")
    plain = request_of(span("small", T0, T0 + 1)).SerializeToString()
    waiting = []
    try:
        # Eight requests that hold the bound in flight, their bodies never sent: without a deadline, every exporter
        # would be answered 503 for as long as they stay open.
        waiting = [announcing_the_largest_body(collector) for _ in range(8)]
        for sock in waiting:
            answer = sock.recv(4096)  # (each one's answer, once its body has come nowhere within the timeout)
            assert answer.startswith(b"HTTP/1.1 408"), answer
            assert b"no part of the body for http_timeout_s=0.5" in answer
        assert collector.export(plain)[0] == 200
        stats = collector.json("/stats")
        assert stats["otlp_requests_refused"]["408"] == 8
        assert stats["otlp_bytes_in_flight"] == 0
    finally:
        for sock in waiting:
            sock.close()
        collector.stop()


def test_a_request_of_more_resources_or_items_than_it_may_hold_is_refused_413_naming_the_bound_before_it_is_read() -> (
    None
):
    """8 KB of gzip that inflate to 4 million empty ResourceSpans (under --otlp-max-body) held the event loop for
    seconds as they were read: the request is refused before, saying which bound it passed, and the API answers."""
    collector = OtlpCollector()
    try:
        flood = gzip.compress(b"\x0a\x00" * 4_194_204, 9)
        status, _, body = collector.export(flood, **{"Content-Encoding": "gzip"})
        assert status == 413 and b"more than 4096 resources, the most one may hold" in body
        metrics = ExportMetricsServiceRequest()
        metrics.resource_metrics.add().scope_metrics.add().metrics.extend(Metric() for _ in range(MAX_ITEMS + 1))
        status, _, body = collector.export(metrics.SerializeToString(), path="/v1/metrics")
        assert status == 413 and f"more than {MAX_ITEMS} metrics and data points".encode() in body
        scopes = json.dumps({"resourceLogs": [{"scopeLogs": [{}] * (MAX_SCOPES + 1)}]}).encode()
        status, _, body = collector.export(scopes, "application/json", path="/v1/logs")
        assert status == 413 and f"more than {MAX_SCOPES} scopes".encode() in body
        assert collector.json("/healthz")["status"] == "ok"
        status, _, _ = collector.export(request_of(span("after", T0, T0 + 5)).SerializeToString())
        assert status == 200
        assert [e["name"] for e in events(collector.snapshot(), "X")] == ["after"]
        assert collector.json("/stats")["otlp_requests_refused"].get("413") == 3
    finally:
        collector.stop()
