"""The whole path: client processes -> TCP -> collector ring -> GET /snapshot."""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from collector_process import CollectorProcess, events, metadata, run_workload

PROCESSES, THREADS, SPANS = 4, 4, 10_000


def test_four_processes_four_threads_ten_thousand_spans_each(collector: CollectorProcess) -> None:
    def one(k: int) -> dict:
        done = run_workload(collector.tcp_address, "--threads", str(THREADS), "--spans", str(SPANS), "--name", f"p{k}")
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        return json.loads(done.stdout)

    with ThreadPoolExecutor(PROCESSES) as pool:
        reports = list(pool.map(one, range(PROCESSES)))
    assert all(r["flushed"] is True and r["dropped_events"] == 0 for r in reports)

    trace = collector.snapshot()

    spans = events(trace, "X")
    assert len(spans) == PROCESSES * THREADS * SPANS
    per_thread = Counter((s["pid"], s["tid"]) for s in spans)
    expected_threads = {(r["pid"], tid) for r in reports for tid in r["threads"].values()}
    assert per_thread == dict.fromkeys(expected_threads, SPANS)
    # Every span is distinct: (thread index, i) pairs are complete per thread.
    for r in reports:
        for name, tid in r["threads"].items():
            index = int(name.rsplit("-t", 1)[1])
            got = sorted(s["args"]["i"] for s in spans if s["tid"] == tid and s["pid"] == r["pid"])
            assert got == list(range(SPANS))
            assert {s["args"]["thread"] for s in spans if s["tid"] == tid and s["pid"] == r["pid"]} == {index}

    process_names = {pid: name for (pid, _), name in metadata(trace, "process_name").items()}
    assert process_names == {r["pid"]: f"p{k}" for k, r in enumerate(reports)}
    thread_names = metadata(trace, "thread_name")
    assert thread_names == {(r["pid"], tid): name for r in reports for name, tid in r["threads"].items()}

    assert all(s["name"] == "span" and s["dur"] >= 0 for s in spans)
    other = trace["otherData"]
    assert other["client_dropped_events"] == 0
    assert other["overwritten_events"] == 0
    assert other["undecodable_events"] == 0
    assert other["label_overflow_events"] == 0 and other["clipped_args"] == 0
    # Per-track counts name each track, though every one of these threads has ended.
    for r, process in zip(reports, sorted(other["processes"], key=lambda p: p["process_name"]), strict=True):
        named = {t["name"]: t["stored_events"] for t in process["tracks"] if t["stored_events"]}
        assert named == dict.fromkeys(r["threads"], SPANS)


def test_timestamps_share_one_axis_across_processes(collector: CollectorProcess) -> None:
    first = run_workload(collector.tcp_address, "--spans", "100", "--name", "first")
    second = run_workload(collector.tcp_address, "--spans", "100", "--name", "second")
    assert first.returncode == 0 and second.returncode == 0
    pid_first, pid_second = json.loads(first.stdout)["pid"], json.loads(second.stdout)["pid"]
    spans = events(collector.snapshot(), "X")
    end_first = max(s["ts"] + s["dur"] for s in spans if s["pid"] == pid_first)
    start_second = min(s["ts"] for s in spans if s["pid"] == pid_second)
    # The second process ran strictly after the first one exited.
    assert min(s["ts"] for s in spans) >= 0 and end_first < start_second


def test_instants_and_exit_flush_without_explicit_flush(collector: CollectorProcess) -> None:
    done = run_workload(collector.tcp_address, "--threads", "2", "--instants", "5000", "--no-flush")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    instants = [e for e in events(collector.snapshot(), "i") if e["pid"] == report["pid"]]
    assert len(instants) == 2 * 5000
    assert all(e["name"] == "tick" and e["s"] == "t" for e in instants)


def test_snapshot_asks_connected_clients_to_flush(collector: CollectorProcess) -> None:
    import subprocess
    import sys

    # The client records, then stays connected without flushing; its batch interval is long, so only the
    # collector's FLUSH request can bring the events in before the snapshot.
    code = (
        "import ringtrace.client, sys, time\n"
        f"tl = ringtrace.client.connect({collector.tcp_address!r}, batch_interval_s=3600)\n"
        "for i in range(1000):\n"
        "    tl.instant('held', i=i)\n"
        "print('recorded', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    client = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "recorded"
        collector.wait_for_log(lambda line: "connection from" in line)
        trace = collector.snapshot("?flush_timeout_s=10")
        assert len([e for e in events(trace, "i") if e["name"] == "held"]) == 1000
        assert trace["otherData"]["clients_flushed"] == 1
    finally:
        client.communicate("\n", timeout=30)


def test_any_argument_value_yields_valid_json(collector: CollectorProcess) -> None:
    import subprocess
    import sys

    code = (
        "import ringtrace.client\n"
        f"tl = ringtrace.client.connect({collector.tcp_address!r})\n"
        "class Thing:\n"
        "    def __repr__(self): return 'Thing()'\n"
        "    def __str__(self): raise ValueError('no text')\n"
        "tl.instant('odd', data=b'\\x00\\xff', big=2**70, pair=(1, 2), keys={b'k': 1, 2: [b'z']},\n"
        "           nan=float('nan'), thing=Thing(), surrogate='\\udc80', items={1, 2})\n"
        "tl.instant('plain', n=1)\n"
        "assert tl.flush(timeout_s=20)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    instants = {e["name"]: e for e in events(collector.snapshot(), "i")}
    assert instants["plain"]["args"] == {"n": 1}
    args = instants["odd"]["args"]
    assert args["data"] == "00ff"
    assert args["big"] == str(2**70)
    assert args["pair"] == [1, 2]
    assert args["keys"] == {"6b": 1, "2": ["7a"]}
    assert args["nan"] is None  # JSON has no NaN
    assert args["thing"] == "<unprintable Thing>"
    assert args["surrogate"] == "\\udc80"
    assert sorted(args["items"]) == [1, 2]
