"""Windows by overlap through a real collector: a span that began before ``since`` and ended after it is in the
Chrome snapshot, the Perfetto trace, the web view's ``/timeline`` and ``ringtrace snapshot --since``; an instant
before ``since`` is not."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_process import CollectorProcess
from perfetto_model import PerfettoTrace
from ringtrace.collector.command.main import main

RECORD = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="overlap")
for i in range(50):
    with tl.scope(f"before{i}"):
        pass
with tl.scope("long"):
    tl.instant("i-before")
    assert tl.flush(5)  # (what came before is stored in frames of its own: the index leaves them out)
    time.sleep(0.05)
    mid = time.time_ns()
    time.sleep(0.05)
    tl.instant("i-after")
print(mid, tl.flush(5))
"""
SHOWN = ["i-after", "long"]


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[CollectorProcess, int]]:
    collector = CollectorProcess()
    try:
        done = subprocess.run(
            [sys.executable, "-c", RECORD, collector.tcp_address], capture_output=True, text=True, timeout=60
        )
        mid, delivered = done.stdout.split()
        assert done.returncode == 0 and delivered == "True", done.stderr
        yield collector, int(mid)
    finally:
        collector.stop()


def test_a_span_across_since_is_in_every_format(recorded: tuple[CollectorProcess, int]) -> None:
    collector, mid = recorded
    chrome = collector.snapshot(f"?since={mid}")
    assert sorted(e["name"] for e in chrome["traceEvents"] if e["ph"] != "M") == SHOWN
    (long,) = [e for e in chrome["traceEvents"] if e["name"] == "long"]
    assert long["ts"] * 1000 + chrome["otherData"]["clock_origin_wall_ns"] < mid  # with its own start
    status, body = collector.get(f"/snapshot?since={mid}&format=perfetto")
    assert status == 200
    trace = PerfettoTrace(body)
    assert sorted([s.name for s in trace.slices] + [i.name for i in trace.instants]) == SHOWN
    status, body = collector.get(f"/timeline?since={mid}")
    assert status == 200
    doc = json.loads(body)
    assert sorted(doc["names"][i] for block in doc["blocks"] for i in block["name"]) == SHOWN
    # Before ``since``: the short spans and the instant; ``until`` at ``mid`` keeps the long span too.
    before = collector.snapshot(f"?until={mid}")
    names = {e["name"] for e in before["traceEvents"] if e["ph"] != "M"}
    assert names == {f"before{i}" for i in range(50)} | {"long", "i-before"}


def test_the_command_takes_the_same_window(
    recorded: tuple[CollectorProcess, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    collector, mid = recorded
    out = tmp_path / "window.json"
    assert main(["snapshot", collector.http_url, "-o", str(out), "--since", str(mid)]) == 0
    capsys.readouterr()
    events = json.loads(out.read_bytes())["traceEvents"]
    assert sorted(e["name"] for e in events if e["ph"] != "M") == SHOWN
