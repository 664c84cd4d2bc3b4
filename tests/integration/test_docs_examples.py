"""The docs' examples, run as they are against a real collector, and what reached the snapshot.

Each example is the fenced ``python`` block after a ``<!-- example: NAME -->`` line, in README.md or a page of
docs/. It runs in a fresh interpreter in a temporary directory, with the docs' collector address replaced by the test
collector's.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, events, metadata
from ringtrace.client import read_trace_file

ROOT = Path(__file__).parents[2]
#: Every file whose examples run: the README and each page of the docs site.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
EXAMPLE = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\n```python\n(?P<code>.*?)```", re.S)
FOUND = [(match["name"], match["code"], path) for path in DOCUMENTS for match in EXAMPLE.finditer(path.read_text())]
EXAMPLES = {name: code for name, code, _ in FOUND}


def run_example(name: str, collector: CollectorProcess, tmp_path: Path) -> tuple[dict[str, Any], str]:
    code = EXAMPLES[name].replace("127.0.0.1:7700", collector.tcp_address)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "delivered: True" in done.stdout, done.stdout + done.stderr
    return collector.snapshot(), done.stdout


def test_example_names_are_unique() -> None:
    # A name given twice would run only the last of its examples.
    where = [f"{name} in {path.relative_to(ROOT)}" for name, _, path in FOUND]
    assert len(EXAMPLES) == len(FOUND), f"an example name given twice: {where}"


def test_every_example_is_tested() -> None:
    tested = {name.removeprefix("test_").replace("_", "-") for name in globals() if name.startswith("test_")}
    assert set(EXAMPLES) <= tested, f"examples without a test: {set(EXAMPLES) - tested}"


def test_hawktracer(collector: CollectorProcess, tmp_path: Path) -> None:
    trace, _ = run_example("hawktracer", collector, tmp_path)
    packets = [e for e in events(trace, "i") if e["name"] == "Packet"]
    by_proto = {p["args"]["proto"]: p for p in packets}
    assert set(by_proto) == {"udp", "nvme"}
    assert by_proto["udp"]["args"] | {"id": 0} == {
        "id": 0,
        "size": 1500,
        "proto": "udp",
        "header": {"version": 4, "flags": 0},
    }
    assert by_proto["nvme"]["args"]["header"] == {"version": 1, "flags": 3}
    assert by_proto["udp"]["args"]["id"] != by_proto["nvme"]["args"]["id"]
    (fsync,) = [e for e in events(trace, "X") if e["name"] == "fsync"]
    assert fsync["ts"] <= by_proto["nvme"]["ts"] <= fsync["ts"] + fsync["dur"]
    written = read_trace_file(tmp_path / "disk.rttrace")  # its listener named no process: it is the one connected
    assert written.hello is not None and written.hello.process_name == "router"
    assert sorted(e.name for e in written) == ["Packet", "fsync"]
    assert trace["otherData"]["rejected_events"] == 0


def test_traced(collector: CollectorProcess, tmp_path: Path) -> None:
    trace, _ = run_example("traced", collector, tmp_path)
    spans = events(trace, "X")
    assert sorted(e["name"] for e in spans) == ["fetch page"] * 3 + ["parse"] * 3
    assert len({e["tid"] for e in spans if e["name"] == "fetch page"}) == 3  # one lane per task


def test_rejected_typed_events_are_counted_in_the_snapshot(collector: CollectorProcess, tmp_path: Path) -> None:
    code = f"""
import ringtrace.client
from ringtrace.client import Event, u8

class Small(Event):
    v: u8

tl = ringtrace.client.connect({collector.tcp_address!r}, process_name="rejects")
for v in (1, 300, 2, -1):
    tl.push(Small(v=v))
print(tl.flush(5))
tl.push(Small(v=3))
print(tl.flush(5))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]  # a flush after rejected events does not say all was delivered
    assert done.stderr.count("Small.v: ") == 1  # one warning per class
    trace = collector.snapshot()
    assert sorted(e["args"]["v"] for e in events(trace, "i") if e["name"] == "Small") == [1, 2, 3]
    assert trace["otherData"]["rejected_events"] == 2
    (process,) = trace["otherData"]["processes"]
    assert process["rejected_events"] == 2


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_parse(name: str) -> None:
    compile(EXAMPLES[name], name, "exec")


def test_gecko(collector: CollectorProcess, tmp_path: Path) -> None:
    trace, _ = run_example("gecko", collector, tmp_path)
    slices = {e["name"]: e for e in events(trace, "X")}
    assert set(slices) == {"Parse HTML", "Style Recalculation"}
    parse, style = slices["Parse HTML"], slices["Style Recalculation"]
    assert parse["args"] == {"url": "/index.html"} and style["args"] == {"elements": 120}
    assert parse["ts"] <= style["ts"] and style["ts"] + style["dur"] <= parse["ts"] + parse["dur"]
    assert style["dur"] >= 2000  # microseconds
    (paint,) = [e for e in events(trace, "i") if e["name"] == "Paint"]
    assert paint["args"] == {"layers": 3} and paint["ts"] < parse["ts"] + parse["dur"]
    (layout,) = events(trace, "B")
    assert layout["name"] == "Layout" and "not ended" in layout["args"]["ringtrace"]
    assert trace["otherData"]["unmatched_marker_ends"] == 0


def test_timelogger(collector: CollectorProcess, tmp_path: Path) -> None:
    trace, _ = run_example("timelogger", collector, tmp_path)
    slices = sorted((e for e in events(trace, "X") if e["name"] == "GPU queue"), key=lambda e: e["ts"])
    outer, inner = slices
    assert outer.get("args") is None and inner["args"] == {"activity": 2, "overlap": True}
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    assert outer["tid"] == inner["tid"]  # one track for the source, whichever thread opened it
    names = metadata(trace, "thread_name")
    assert names[(outer["pid"], outer["tid"])] == "GPU queue"
    (anomaly,) = [e for e in events(trace, "i") if e["name"] == "GPU queue"]
    assert "close without an open" in anomaly["args"]["ringtrace"]
    assert trace["otherData"]["source_anomalies"] == 1


def test_counters(collector: CollectorProcess, tmp_path: Path) -> None:
    trace, _ = run_example("counters", collector, tmp_path)
    values = [e["args"]["value"] for e in sorted(events(trace, "C"), key=lambda e: e["ts"])]
    assert values == [3, 5, 2] and {e["name"] for e in events(trace, "C")} == {"queue depth"}
    (begin,) = events(trace, "b")
    (end,) = events(trace, "e")
    assert (begin["id"], end["id"], begin["cat"], begin["name"]) == ("42", "42", "async", "request")
    assert begin["args"] == {"path": "/users"} and begin["tid"] != end["tid"]


def test_incident(collector: CollectorProcess, tmp_path: Path) -> None:
    trace, output = run_example("incident", collector, tmp_path)
    assert "delivered: True" in output
    (incident,) = [e for e in events(trace, "i") if e.get("cat") == "incident"]
    assert incident["name"] == "payment declined"
    assert incident["args"] == {"reason": "payment declined", "order": 7, "code": 503}


def test_snabb(collector: CollectorProcess, tmp_path: Path) -> None:
    trace, output = run_example("snabb", collector, tmp_path)
    messages = [e for e in events(trace, "i") if e.get("cat") == "engine"]
    (processed,) = [e for e in messages if e["name"].startswith("processed")]
    assert processed["name"] == "processed tcp(10), udp(20), and other(3)"
    assert processed["args"] == {"category": "engine", "priority": "info", "tcp": 10, "udp": 20, "other": 3}
    breaths = sorted(e["args"]["n"] for e in messages if e["name"].startswith("breath"))
    assert breaths[0] == 2 and breaths[1] >= 3  # off (1), on (2), then sampled
    assert "breath n(2) took ns(480) ns" in {e["name"] for e in messages}
    attempted = int(output.rsplit("breaths:", 1)[1])
    assert 0 < len(breaths) - 1 < attempted, "sampling keeps some of the 50 windows, not all"


def test_otel_span_processor(collector: CollectorProcess, tmp_path: Path) -> None:
    _, out = run_example("otel-span-processor", collector, tmp_path)
    trace_id = out.split()[1]
    trace = collector.snapshot(f"?trace_id={trace_id}")
    handle, render = sorted(events(trace, "X"), key=lambda e: e["name"])
    assert (handle["name"], handle["args"]["trace_id"], render["name"]) == ("handle", trace_id, "render")
    assert render["tid"] == handle["tid"] and handle["ts"] <= render["ts"]
