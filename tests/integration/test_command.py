"""The ``ringtrace`` command against a real collector and real files: snapshot, dump, convert, collect, failures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, recorded_collector
from perfetto_model import PerfettoTrace
from ringtrace.client import FileListener, Timeline, read_trace_streams
from ringtrace.collector.command.main import main
from ringtrace.wire.frames import Flush, FlushAck, Goodbye, encode, preamble
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.reader import CLOSED, NEED_DATA, FrameReader

# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("command")

RECORD = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
slow = tl.message("engine", "warning", "slow $n")
for i in range(20):
    with tl.scope("request", i=i):
        tl.instant("cache-miss", key=i)
slow(7)
print(tl.flush(5))
"""


@pytest.fixture(scope="module")
def recorded() -> Iterator[CollectorProcess]:
    with recorded_collector(RECORD, "web", "db") as collector:
        yield collector


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def shown(path: Path) -> list[dict[str, Any]]:
    return [e for e in json.loads(path.read_bytes())["traceEvents"] if e["ph"] != "M"]


def test_snapshot_writes_chrome_json_or_a_snapshot_file_with_filters(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = recorded.http_url
    assert run(capsys, "snapshot", url, "-o", str(tmp_path / "all.json"))[0] == 0
    assert len(shown(tmp_path / "all.json")) == 2 * 41
    assert run(capsys, "snapshot", url + "/", "-o", str(tmp_path / "web.json"), "--process", "web")[0] == 0
    assert len(shown(tmp_path / "web.json")) == 41
    status, _, _ = run(capsys, "snapshot", url, "-o", str(tmp_path / "s.rtsnap"), "--format", "native", "--limit", "3")
    assert status == 0
    streams = read_trace_streams(tmp_path / "s.rtsnap")
    assert sum(len(s.events) for s in streams) == 3


def test_format_and_priority_flags_take_any_case(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(
        capsys, "snapshot", recorded.http_url, "-o", str(tmp_path / "t.pftrace"), "--format", "PERFETTO"
    )
    assert status == 0, err
    assert not (tmp_path / "t.pftrace").read_bytes().startswith(b"{")
    status, _, err = run(capsys, "dump", recorded.http_url, "--min-priority", "Warning")
    assert status == 0 and err == "ringtrace dump: 2 of 82 events matched --min-priority Warning (messages only)\n"
    with pytest.raises(SystemExit) as exited:
        run(capsys, "convert", str(tmp_path / "t.pftrace"), "-o", str(tmp_path / "x"), "--format", "Json")
    assert exited.value.code == 2 and "invalid choice: 'json'" in capsys.readouterr().err


def test_dump_prints_one_event_a_line_in_time_order(
    recorded: CollectorProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "dump", recorded.http_url, "--category", "engine")
    assert status == 0 and err == "ringtrace dump: 2 of 82 events matched --category engine\n"
    lines = out.splitlines()
    assert len(lines) == 2 and all("  engine  warning  slow n(7)" in line for line in lines)
    assert {line.split("  ")[1].split("[")[0] for line in lines} == {"web", "db"}
    status, out, _ = run(capsys, "dump", recorded.http_url, "--process", "web")
    stamps = [line.split("  ")[0] for line in out.splitlines()]
    assert len(stamps) == 41 and stamps == sorted(stamps)
    status, out, _ = run(capsys, "dump", recorded.http_url, "--process", "web", "--newest-first")
    assert [line.split("  ")[0] for line in out.splitlines()] == stamps[::-1]


def test_dump_with_a_min_priority_shows_messages_only_unless_told_to_keep_other_events(
    recorded: CollectorProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "dump", recorded.http_url, "--min-priority", "warning")
    assert status == 0 and err == "ringtrace dump: 2 of 82 events matched --min-priority warning (messages only)\n"
    assert len(out.splitlines()) == 2 and all("  engine  warning  slow n(7)" in line for line in out.splitlines())
    status, out, _ = run(capsys, "dump", recorded.http_url, "--min-priority", "warning", "--with-other-events")
    assert status == 0 and len(out.splitlines()) == 2 * 41  # a timeline's view: spans and instants carry none
    status, out, _ = run(capsys, "dump", recorded.http_url, "--messages-only")
    assert status == 0 and len(out.splitlines()) == 2
    status, _, err = run(capsys, "dump", recorded.http_url, "--process", "[web")
    assert status == 2 and "--process has a '[' at character 1 that no ']' closes" in err


def write_trace_file(path: Path) -> None:
    tl = Timeline("file", [FileListener(path, process_name="from-file")])
    for i in range(10):
        with tl.scope("step", i=i):
            pass
    tl.close()


def test_dump_shows_bytes_as_snapshots_do_in_hex(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "bytes.rttrace"
    tl = Timeline("file", [FileListener(trace, process_name="from-file")])
    tl.instant("odd", data=b"\x00\xff", nested=[b"z"])
    tl.close()
    assert run(capsys, "convert", str(trace), "-o", str(tmp_path / "bytes.json"))[0] == 0
    (event,) = shown(tmp_path / "bytes.json")
    status, out, _ = run(capsys, "dump", str(trace))
    assert status == 0 and out.rstrip("\n").endswith(json.dumps(event["args"], separators=(",", ":")))
    assert event["args"] == {"data": "00ff", "nested": ["7a"]}


def test_convert_and_dump_read_trace_and_snapshot_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "run.rttrace"
    write_trace_file(trace)
    assert run(capsys, "convert", str(trace), "-o", str(tmp_path / "run.json"))[0] == 0
    events = shown(tmp_path / "run.json")
    assert [e["args"]["i"] for e in events] == list(range(10)) and {e["ph"] for e in events} == {"X"}
    assert min(e["ts"] for e in events) >= 0
    status, _, _ = run(capsys, "convert", str(trace), "-o", str(tmp_path / "few.rtsnap"), "--format", "native",
                       "--limit", "4")  # fmt: skip
    assert status == 0
    assert [e.args for s in read_trace_streams(tmp_path / "few.rtsnap") for e in s.events] == [
        {"i": i} for i in range(6, 10)
    ]
    status, out, _ = run(capsys, "dump", str(tmp_path / "few.rtsnap"))
    assert status == 0 and len(out.splitlines()) == 4 and all("from-file[" in line for line in out.splitlines())


def test_convert_refuses_to_write_over_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "run.rttrace"
    write_trace_file(trace)
    before = trace.read_bytes()
    for target in (str(trace), str(tmp_path / "." / "run.rttrace")):
        status, _, err = run(capsys, "convert", str(trace), "-o", target)
        assert status == 1 and "is the input file" in err
    assert trace.read_bytes() == before


def test_dump_names_the_member_of_a_family_sources_markers_async(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "sources.rttrace"
    tl = Timeline("file", [FileListener(trace, process_name="sources")])
    gpu = tl.source("gpu")
    gpu.open()
    gpu.close()
    tl.close()
    status, out, _ = run(capsys, "dump", str(trace))
    assert status == 0
    assert [line.split("  ")[2:4] for line in out.splitlines()] == [["gpu", "source_open"], ["gpu", "source_close"]]
    _, out, _ = run(capsys, "dump", str(trace), "--category", "source")  # the family, as a filter names it
    assert len(out.splitlines()) == 2


def test_a_torn_tail_is_read_up_to_where_it_tears(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "run.rttrace"
    write_trace_file(trace)
    data = trace.read_bytes()
    trace.write_bytes(data[:-3])
    status, out, err = run(capsys, "dump", str(trace))
    assert status == 0 and out.count("\n") >= 1
    assert err.count("\n") == 1 and "ends inside the frame" in err


@pytest.mark.parametrize("kept", [4, 5, 7])
def test_a_file_torn_inside_its_preamble_says_so(kept: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "run.rttrace"
    write_trace_file(trace)
    trace.write_bytes(trace.read_bytes()[:kept])
    status, out, err = run(capsys, "dump", str(trace))
    assert status == 0 and out == ""
    assert err.count("\n") == 1 and "ends inside" in err, err


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [
        (["dump", "http://127.0.0.1:1"], 1, "cannot reach 127.0.0.1:1"),
        (["dump", "ftp://example"], 2, "URL must be a collector's HTTP address"),
        (["snapshot", "localhost:7701", "-o", "x"], 2, "URL must be"),
        (["snapshot", "http://[::1", "-o", "x"], 2, "URL must be"),  # an IPv6 address left open
        (["sources", "http://127.0.0.1:abc"], 2, "URL must be"),  # a port that is no number
        (["spans", "http://127.0.0.1:99999"], 2, "URL must be"),  # a port past 65535
        (["dump", "/no/such/file"], 1, "cannot read /no/such/file"),
        (["dump", "FOREIGN"], 1, "not a ringtrace file"),
        (["dump", "CORRUPT"], 1, "is corrupt"),
        (["convert", "FOREIGN", "-o", "out.json"], 1, "not a ringtrace file"),
        (["snapshot", "http://127.0.0.1:1", "-o", "x", "--since", "soon"], 2, "--since must be"),
        (["snapshot", "http://127.0.0.1:1", "-o", "x", "--flush-timeout", "100"], 2, "--flush-timeout must be"),
        (["dump", "FILE", "--limit", "0"], 2, "--limit must be a whole number"),
        (["dump", "FILE", "--min-priority", "loud"], 2, "--min-priority must be one of fatal, error, warning"),
    ],
)
def test_failures_are_one_line_and_a_non_zero_exit(
    argv: list[str], status: int, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "FOREIGN").write_bytes(b"GIF89a" + bytes(64))
    write_trace_file(tmp_path / "FILE")
    data = bytearray((tmp_path / "FILE").read_bytes())
    data[40:44] = b"\xff\xff\xff\x7f"  # HELLO's body no longer decodes
    (tmp_path / "CORRUPT").write_bytes(data)
    argv = [str(tmp_path / a) if a in ("FOREIGN", "CORRUPT", "FILE", "x", "out.json") else a for a in argv]
    got, out, err = run(capsys, *argv)
    assert (got, out) == (status, "")
    assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", [["sources"], ["snapshot", "-o", "x"], ["dump"]])
def test_a_url_with_a_password_is_refused_without_showing_it(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(tmp_path / a) if a == "x" else a for a in command]
    status, out, err = run(capsys, *argv, "http://admin:s3cret@127.0.0.1:1")
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and "--token-file" in err and "s3cret" not in err, err
    assert not (tmp_path / "x").exists()


def test_a_collector_answering_400_is_reported(recorded: CollectorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "dump", recorded.http_url + "/snapshot?x=1")
    assert status == 1 and "answered 400" in err and "unknown query parameter 'x'" in err


@pytest.mark.parametrize("command", [["snapshot", "URL", "-o", "x"], ["dump", "URL"], ["sources", "URL"]])
def test_an_answer_that_breaks_off_is_one_line_and_writes_no_file(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:

        def answer_and_go() -> None:  # a collector killed while it answers: a chunked body, cut in its first chunk
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)
                body = b'{"traceEvents":[' if command[0] != "sources" else b'{"processes":['
                connection.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n" + body)

        threading.Thread(target=answer_and_go, daemon=True).start()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        argv = [url if a == "URL" else str(tmp_path / a) if a == "x" else a for a in command]
        status, _, err = run(capsys, *argv)
    assert status == 1 and err.count("\n") == 1 and "broke off" in err, err
    assert not (tmp_path / "x").exists()


def test_collect_runs_the_collector_with_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["collect", "--help"])
    assert done.value.code == 0
    assert "usage: ringtrace collect" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main(["collect", "--capacity", "lots"])
    assert refused.value.code == 2


def test_messages_only_selects_messages_in_every_format(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = recorded.snapshot("?messages_only=1")
    assert sorted(e["name"] for e in trace["traceEvents"] if e["ph"] != "M") == ["slow n(7)"] * 2
    assert run(capsys, "snapshot", recorded.http_url, "-o", str(tmp_path / "m.json"), "--messages-only")[0] == 0
    assert [e["name"] for e in shown(tmp_path / "m.json")] == ["slow n(7)"] * 2


def test_a_second_timeline_on_a_thread_keeps_a_tid_of_its_own_in_a_file_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "two.rttrace"
    listener = FileListener(path, process_name="two")
    main_timeline, disk = Timeline("main", [listener]), Timeline("disk", [listener])
    with main_timeline.scope("work"):
        pass
    with disk.scope("fsync"):
        pass
    main_timeline.flush(timeout_s=30)
    disk.close()
    main_timeline.close()
    assert run(capsys, "convert", str(path), "-o", str(tmp_path / "two.json"))[0] == 0
    document = json.loads((tmp_path / "two.json").read_bytes())
    names = [(e["tid"], e["args"]["name"]) for e in document["traceEvents"] if e.get("name") == "thread_name"]
    assert len(names) == len(dict(names)) == 2  # a thread_name per tid, each its own
    spans = {e["name"]: e["tid"] for e in document["traceEvents"] if e["ph"] == "X"}
    assert dict(names)[spans["fsync"]] == "disk (MainThread)" and spans["fsync"] != spans["work"]


def test_the_thread_of_asyncio_lanes_is_named_when_it_recorded_nothing_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "lanes.rttrace"
    timeline = Timeline("lanes", [FileListener(path, process_name="lanes")])

    async def job() -> None:
        with timeline.scope("in-task"):
            await asyncio.sleep(0)

    async def both() -> None:
        await asyncio.gather(job(), job())

    asyncio.run(both())  # the main thread itself records nothing
    timeline.close()
    assert run(capsys, "convert", str(path), "-o", str(tmp_path / "lanes.pftrace"), "--format", "perfetto")[0] == 0
    perfetto = PerfettoTrace((tmp_path / "lanes.pftrace").read_bytes())
    (thread,) = [t for t in perfetto.tracks.values() if t.kind == "thread"]
    assert thread.name == "lanes (MainThread)"
    lanes = {perfetto.tracks[s.track].uuid for s in perfetto.slices}
    assert len(lanes) == 2 and all(perfetto.tracks[uuid].parent == thread.uuid for uuid in lanes)


def test_chrome_json_that_ringtrace_wrote_reads_back_as_it_was(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = recorded.snapshot()
    (tmp_path / "trace.json").write_bytes(json.dumps(original).encode())
    assert run(capsys, "convert", str(tmp_path / "trace.json"), "-o", str(tmp_path / "back.json"))[0] == 0
    back = json.loads((tmp_path / "back.json").read_bytes())

    def shown(trace: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Each event as a viewer shows it: its thread's and process's names, and its wall-clock time."""
        origin = trace["otherData"]["clock_origin_wall_ns"]
        threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
        processes = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
        return sorted(
            (
                processes[e["pid"]],
                threads[(e["pid"], e["tid"])],
                e["ph"],
                e["name"],
                origin + round(e["ts"] * 1000),  # (exact: the sum as a double is 256 ns apart this century)
                e.get("dur"),
                json.dumps(e.get("args"), sort_keys=True),
            )
            for e in trace["traceEvents"]
            if e["ph"] != "M"
        )

    assert shown(back) == shown(original) and len(shown(back)) == 82
    status, out, _ = run(capsys, "dump", str(tmp_path / "trace.json"), "--name", "slow*")  # (messages: instants)
    assert status == 0 and len(out.splitlines()) == 2


OTHER_TOOL = """[
{"name": "thread_name", "ph": "M", "pid": "browser", "tid": 7, "args": {"name": "IO"}},
{"name": "outer", "ph": "B", "pid": "browser", "tid": 7, "ts": 10, "args": {"a": 1}},
{"name": "inner", "ph": "B", "pid": "browser", "tid": 7, "ts": 11},
{"ph": "E", "pid": "browser", "tid": 7, "ts": 12},
{"ph": "E", "pid": "browser", "tid": 7, "ts": 20, "args": {"b": 2}},
{"name": "stray end", "ph": "E", "pid": "browser", "tid": 7, "ts": 21},
{"name": "never ended", "ph": "B", "pid": "browser", "tid": 7, "ts": 22},
{"name": "tick", "ph": "i", "s": "t", "pid": "browser", "tid": 7, "ts": 15.5},
{"name": "mem", "ph": "C", "pid": "browser", "tid": 7, "ts": 16, "args": {"heap": 10, "stack": 2}},
{"name": "load", "ph": "b", "cat": "net", "id": "0x1", "pid": "browser", "tid": 7, "ts": 17},
{"name": "load", "ph": "e", "cat": "net", "id": "0x1", "pid": "browser", "tid": 7, "ts": 19},
{"name": "flow", "ph": "s", "id": 1, "pid": "browser", "tid": 7, "ts": 18},
{"name": "no time", "ph": "X", "pid": 42, "tid": 1},
{"name": "work", "ph": "X", "pid": 42, "tid": 1, "ts": 30, "dur": 5},
{"name": "cpu", "ph": "C", "pid": 42, "ts": 31, "args": {"load": 1}},
"""


def test_chrome_json_of_other_tools_reads_with_what_it_cannot_show_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "other.json"  # a JSON array whose closing bracket is missing, as the format allows
    path.write_text(OTHER_TOOL)
    assert run(capsys, "convert", str(path), "-o", str(tmp_path / "other-back.json"))[0] == 0
    trace = json.loads((tmp_path / "other-back.json").read_bytes())
    spans = {e["name"]: (e["ts"], e["dur"], e.get("args")) for e in trace["traceEvents"] if e["ph"] == "X"}
    origin = min(ts for ts, _, _ in spans.values()) - 10  # its first event is 10 us in
    assert {name: (ts - origin, dur, args) for name, (ts, dur, args) in spans.items()} == {
        "outer": (10, 10, {"a": 1, "b": 2}),  # an E ends the innermost B of its thread
        "inner": (11, 1, None),
        "work": (30, 5, None),
    }
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] in ("i", "C", "b", "e", "B")}
    assert {"tick", "mem", "load", "never ended"} <= names  # and a B never ended is shown open
    processes = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert processes == {"pid browser", "pid 42"}
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert "IO" in threads and "no thread" in threads  # (the counter of pid 42 names no tid)
    other = trace["otherData"]
    assert other["client_dropped_events"] == 2  # the flow and the event with no time: not shown, counted
    assert other["unmatched_marker_ends"] == 1  # the stray end
    status, _, err = run(capsys, "convert", str(tmp_path / "other-back.json"), "-o", str(tmp_path / "x.pftrace"),
                         "--format", "perfetto")  # fmt: skip
    assert status == 0, err
    (tmp_path / "broken.json").write_text('{"traceEvents": [{"ph": "X",')
    status, _, err = run(capsys, "dump", str(tmp_path / "broken.json"))
    assert status == 1 and "Chrome trace JSON that does not parse" in err


def test_chrome_json_of_no_events_reads_as_an_empty_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documents = ('{"traceEvents": []}', "[]", '[{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "x"}}]')
    for n, document in enumerate(documents):
        path = tmp_path / f"empty-{n}.json"
        path.write_text(document)
        assert run(capsys, "dump", str(path)) == (0, "", ""), document
        assert run(capsys, "convert", str(path), "-o", str(tmp_path / "out.json"))[0] == 0
        assert shown(tmp_path / "out.json") == []


def test_chrome_json_that_begins_with_a_byte_order_mark_reads_as_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    span = '{"name": "work", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1}'
    # Some editors and Windows tools write UTF-8 with a byte order mark; the array's closing bracket may be missing.
    for n, document in enumerate((f'{{"traceEvents": [{span}]}}', f"[{span}]", f"[{span},")):
        path = tmp_path / f"bom-{n}.json"
        path.write_bytes(b"\xef\xbb\xbf" + document.encode())
        status, _, err = run(capsys, "convert", str(path), "-o", str(tmp_path / "out.json"))
        assert status == 0, (document, err)
        assert [(e["name"], e["dur"]) for e in shown(tmp_path / "out.json")] == [("work", 5)]


def test_replay_of_what_no_filter_selects_sends_nothing_and_says_so(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "all.rtsnap"
    assert run(capsys, "snapshot", recorded.http_url, "-o", str(snapshot), "--format", "native")[0] == 0
    status, out, err = run(capsys, "replay", str(snapshot), "--to", recorded.tcp_address, "--process", "nobody")
    assert status == 0 and out.startswith("replayed 0 events"), err
    assert "0 of 82 events matched --process nobody" in err


def test_a_command_pointed_at_the_other_port_is_told_which_port_it_wants(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "snapshot", f"http://{recorded.tcp_address}", "-o", str(tmp_path / "t.json"))
    assert status == 1 and "is that the collector's ingest port, --tcp? the commands use its HTTP port" in err
    snapshot = tmp_path / "all.rtsnap"
    assert run(capsys, "snapshot", recorded.http_url, "-o", str(snapshot), "--format", "native")[0] == 0
    http_address = recorded.http_url.removeprefix("http://")
    status, _, err = run(capsys, "replay", str(snapshot), "--to", http_address)
    assert status == 1 and "is that the collector's HTTP port? replay sends to its ingest port, --tcp" in err


def test_an_output_that_cannot_be_written_and_an_unknown_flag_are_one_line_each(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "snapshot", recorded.http_url, "-o", str(tmp_path))  # a directory
    assert (
        status == 1 and err.startswith(f"ringtrace snapshot: cannot write {tmp_path}:") and len(err.splitlines()) == 1
    )
    with pytest.raises(SystemExit) as exited:
        main(["dump", recorded.http_url, "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ringtrace dump") and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize(
    ("argv", "usage", "named"),
    [
        (["tail", "http://127.0.0.1:9", "--sincee", "5"], "ringtrace tail [options] URL", "--sincee 5 (did you"),
        (["dump"], "ringtrace dump [options] FILE|URL", "required: FILE|URL"),
        (["spans", "http://127.0.0.1:9", "--limit"], "ringtrace spans [options] URL", "--limit: expected one"),
        (["collect", "--capacty", "1GB"], "ringtrace collect [options]", "--capacty 1GB (did you mean --capacity?"),
    ],
)
def test_a_bad_argument_is_refused_in_two_lines_with_the_usage_in_one(
    argv: list[str], usage: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    prog = usage.removesuffix(" [options]").partition(" [options] ")[0]
    assert lines[0] == f"usage: {usage}" and len(lines) == 2, lines
    assert lines[1].startswith(f"{prog}: error: ") and named in lines[1]
    assert lines[1].endswith(f"see {prog} --help)")


COMMAND = "import sys; from ringtrace.collector.command.main import main; sys.exit(main())"


def _on_a_terminal(argv: list[str], stdout: Path) -> str:
    """Runs the command with its stderr on a terminal, as a user runs it, and its stdout into a file; returns what
    the terminal showed."""
    import os
    import pty

    primary, secondary = pty.openpty()
    try:
        with stdout.open("wb") as out:
            done = subprocess.run(
                [sys.executable, "-c", COMMAND, *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=secondary,
                timeout=60,
                env={**os.environ, "COLUMNS": "200", "TERM": "xterm"},
            )
        os.close(secondary)
        shown = b""
        with contextlib.suppress(OSError):  # (the terminal's other end closed)
            while data := os.read(primary, 65536):
                shown += data
    finally:
        os.close(primary)
    assert done.returncode == 0, shown
    return shown.decode(errors="replace")


def test_the_progress_line_is_on_the_terminal_and_counts_events_not_the_processes_and_threads_named(
    recorded: CollectorProcess, tmp_path: Path
) -> None:
    import re

    shown = _on_a_terminal(["snapshot", recorded.http_url, "-o", str(tmp_path / "t.json")], tmp_path / "stdout")
    assert (tmp_path / "stdout").read_bytes() == b""
    counts = re.findall(r"([\d,]+) of ([\d,]+) events stored", shown)
    assert counts, shown
    written, stored = (int(n.replace(",", "")) for n in counts[-1])
    assert written == stored == 2 * 41


def test_a_snapshot_file_to_stdout_from_a_terminal_is_the_file_alone(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _on_a_terminal(["snapshot", recorded.http_url, "-o", "-", "--format", "native"], tmp_path / "s.rtsnap")
    assert run(capsys, "snapshot", recorded.http_url, "-o", str(tmp_path / "file.rtsnap"), "--format", "native")[0] == 0
    assert run(capsys, "dump", str(tmp_path / "s.rtsnap")) == run(capsys, "dump", str(tmp_path / "file.rtsnap"))


def test_replay_ends_each_stream_with_goodbye(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A collector that answers as the real one does and keeps each stream's frames: every replayed stream ends
    FLUSH, then GOODBYE once the FLUSH_ACK came (a replay is no crash)."""
    snapshot = tmp_path / "all.rtsnap"
    assert run(capsys, "snapshot", recorded.http_url, "-o", str(snapshot), "--format", "native")[0] == 0
    streams: list[list[Any]] = []
    with socket.create_server(("127.0.0.1", 0)) as server:

        def collect() -> None:
            for _ in range(2):  # (web and db)
                connection, _ = server.accept()
                frames: list[Any] = []
                streams.append(frames)
                reader = FrameReader("client")
                with connection:
                    while (frame := reader.next_frame()) is not CLOSED:
                        if frame is NEED_DATA:
                            reader.receive_data(connection.recv(65536))  # (b"" at its end: CLOSED)
                            continue
                        frames.append(frame)
                        if isinstance(frame, Hello):
                            connection.sendall(preamble() + encode(Welcome(1, 1 << 20, 1000, 1000, 1000, "t")))
                        elif isinstance(frame, Flush):
                            connection.sendall(encode(FlushAck(frame.token)))

        collecting = threading.Thread(target=collect, daemon=True)
        collecting.start()
        status, _, err = run(capsys, "replay", str(snapshot), "--to", f"127.0.0.1:{server.getsockname()[1]}")
        collecting.join(30)
    assert status == 0, err
    assert len(streams) == 2
    for frames in streams:
        assert [type(frame) for frame in frames[-2:]] == [Flush, Goodbye], frames[-3:]


def test_snapshot_and_convert_write_a_tables_columns(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parquet = pytest.importorskip("pyarrow.parquet")
    target, native = tmp_path / "misses.parquet", tmp_path / "all.rtsnap"
    status, _, err = run(capsys, "snapshot", recorded.http_url, "-o", str(target), "--format", "parquet",
                         "--table", "instants", "--columns", "ts_ns,name", "--process", "web")  # fmt: skip
    assert status == 0, err
    table = parquet.read_table(target)
    assert table.column_names == ["name", "ts_ns"] and table.column("name").to_pylist() == ["cache-miss"] * 20
    assert run(capsys, "snapshot", recorded.http_url, "-o", str(native), "--format", "native")[0] == 0
    status, _, err = run(capsys, "convert", str(native), "-o", str(target), "--format", "parquet",
                         "--columns", "duration_ns")  # fmt: skip
    assert status == 0, err
    assert parquet.read_table(target).column_names == ["duration_ns"]
    status, _, err = run(capsys, "convert", str(native), "-o", str(target), "--columns", "name")
    assert status == 2 and err == "ringtrace convert: --columns is for format=parquet only\n", err


def test_a_time_finer_than_a_ns_is_truncated_to_it(
    recorded: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RFC 3339 takes any number of fractional digits: the collector and the command take them to the ns."""
    since, until = "2020-11-30T04:30:00.123456789123Z", "2200-01-01T00:00:00.9999999999+01:00"
    status, body = recorded.get(f"/snapshot?since={since}&until={until.replace('+', '%2B')}")
    assert status == 200, body
    assert len([e for e in json.loads(body)["traceEvents"] if e["ph"] != "M"]) == 2 * 41
    status, _, err = run(capsys, "snapshot", recorded.http_url, "-o", str(tmp_path / "t.json"), "--since", since)
    assert status == 0, err
    assert len(shown(tmp_path / "t.json")) == 2 * 41
