"""The collector process: refusals at start, and a clean stop on SIGTERM."""

from __future__ import annotations

import subprocess
import sys

from collector_process import CollectorProcess


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ringtrace.collector", "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_capacity_below_two_segments_is_refused_naming_both_sizes() -> None:
    done = _run("--capacity", "1MiB")
    assert done.returncode == 2
    assert "capacity of 1048576 bytes must hold at least 2 segments" in done.stderr


def test_malformed_size_is_refused_by_the_parser() -> None:
    done = _run("--capacity", "lots")
    assert done.returncode == 2
    assert "--capacity" in done.stderr and "'lots'" in done.stderr


def test_sigterm_stops_the_collector_cleanly() -> None:
    collector = CollectorProcess()
    try:
        collector.proc.terminate()
        assert collector.proc.wait(30) == 0
        collector.wait_for_log(lambda line: "shutting down" in line)
    finally:
        collector.stop()
