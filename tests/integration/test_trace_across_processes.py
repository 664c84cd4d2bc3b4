"""One request followed across processes: an aiohttp server and a client calling it, two real processes recording
with ringtrace into a real collector (``trace_peers.py``); the snapshot holds the arrow from the client's span to the
server's, and ``?trace_id=`` selects one request in both processes, with the plain scope its handler recorded inside
its span. Once natively (``traceparent`` written and read by ringtrace), once with OpenTelemetry's SDK making and
propagating the spans (sent as OTLP), ringtrace's joining."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
from perfetto_model import PerfettoTrace

pytestmark = pytest.mark.integration

PEERS = Path(__file__).with_name("trace_peers.py")
CALLS = 3
_OTLP_LISTEN = re.compile(r"otlp listening on https?://([\d.]+):(\d+)")


@pytest.fixture
def collector() -> Iterator[CollectorProcess]:
    process = CollectorProcess("--otlp-http", "127.0.0.1:0")
    try:
        yield process
    finally:
        process.stop()


def otlp_url(collector: CollectorProcess) -> str:
    match = _OTLP_LISTEN.search(collector.wait_for_log(lambda line: "otlp listening" in line))
    assert match is not None
    return f"http://{match.group(1)}:{match.group(2)}/v1/traces"


def run_request(collector: CollectorProcess, *otel: str) -> list[str]:
    """The server and the client, each a process of its own; the trace ids of the client's calls."""
    server = subprocess.Popen(
        [sys.executable, str(PEERS), "server", collector.tcp_address, *otel], stdout=subprocess.PIPE, text=True
    )
    with server:
        try:
            assert server.stdout is not None
            port = server.stdout.readline().split()[1]
            client = subprocess.run(
                [sys.executable, str(PEERS), "client", collector.tcp_address, port, str(CALLS), *otel],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert client.returncode == 0, client.stderr
            status, _ = get_url(f"http://127.0.0.1:{port}/stop")
            assert status == 200
            assert server.wait(60) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    trace_ids: list[str] = json.loads(client.stdout)
    assert len(set(trace_ids)) == CALLS
    return trace_ids


def get_url(url: str) -> tuple[int, bytes]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read()


def process_names(trace: dict[str, Any]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}


def perfetto_flows(trace: bytes) -> tuple[list[int], list[int]]:
    """The flow ids leaving slices, and those ending at slices, in a Perfetto trace."""
    leaving, arriving = [], []
    for packet in Trace.FromString(trace).packet:
        leaving += packet.track_event.flow_ids
        arriving += packet.track_event.terminating_flow_ids
    return leaving, arriving


def test_a_request_from_an_aiohttp_client_to_an_aiohttp_server_is_one_trace(collector: CollectorProcess) -> None:
    trace_ids = run_request(collector)
    renders = set()
    for trace_id in trace_ids:
        trace = collector.snapshot(f"?trace_id={trace_id}")
        slices = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
        names = process_names(trace)
        # One request, in both processes, and nothing of the other requests: its spans, and the plain scope its
        # handler recorded inside its span (on its task's lane: the other requests ran at the same time).
        in_request = sorted(e["name"] for e in trace["traceEvents"] if e["ph"] == "X")
        assert in_request == ["GET /work", "GET /work", "query", "render"]
        calls = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "GET /work"]
        (client,) = [e for e in calls if names[e["pid"]] == "client"]
        (server,) = [e for e in calls if names[e["pid"]] == "server"]
        render = slices["render"]
        assert "trace_id" not in render.get("args", {}) and (render["pid"], render["tid"]) == (
            server["pid"],
            server["tid"],
        )
        assert server["ts"] <= render["ts"] and render["ts"] + render["dur"] <= server["ts"] + server["dur"]
        renders.add(render["ts"])
        assert client["args"]["kind"] == "client" and server["args"]["kind"] == "server"
        assert server["args"]["parent_span_id"] == client["args"]["span_id"]
        assert slices["query"]["args"]["parent_span_id"] == server["args"]["span_id"]
        # The arrow: leaving the client's span, arriving at the server's.
        assert client["flow_out"] is True and server["flow_in"] is True
        assert client["bind_id"] == server["bind_id"]
        status, body = collector.get(f"/snapshot?trace_id={trace_id}&format=perfetto")
        assert status == 200
        leaving, arriving = perfetto_flows(body)
        assert len(leaving) == len(arriving) == 1 and leaving == arriving
        assert sorted(s.name for s in PerfettoTrace(body).slices) == in_request
    assert len(renders) == CALLS  # each request's own
    # The whole snapshot holds an arrow per request.
    everything = collector.snapshot()
    bound = [e for e in everything["traceEvents"] if "bind_id" in e]
    assert len(bound) == 2 * CALLS and len({e["bind_id"] for e in bound}) == CALLS


def test_opentelemetry_propagates_the_request_and_ringtrace_spans_join_its_trace(collector: CollectorProcess) -> None:
    trace_ids = run_request(collector, "--otel", otlp_url(collector))
    for trace_id in trace_ids:
        trace = collector.snapshot(f"?trace_id={trace_id}")
        names = process_names(trace)
        slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        begun = {e["name"]: e for e in slices if names[e["pid"]].startswith("otel")}  # OTLP spans
        ours = {e["name"]: e for e in slices if not names[e["pid"]].startswith("otel")}  # ringtrace's
        otel_client, otel_server = begun["GET /work"], begun["handle /work"]
        assert names[otel_client["pid"]].startswith("otel client") and names[otel_server["pid"]].startswith(
            "otel server"
        )
        assert otel_server["args"]["parent_span_id"] == otel_client["args"]["span_id"]
        assert otel_client["flow_out"] is True and otel_server["flow_in"] is True
        assert otel_client["bind_id"] == otel_server["bind_id"]
        # ringtrace's spans, in the client and the server processes, are in OpenTelemetry's trace.
        assert names[ours["prepare"]["pid"]] == "client" and names[ours["query"]["pid"]] == "server"
        assert sorted(ours) == ["prepare", "query", "render"]  # the plain scope nested in ringtrace's "query"
        assert ours["query"]["ts"] <= ours["render"]["ts"] and ours["render"]["tid"] == ours["query"]["tid"]
        assert ours["prepare"]["args"]["trace_id"] == ours["query"]["args"]["trace_id"] == trace_id
        assert ours["prepare"]["args"]["parent_span_id"] == otel_client["args"]["span_id"]
        assert ours["query"]["args"]["parent_span_id"] == otel_server["args"]["span_id"]
        status, body = collector.get(f"/snapshot?trace_id={trace_id}&format=perfetto")
        assert status == 200
        leaving, arriving = perfetto_flows(body)
        assert len(leaving) == 1 and leaving == arriving


def docs_example(first_line: str) -> str:
    """The fenced python block of docs/tracing.md that starts with ``first_line``."""
    text = (Path(__file__).parents[2] / "docs" / "tracing.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (block,) = [block for block in blocks if block.startswith(first_line)]
    return block


def test_the_docs_two_sides_make_one_trace(collector: CollectorProcess) -> None:
    with socket.socket() as probe:  # a port for the docs' server, which names one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def code(first_line: str) -> str:
        block = docs_example(first_line).replace("127.0.0.1:7700", collector.tcp_address)
        return block.replace("port=8080", f"port={port}").replace("127.0.0.1:8080", f"127.0.0.1:{port}")

    server = subprocess.Popen([sys.executable, "-c", code("# server.py")], stdout=subprocess.PIPE, text=True)
    with server:
        try:
            assert server.stdout is not None
            for line in server.stdout:  # aiohttp says so once it listens
                if "Running on" in line:
                    break
            client = subprocess.run(
                [sys.executable, "-c", code("# client.py")], capture_output=True, text=True, timeout=60, check=False
            )
            assert client.returncode == 0, client.stderr
            assert "delivered: True" in client.stdout
            server.send_signal(signal.SIGINT)  # run_app stops; the client library delivers at exit
            assert server.wait(60) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    trace_id = re.search(r"trace ([0-9a-f]{32})", client.stdout)[1]  # type: ignore[index]
    trace = collector.snapshot(f"?trace_id={trace_id}")
    names = process_names(trace)
    slices = sorted((names[e["pid"]], e["name"]) for e in trace["traceEvents"] if e["ph"] == "X")
    assert slices == [("client", "GET /work"), ("server", "GET /work"), ("server", "query"), ("server", "render")]
    bound = [e for e in trace["traceEvents"] if "bind_id" in e]
    assert len(bound) == 2 and len({e["bind_id"] for e in bound}) == 1
