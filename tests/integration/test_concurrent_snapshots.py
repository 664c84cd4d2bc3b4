"""Snapshots read by many readers at once, while clients of many different schemas come and go: every snapshot is
whole (the caches of decoded SCHEMA frames that the readers and ingest share evict safely), and one that fails after
its status was sent ends as a broken response, never as a short one that passes for whole."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from collector_process import CollectorProcess, events, run_script
from ringtrace.client import Streamer, StreamerOptions, Timeline
from ringtrace.collector.service.app import Collector
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.wire.frames import Schema

#: Connections, each declaring a schema no other does (more than the collector's caches of them hold).
SCHEMAS = 40
READERS = 8
SNAPSHOTS_EACH = 6

#: One timeline and connection after another, each after one more typed event class is defined: each connection's
#: SCHEMA frame declares the kinds defined so far, so no two are the same.
CLIENT = """
import sys
from ringtrace.client import Event, Streamer, StreamerOptions, Timeline, u32
address, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
delivered = True
for i in range(first, first + count):
    kind = type(f"Kind{i}", (Event,), {"__annotations__": {"n": u32}, "__module__": __name__})
    tl = Timeline(f"schema-{i}", [Streamer(address, StreamerOptions(process_name="schemas"))])
    tl.push(kind(n=i))
    delivered = tl.flush(timeout_s=30) and delivered
    tl.close()
print("delivered:", delivered)
"""


def _switch_often(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python switches threads as often as it can: a race between them shows within seconds,
    not within hours of a soak (``sitecustomize`` runs at start-up)."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.setswitchinterval(1e-6)\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}


def test_concurrent_snapshots_of_many_schemas_are_whole(tmp_path: Path) -> None:
    collector = CollectorProcess(env=_switch_often(tmp_path))
    try:
        assert "delivered: True" in run_script(collector, CLIENT, "0", str(SCHEMAS))
        collector.wait_for_stored(SCHEMAS)
        # More clients of new schemas connect while the readers read: ingest decodes SCHEMA frames meanwhile too.
        more = subprocess.Popen(
            [sys.executable, "-c", CLIENT, collector.tcp_address, str(SCHEMAS), str(SCHEMAS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        failures: list[str] = []
        whole: list[int] = []

        def read() -> None:
            served, deadline = 0, time.monotonic() + 240
            while served < SNAPSHOTS_EACH and time.monotonic() < deadline:
                try:
                    status, body = collector.get("/snapshot")
                except Exception as exc:  # a broken response: what the reader sees of a snapshot that failed
                    failures.append(f"{type(exc).__name__}: {exc}")
                    served += 1
                    continue
                if status == 503:  # every snapshot slot taken (max_snapshots): asked again, as Retry-After says
                    time.sleep(0.05)
                    continue
                served += 1
                try:
                    trace = json.loads(body)
                except ValueError as exc:  # a 200 whose body was cut short
                    failures.append(f"HTTP {status}, {len(body)} bytes: {exc}")
                    continue
                if status != 200:
                    failures.append(f"HTTP {status}: {body[:200]!r}")
                    continue
                whole.append(sum(e["name"].startswith("Kind") for e in events(trace, "i")))

        readers = [threading.Thread(target=read) for _ in range(READERS)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout=300)
        out, _ = more.communicate(timeout=120)
        assert "delivered: True" in out
        assert not failures, failures
        assert len(whole) == READERS * SNAPSHOTS_EACH
        assert all(SCHEMAS <= kinds <= 2 * SCHEMAS for kinds in whole), whole
        assert not [line for line in collector.lines if "Traceback" in line or "failed after" in line]
    finally:
        collector.stop()


def _get_until_closed(address: tuple[str, int], request: bytes) -> tuple[bytes, bool]:
    """What an HTTP client reads of ``request``'s answer until the connection ends, and whether it ended by a reset."""
    with socket.create_connection(address, timeout=60) as sock:
        sock.sendall(request)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            return data, True
        return data, False


def test_a_snapshot_that_fails_midway_is_a_broken_response_not_a_short_whole_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The second stream's SCHEMA fails to decode on a snapshot's reader thread (as the race between readers made
    # it), after the first stream's events (more than one piece of the response) are written.
    decode_body = Schema.decode_body.__func__  # type: ignore[attr-defined]
    reader_decodes = [0]

    def failing_on_readers(cls: type[Schema], body: bytes) -> Schema:
        if threading.current_thread().name.startswith("ringtrace-reader"):
            reader_decodes[0] += 1
            if reader_decodes[0] % 2 == 0:
                raise KeyError("a reader's failure")
        return decode_body(cls, body)  # type: ignore[no-any-return]

    async def scenario() -> list[tuple[bytes, bool]]:
        collector = Collector(CollectorConfig(tcp_port=0, http_port=0))
        await collector.start()
        try:
            assert collector.tcp_address is not None and collector.http_address is not None
            address = "{}:{}".format(*collector.tcp_address)
            await asyncio.to_thread(_record_two_streams, address)
            monkeypatch.setattr(Schema, "decode_body", classmethod(failing_on_readers))
            answers = []
            for version in (b"1.0", b"1.1"):  # a body ended by the close, and a chunked one
                request = b"GET /snapshot HTTP/" + version + b"\r\nHost: test\r\nConnection: close\r\n\r\n"
                answers.append(await asyncio.to_thread(_get_until_closed, collector.http_address, request))
            return answers
        finally:
            await collector.stop()

    with caplog.at_level(logging.ERROR, "ringtrace.collector.http"):
        answers = asyncio.run(scenario())
    for data, was_reset in answers:
        assert was_reset, data[-200:]
    failed = [r for r in caplog.records if "failed after" in r.getMessage()]
    assert len(failed) == 2 and all(r.exc_info is not None for r in failed), caplog.text


def _record_two_streams(address: str) -> None:
    """Two streams to the collector: the first with more than a piece of a response's events."""
    for name, count in (("first", 5_000), ("second", 10)):
        tl = Timeline(name, [Streamer(address, StreamerOptions(process_name=name))])
        for i in range(count):
            tl.instant("filler", i=i, text="x" * 64)
        assert tl.flush(timeout_s=30)
        tl.close()
