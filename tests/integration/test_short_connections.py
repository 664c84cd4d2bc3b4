"""Short connections, as the collector sees them: a crowd of them is logged at INFO a few at a time, every one of
them still logged (at DEBUG) or counted; and a client that sends its tables and frames with its HELLO, before the
WELCOME, has all of them stored (a connection's own buffer starts small and grows)."""

from __future__ import annotations

import re
import socket

from collector_process import CollectorProcess, RawClient, hello
from ringtrace.collector.ingest.traffic import CONNECTION_LINES_BURST
from ringtrace.wire.frames import Flush, FlushAck, Welcome, encode, preamble
from ringtrace.wire.model import INSTANT, THREAD_TRACK, TrackInfo
from ringtrace.wire.reader import CLOSED, NEED_DATA, FrameReader
from ringtrace.wire.stream_encoder import StreamEncoder

_LINE = re.compile(r" (INFO|DEBUG) ringtrace\.collector\.ingest: connection from \S+: process 'raw' pid (\d+) ")
_MORE = re.compile(r"; (\d+) more connections since, logged at DEBUG")


def test_a_crowd_of_connections_is_logged_every_one_at_info_or_debug() -> None:
    connections = CONNECTION_LINES_BURST + 30
    pids = range(10_000, 10_000 + connections)
    collector = CollectorProcess("--log-level", "DEBUG")
    try:
        for pid in pids:
            with RawClient(collector.tcp_address, hello(pid=pid, instance=f"crowd-{pid}")) as raw:
                assert isinstance(raw.answer, Welcome)
        for pid in pids:
            collector.wait_for_log(lambda line, pid=pid: f"process 'raw' pid {pid} " in line)
        levels = {int(m[2]): m[1] for line in collector.lines if (m := _LINE.search(line))}
        assert sorted(levels) == list(pids), "each connection has its line, at one level or the other"
        info = [line for line in collector.lines if (m := _LINE.search(line)) and m[1] == "INFO"]
        counted = sum(int(m[1]) for line in info if (m := _MORE.search(line)))
        debug = sum(level == "DEBUG" for level in levels.values())
        assert len(info) >= CONNECTION_LINES_BURST, "a burst is logged at INFO whole"
        assert counted <= debug, "an INFO line counts only lines that went at DEBUG"
        assert len(info) + debug == connections
    finally:
        collector.stop()


def test_tables_and_frames_sent_with_the_hello_are_all_stored(collector: CollectorProcess) -> None:
    count = 3000  # tens of KiB in one send: more than a connection's first reads take
    encoder = StreamEncoder(max_events_per_frame=64)
    batch = encoder.encode(TrackInfo(1, THREAD_TRACK, "main", 1), [INSTANT, "early", 1000, 1000, None] * count)
    events = b"".join(frame for frame, _ in batch.events)
    data = b"".join([preamble(), encode(hello(pid=4343, instance="eager")), *encoder.prefix(), *batch.control])
    assert len(data + events) > 16 * 1024
    host, port = collector.tcp_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data + events + encode(Flush(91)))
        reader, answers = FrameReader("collector"), []
        while not any(isinstance(a, FlushAck) and a.token == 91 for a in answers):
            frame = reader.next_frame()
            if frame is CLOSED:
                raise AssertionError(f"closed by the collector after {answers}")
            if frame is NEED_DATA:
                reader.receive_data(sock.recv(65536))
            else:
                answers.append(frame)
        assert isinstance(answers[0], Welcome)
    collector.wait_for_stored(count)
    assert collector.json("/healthz")["stored_events"] == count
