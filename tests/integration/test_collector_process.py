"""The collector process: refusals at start, a clean stop on SIGTERM, and what short connections leave behind."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from collector_process import CollectorProcess, hello
from ringtrace.wire.frames import encode, preamble


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ringtrace.collector", "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_capacity_below_two_frames_is_refused_naming_both_sizes() -> None:
    done = _run("--capacity", "1MiB")
    assert done.returncode == 2
    assert "capacity of 1048576 bytes must hold at least 2 frames of --max-frame-size 1048576" in done.stderr
    assert "give --capacity 3MB or more, or a smaller --max-frame-size" in done.stderr  # what to do
    assert done.stderr.count("\n") == 1, done.stderr


def test_malformed_size_is_refused_by_the_parser() -> None:
    done = _run("--capacity", "lots")
    assert done.returncode == 2
    assert "--capacity" in done.stderr and "'lots'" in done.stderr


def test_a_size_past_64_bits_is_refused_naming_the_limit() -> None:
    done = _run("--capacity", "99999999TiB")
    assert done.returncode == 2
    assert "--capacity: size must be at most 9223372036854775807 bytes (8 EiB, 2**63 - 1), got '99999999TiB'" in (
        done.stderr
    )


def test_sigterm_stops_the_collector_cleanly() -> None:
    collector = CollectorProcess()
    try:
        collector.proc.terminate()
        assert collector.proc.wait(30) == 0
        collector.wait_for_log(lambda line: "shutting down" in line)
    finally:
        collector.stop()


def _rss_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024  # type: ignore[union-attr]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc")
def test_closed_connections_do_not_hold_their_read_buffers(collector: CollectorProcess) -> None:
    # Each connection reads into a 64 KiB buffer; a closed one must not stay alive until its handshake timer fires.
    host, port = collector.tcp_address.rsplit(":", 1)
    before = _rss_mib(collector.proc.pid)
    for i in range(1500):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(preamble() + encode(hello(pid=10_000 + i, instance=f"short-{i}")))
            sock.recv(100)  # WELCOME
    collector.get("/healthz")  # every close processed by now
    assert _rss_mib(collector.proc.pid) - before < 40  # 1500 x 64 KiB would be 94 MiB


@pytest.mark.parametrize("flag", ["--tcp", "--http", "--otlp-http"])
def test_an_address_in_use_is_refused_at_start_naming_its_flag(flag: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = _run(flag, address)
    assert done.returncode == 1
    assert f"cannot start: {flag} {address}: cannot listen there: address already in use\n" in done.stderr


def test_an_address_in_use_set_in_the_environment_is_refused_naming_its_variable() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "ringtrace.collector", "--tcp", "127.0.0.1:0"],
            env={**os.environ, "RINGTRACE_HTTP": address},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"cannot start: --http {address}: cannot listen there: address already in use (set by RINGTRACE_HTTP)" in (
        done.stderr
    )


def test_an_in_memory_capacity_past_the_machines_memory_is_refused_naming_it() -> None:
    done = _run("--capacity", "99999TiB")  # (within 64 bits; more than any machine this runs on)
    assert done.returncode == 2
    assert "--capacity: 109950063265972224 bytes, with --incident-capacity" in done.stderr
    assert "is more than the memory this collector can have (" in done.stderr
    assert "--data-dir" in done.stderr
