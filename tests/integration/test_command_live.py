"""``ringtrace tail``, ``sources`` and ``replay`` against a real collector (the tail as a real subprocess)."""

from __future__ import annotations

import datetime
import json
import re
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from collector_process import CollectorProcess, events, run_script
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.command.main import main
from ringtrace.collector.http.query import parse_time, time_text
from ringtrace.collector.ingest.hello import rewritten_hello
from ringtrace.wire.frame_types import FRAME_HEADER, PREAMBLE, FrameType
from ringtrace.wire.handshake_frames import Hello
from waiting import wait_for

RECORD = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
slow = tl.message("engine", "warning", "slow $n")
for i in range(20):
    with tl.scope("request", i=i):
        pass
slow(7)
assert tl.flush(5)
"""
FOREIGN = Path(__file__).parent.parent / "data" / "foreign"


def record(collector: CollectorProcess, name: str) -> None:
    run_script(collector, RECORD, name)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def tail_begun(collector: CollectorProcess, tail: subprocess.Popen[str]) -> None:
    """Until the collector runs the stream of ``tail`` (a ``ringtrace tail`` process)."""

    def running() -> int:
        assert tail.poll() is None, "the tail ended before it began"
        return int(collector.json("/stats")["tails_running"])

    wait_for(running, timeout_s=30, what="the tail begun")


def test_tail_prints_events_stored_after_it_started_as_dump_lines(collector: CollectorProcess) -> None:
    record(collector, "earlier")
    tail = subprocess.Popen(
        # As "show me the warnings" means: messages only (spans and instants carry no priority).
        [str(Path(sys.executable).with_name("ringtrace")), "tail", collector.http_url, "--min-priority", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    got_db = threading.Event()

    def read() -> None:
        assert tail.stdout is not None
        for line in tail.stdout:
            lines.append(line)
            if line.split("  ")[1].startswith("db["):
                got_db.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        tail_begun(collector, tail)  # what is stored from now on is its
        record(collector, "web")
        record(collector, "gone")
        assert collector.post("/clear?process=gone")[0] == 200  # most likely before the tail read it: told, not ended
        record(collector, "db")
        assert got_db.wait(30), (lines, tail.stderr)
    finally:
        collector.stop()  # the collector ends the tail: it says so and exits 1
        assert tail.wait(30) == 1
        reader.join(10)
        assert tail.stderr is not None
        stderr = tail.stderr.read()
        assert "the collector ended the tail: the collector is stopping" in stderr
        for stream in (tail.stdout, tail.stderr):
            assert stream is not None
            stream.close()
    processes = [line.split("  ")[1].split("[")[0] for line in lines]
    assert [p for p in processes if p != "gone"] == ["web", "db"]  # not "earlier": it was there before
    assert processes.count("gone") == 1 or "events were removed by POST /clear or POST /pop" in stderr
    assert all("  engine  warning  slow n(7)  " in line for line in lines), lines


def test_tail_says_on_stderr_once_it_is_open_and_keeps_stdout_for_the_events(collector: CollectorProcess) -> None:
    tail = subprocess.Popen(
        [str(Path(sys.executable).with_name("ringtrace")), "tail", collector.http_url, "--process", "web"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    shown: list[str] = []
    threads = [
        threading.Thread(target=lambda s=stream, to=to: to.extend(s), daemon=True)
        for stream, to in ((tail.stderr, said), (tail.stdout, shown))
    ]
    for thread in threads:
        thread.start()
    try:

        def what_it_said() -> list[str]:
            assert tail.poll() is None, "the tail ended"
            return said

        wait_for(what_it_said, timeout_s=30, what="the tail saying it is open")  # before any event: a user knows
        assert collector.json("/stats")["tails_running"] == 1  # said once the collector had begun it
        record(collector, "web")
        wait_for(lambda: shown, until=lambda lines: len(lines) >= 21, timeout_s=30, what="21 lines shown")
    finally:
        tail.terminate()
        tail.wait(30)
        for thread in threads:
            thread.join(10)
        for stream in (tail.stdout, tail.stderr):
            assert stream is not None
            stream.close()
    opened = f"ringtrace tail: tailing {collector.http_url}/stream, events stored from now on that match --process web"
    assert said[0] == opened + "; Ctrl-C to stop\n"
    assert all("  web[" in line for line in shown), shown  # stdout: the events alone


def test_tail_refuses_filters_a_live_tail_cannot_take(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["tail", "http://127.0.0.1:1", "--limit", "3"])
    assert exited.value.code == 2
    status, _, err = run(capsys, "tail", "http://127.0.0.1:1")
    assert status == 1 and "cannot reach 127.0.0.1:1" in err


def test_sources_shows_a_table_or_the_json(collector: CollectorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    record(collector, "web")
    record(collector, "db")
    status, out, _ = run(capsys, "sources", collector.http_url)
    assert status == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0][:2] == ["pid", "process"]
    assert {row[1] for row in rows if "process" in row[2:3]} == {"web", "db"}
    assert [row[:3] for row in rows if row[0] == "MainThread"] == [["MainThread", "thread", "21"]] * 2
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert all(row[-4] == row[-2] == today for row in rows if row[0] == "MainThread")  # first and last, with a date
    status, out, _ = run(capsys, "sources", collector.http_url + "/sources", "--process", "db", "--json")
    assert status == 0 and [p["process_name"] for p in json.loads(out)["processes"]] == ["db"]
    status, _, err = run(capsys, "sources", "ftp://x")
    assert status == 2 and "URL must be" in err


def test_replay_sends_a_file_that_the_collector_serves_as_live_data(
    collector: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "db.rttrace"
    timeline = Timeline("db", [FileListener(path)])
    for i in range(30):
        with timeline.scope("query", i=i):
            pass
    timeline.close()
    status, out, err = run(capsys, "replay", str(path), "--to", collector.tcp_address, "--since", "-1h")
    assert status == 0, err
    assert out.startswith("replayed 30 events in ")
    spans = events(collector.snapshot(), "X")
    assert sorted(span["args"]["i"] for span in spans) == list(range(30))
    status, out, err = run(capsys, "replay", str(FOREIGN / "timelogger-sample.bin"), "--to", collector.tcp_address)
    assert status == 0, err
    sources = {p["process_name"]: p for p in collector.json("/sources")["processes"]}
    assert sources["timelogger-sample.bin"]["stored_events"] == 411
    status, _, err = run(capsys, "replay", str(path), "--to", "127.0.0.1:1")
    assert status == 1 and "cannot replay to 127.0.0.1:1" in err
    status, _, err = run(capsys, "replay", str(path), "--to", "no-port")
    assert status == 2 and "--to" in err


def test_replay_names_a_frame_the_collector_would_not_take(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    collector = CollectorProcess("--max-frame-size", "32KiB")
    try:
        path = tmp_path / "big.rttrace"
        timeline = Timeline("big", [FileListener(path)])
        for i in range(2000):
            timeline.instant("tick", i=i, pad="x" * 200)
        timeline.close()
        status, _, err = run(capsys, "replay", str(path), "--to", collector.tcp_address)
        assert status == 1 and "max_frame_bytes=32768" in err
    finally:
        collector.stop()


def test_a_file_whose_events_do_not_decode_is_said_to_be_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "flip.rttrace"
    timeline = Timeline("flip", [FileListener(path)])
    for i in range(100):
        timeline.instant("tick", i=i)
    timeline.close()
    original = path.read_bytes()
    position = PREAMBLE.size
    while True:  # the first EVENTS frame's payload
        length, frame_type = FRAME_HEADER.unpack_from(original, position)
        if frame_type == FrameType.EVENTS:
            payload = position + FRAME_HEADER.size + struct.unpack_from("<H", original, position + FRAME_HEADER.size)[0]
            break
        position += FRAME_HEADER.size + length
    # Its first byte made one msgpack never uses; or its first event's kind (array of 5 columns, array16 of 100
    # kinds, then the first) one never declared.
    for at, value, lost in ((payload, 0xC1, 100), (payload + 4, 0x7F, 1)):
        data = bytearray(original)
        data[at] = value
        path.write_bytes(bytes(data))
        for argv in (["dump", str(path)], ["convert", str(path), "-o", str(tmp_path / "out.json")]):
            status, _, err = run(capsys, *argv)
            assert status == 1 and f"{path} is corrupt: {lost} of its 100 events do not decode" in err, argv


def test_a_snapshot_that_selects_nothing_is_an_empty_file_the_tools_read(
    collector: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(collector, "web")
    empty = tmp_path / "empty.rtsnap"
    status, _, err = run(
        capsys, "snapshot", collector.http_url, "-o", str(empty), "--format", "native", "--process", "x"
    )
    assert (
        status == 0
        and "ringtrace snapshot: filters applied to 21 events (this format does not count what they matched" in err
    )  # (it cannot count)
    assert run(capsys, "dump", str(empty)) == (0, "", "")
    # A filter that matches nothing is not silent: it says so, with what was there.
    assert run(capsys, "dump", collector.http_url, "--process", "nobody") == (
        0,
        "",
        "ringtrace dump: 0 of 21 events matched --process nobody\n",
    )
    status, _, err = run(capsys, "snapshot", collector.http_url, "-o", str(tmp_path / "web.json"), "--process", "web-*")
    assert status == 0 and err == "ringtrace snapshot: 0 of 21 events matched --process 'web-*'\n"
    status, _, err = run(
        capsys, "snapshot", collector.http_url, "-o", str(tmp_path / "w.json"), "--flush-timeout", "0", "--pid", "1"
    )
    assert status == 0 and err == "ringtrace snapshot: 0 of 21 events matched --pid 1\n"  # (not the format)
    status, _, err = run(capsys, "snapshot", collector.http_url, "-o", "-", "--process", "web", "--name", "request")
    assert status == 0 and err.endswith("ringtrace snapshot: 20 of 21 events matched --process web --name request\n")


def test_replay_keeps_the_times_an_old_recording_was_made_at(
    collector: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.rttrace"
    timeline = Timeline("old", [FileListener(path)])
    for i in range(10):
        timeline.instant("then", i=i)
    timeline.close()
    hour_ns = 3600 * 10**9
    data = path.read_bytes()  # made an hour older: its HELLO pairs the same monotonic time with a wall time 1 h back
    length, _ = FRAME_HEADER.unpack_from(data, PREAMBLE.size)
    hello_end = PREAMBLE.size + FRAME_HEADER.size + length
    hello = Hello.decode_body(data[PREAMBLE.size + FRAME_HEADER.size : hello_end])
    older = rewritten_hello(data[PREAMBLE.size : hello_end], wall_ns=hello.wall_ns - hour_ns)
    path.write_bytes(data[: PREAMBLE.size] + older + data[hello_end:])
    assert run(capsys, "replay", str(path), "--to", collector.tcp_address)[0] == 0
    trace = collector.snapshot()
    origin = trace["otherData"]["clock_origin_wall_ns"]
    shown = [origin + e["ts"] * 1000 for e in trace["traceEvents"] if e.get("name") == "then"]
    assert len(shown) == 10 and all(abs(t - (time.time_ns() - hour_ns)) < hour_ns / 2 for t in shown)
    status, out, _ = run(capsys, "dump", collector.http_url, "--name", "then")
    dumped = [line.split("  ")[0] for line in out.splitlines()]  # the same times as the snapshot's
    expected = [datetime.datetime.fromtimestamp(t // 10**9, datetime.UTC).strftime("%H:%M:%S") for t in shown]
    assert status == 0 and [d[11:19] for d in dumped] == expected


def test_an_https_url_to_a_plain_collector_says_so(
    collector: CollectorProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    url = collector.http_url.replace("http://", "https://")
    status, _, err = run(capsys, "sources", url)
    assert status == 1 and "speaks plain HTTP there: use an http:// URL" in err


def test_tail_says_the_collector_was_killed_when_it_was() -> None:
    collector = CollectorProcess()
    tail = subprocess.Popen(
        [str(Path(sys.executable).with_name("ringtrace")), "tail", collector.http_url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        tail_begun(collector, tail)
        collector.proc.kill()
        _, stderr = tail.communicate(timeout=30)
        assert tail.returncode == 1 and "broke off: the collector was killed" in stderr, stderr
    finally:
        tail.kill()
        collector.stop()


#: A process whose names hold what a terminal or rich would take for commands: an escape sequence (colour, the
#: window's title, clearing the screen), a carriage return, and rich markup that closes a tag never opened.
HOSTILE_NAMES = r"""
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="web[/x]\x1b[31m")
with tl.scope("GET [/]\x1b]0;pwned\x07\x1b[2J", path="/a\x1b[31m\u2028"):
    tl.instant("cache\r\x9b31m[bold]miss")
assert tl.flush(5)
"""


@pytest.mark.parametrize(
    "command",
    [["dump", "URL"], ["sources", "URL"], ["spans", "URL"], ["top", "URL"], ["top", "URL", "--by", "name,process"]],
)
def test_names_are_printed_inert_whatever_they_hold(
    collector: CollectorProcess, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_script(collector, HOSTILE_NAMES)
    status, out, err = run(capsys, *[collector.http_url if a == "URL" else a for a in command])
    assert status == 0, err
    assert not [c for c in out if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0 or c == "\u2028"], out
    shown = "web[/x]\\x1b[31m" if command[0] in ("dump", "sources") else "GET [/]\\x1b]0;pwned\\x07\\x1b[2J"
    assert shown in out, out


def test_tail_with_an_until_shows_what_came_before_it_and_ends_once_it_has_passed(
    collector: CollectorProcess,
) -> None:
    until_ns = time.time_ns() + 3_000_000_000  # (well after the events recorded below, on a busy machine too)
    tail = subprocess.Popen(
        [str(Path(sys.executable).with_name("ringtrace")), "tail", collector.http_url, "--until", str(until_ns)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        tail_begun(collector, tail)
        record(collector, "web")
        out, err = tail.communicate(timeout=60)  # it ends by itself
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate()
    assert tail.returncode == 0, err
    # (as given, then as the time it is: it was said in ns alone)
    assert f"ringtrace tail: done: its until ({until_ns}: {time_text(until_ns)}) has passed" in err
    shown = [line.split("  ")[1].split("[")[0] for line in out.splitlines()]
    assert shown.count("web") == 21, out  # its 20 scopes and its message


@pytest.mark.parametrize("grace", [[], ["--grace", "1s"]])  # (past the until and its grace either way)
def test_tail_with_an_until_already_past_ends_at_once_with_nothing_shown(
    collector: CollectorProcess, grace: list[str]
) -> None:
    before = time.time_ns()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ringtrace")), "tail", collector.http_url, "--until", "-10s", *grace],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    waits = ", waiting 1s past its until" if grace else ""  # (its grace is no filter: it said "match ... --grace 1s")
    assert f"events stored from now on that match --until -10s{waits}; Ctrl-C to stop" in done.stderr
    said = re.search(r"ringtrace tail: done: its until \(-10s: (\S+)\) has passed", done.stderr)
    assert said is not None, done.stderr
    assert before - 10**10 <= parse_time("until", said[1], 0) <= time.time_ns() - 10**10  # (the time -10s stood for)
    assert done.stdout == ""
