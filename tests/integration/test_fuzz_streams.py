"""Whole streams, mutated, against a real collector while a good client streams alongside: every event of the good
client is stored and shown with its own timestamps, the snapshot stays valid, the collector logs no traceback and its
memory stays bounded."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from collector_process import CollectorProcess, RawClient
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.wire.frames import Hello, encode, preamble
from ringtrace.wire.model import INSTANT, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder

CAPACITY_MB = 64
EVENTS_PER_TRACK = 40

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10**6)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("u32"), st.integers(0, 10**6), st.sampled_from([0, 1, 2**16, 2**31 - 1, 2**32 - 1])),
    st.tuples(st.just("repeat"), st.integers(0, 10**6), st.integers(1, 400)),
)


def stream(name: str) -> tuple[Hello, bytes]:
    """A valid client stream: its HELLO, and the frames after it (the tables, EVENTS frames on two tracks)."""
    encoder = StreamEncoder(max_events_per_frame=16)
    now = time.monotonic_ns()
    hello = Hello(os.getpid(), socket.gethostname(), name, name, "", now, time.time_ns(), "fuzz")
    frames = encoder.prefix()
    for track_id in (1, 2):
        track = TrackInfo(track_id, THREAD_TRACK, f"t{track_id}", 100 + track_id)
        records: list[object] = []
        for i in range(EVENTS_PER_TRACK):  # kind, name, start, end, args
            start, end = now + i * 1000, now + i * 1000 + (500 if i % 2 else 0)
            records += [SPAN if i % 2 else INSTANT, f"e{i % 5}", start, end, {"i": i, "s": "x" * (i % 7)}]
        batch = encoder.encode(track, records)
        frames += [*batch.control, *(frame for frame, _ in batch.events)]
    return hello, b"".join(frames)


def mutated(data: bytes, mutations: list[tuple[object, ...]]) -> bytes:
    out = bytearray(data)
    for kind, offset, *rest in mutations:
        at = int(offset) % (len(out) + 1)  # type: ignore[call-overload]
        value = rest[0] if rest else None
        if kind == "flip" and at < len(out):
            out[at] = int(value)  # type: ignore[call-overload]
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = value  # type: ignore[assignment]
        elif kind == "u32":
            out[at : at + 4] = int(value).to_bytes(4, "little")  # type: ignore[call-overload]
        elif kind == "repeat":
            out[at:at] = out[at : at + int(value)]  # type: ignore[call-overload]
    return bytes(out)


def send_hostile(address: str, data: bytes) -> None:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.settimeout(0.2)
        try:
            sock.sendall(data)
            while sock.recv(65536):  # until the collector closes it, or has nothing more to say
                pass
        except OSError:
            pass


def test_mutated_streams_harm_no_good_client() -> None:
    collector = CollectorProcess("--capacity", f"{CAPACITY_MB}MB")
    good: list[str] = []
    started = time.time_ns()
    try:

        @settings(max_examples=60, deadline=None)
        @given(mutations=st.lists(mutation, min_size=1, max_size=6))
        def hostile_then_good(mutations: list[tuple[object, ...]]) -> None:
            hello, frames = stream(f"bad-{len(good)}")
            send_hostile(collector.tcp_address, mutated(preamble() + encode(hello) + frames, mutations))
            name = f"good-{len(good)}"
            hello, frames = stream(name)
            with RawClient(collector.tcp_address, hello) as client:  # waits for WELCOME
                client.send_raw(frames)
                client.flush()  # every event stored
            good.append(name)

        hostile_then_good()
        trace = json.loads(json.dumps(collector.snapshot()))  # valid JSON, round trip
        origin = trace["otherData"]["clock_origin_wall_ns"]
        pids = {p["pid"]: p["process_name"] for p in trace["otherData"]["processes"]}
        shown: dict[str, int] = {}
        for event in trace["traceEvents"]:
            name = pids.get(event["pid"], "")
            if event["ph"] in ("X", "i") and name.startswith("good-"):
                shown[name] = shown.get(name, 0) + 1
                assert started <= origin + event["ts"] * 1000 <= time.time_ns()  # its own clock, not a liar's
        assert shown == {name: 2 * EVENTS_PER_TRACK for name in good}
        assert not [line for line in collector.lines if "Traceback" in line or " ERROR " in line]
        status = Path(f"/proc/{collector.proc.pid}/status").read_text()
        rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
        assert rss_kb * 1024 <= CAPACITY_MB * 10**6 + 128 * 2**20
    finally:
        collector.stop()
