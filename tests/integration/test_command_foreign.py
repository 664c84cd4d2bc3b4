"""``ringtrace convert`` and ``ringtrace dump`` on recordings of other systems: the real HawkTracer and TimeLogger
files in tests/data/foreign, whole, torn, broken."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ringtrace.client import read_trace_streams
from ringtrace.collector.command.main import main

DATA = Path(__file__).parents[1] / "data" / "foreign"
HELLO_WORLD = (DATA / "hawktracer-hello-world.htdump").read_bytes()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def fields(line: str) -> list[str]:
    return line.split("  ")


NO_THREAD = "events without a thread"
#: Per file: (track, category, name) -> lines of the dump.
DUMPED = {
    "hawktracer-hello-world.htdump": {("thread 1", "span", "printf()"): 100, ("thread 1", "span", "hello_world()"): 1},
    "hawktracer-custom-event-type.htdump": {
        (NO_THREAD, "OpenFileEvent", "OpenFileEvent"): 3,
        (NO_THREAD, "CloseFileEvent", "CloseFileEvent"): 3,
    },
    "hawktracer-nodejs-test.htdump": {("thread 1", "span", "foo"): 15},
    "timelogger-sample.bin": {
        ("frame", "source_open", "frame"): 55,
        ("frame", "source_close", "frame"): 55,
        ("GPU upload", "source_open", "GPU upload"): 50,
        ("GPU upload", "source_close", "GPU upload"): 51,  # one with nothing open
        ("semaphore", "source_open", "semaphore"): 100,
        ("semaphore", "source_close", "semaphore"): 100,
    },
}


@pytest.mark.parametrize("name", DUMPED)
def test_dump_prints_a_foreign_recording_one_event_a_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "dump", str(DATA / name))
    assert (status, err) == (0, "")
    rows = [fields(line) for line in out.splitlines()]
    assert {row[1] for row in rows} == {f"{name}[0]"}  # the file's name as the process, pid 0
    assert all(row[4] == "-" for row in rows)  # no message priorities
    seen: dict[tuple[str, str, str], int] = {}
    for row in rows:
        seen[(row[2], row[3], row[5])] = seen.get((row[2], row[3], row[5]), 0) + 1
    assert seen == DUMPED[name]
    stamps = [row[0] for row in rows]
    assert stamps == sorted(stamps)


def test_dump_shows_durations_and_typed_fields(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "dump", str(DATA / "hawktracer-hello-world.htdump"), "--name", "hello_world()")
    (line,) = out.splitlines()
    assert fields(line)[-1] == "dur=52.278us"
    _, out, _ = run(capsys, "dump", str(DATA / "hawktracer-custom-event-type.htdump"), "--category", "CloseFileEvent")
    assert [json.loads(fields(line)[-1]) for line in out.splitlines()] == [
        {"id": 51, "opened_files_count": 1, "success": 0, "label": "fp1"},
        {"id": 53, "opened_files_count": 1, "success": 1, "label": "fp2"},
        {"id": 54, "opened_files_count": 0, "success": 0, "label": "fp3"},
    ]


def test_convert_writes_chrome_json_or_a_snapshot_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = DATA / "hawktracer-hello-world.htdump"
    assert run(capsys, "convert", str(source), "-o", str(tmp_path / "hw.json")) == (0, "", "")
    document: dict[str, Any] = json.loads((tmp_path / "hw.json").read_bytes())
    spans = [e for e in document["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 101 and {e["tid"] for e in spans} == {1}
    assert document["otherData"]["source_format"] == "HawkTracer HTDUMP"
    status, _, _ = run(capsys, "convert", str(DATA / "timelogger-sample.bin"), "-o", str(tmp_path / "tl.rtsnap"),
                       "--format", "native", "--track", "semaphore")  # fmt: skip
    assert status == 0
    (stream,) = read_trace_streams(tmp_path / "tl.rtsnap")
    assert stream.hello is not None and stream.hello.client_version == "GaBIEn TimeLogger"
    assert sorted(e.kind for e in stream.events) == ["source_close"] * 100 + ["source_open"] * 100
    assert {e.track.name for e in stream.events} == {"semaphore"}


def test_a_torn_foreign_file_is_read_up_to_where_it_tears(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = (DATA / "hawktracer-hello-world.htdump").read_bytes()
    (tmp_path / "cut.htdump").write_bytes(data[:-5])
    status, out, err = run(capsys, "dump", str(tmp_path / "cut.htdump"))
    assert status == 0 and len(out.splitlines()) == 100 and "hello_world()" not in out
    assert err == (
        f"ringtrace: {tmp_path / 'cut.htdump'}: the file ends inside the HawkTracer event at offset {len(data) - 46} "
        "(HT_CallstackStringEvent, klass 6): its field 'label' (a string) has no terminating NUL; "
        "read everything before it\n"
    )


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\x7fELF" + bytes(60), "not a ringtrace file (it starts with b'\\x7fELF\\x00\\x00\\x00\\x00', not the magic "
                                 "b'RTRC'), nor one of HawkTracer HTDUMP, GaBIEn TimeLogger"),
        (HELLO_WORLD[:2017] + (77).to_bytes(4, "little") + HELLO_WORLD[2021:],
         "is corrupt: the HawkTracer event at offset 2017 has klass_id 77, which no HT_EventKlassInfoEvent declared"),
        ((DATA / "timelogger-sample.bin").read_bytes()[:82] + b"\x09" + bytes(12),
         "is corrupt: the TimeLogger record at offset 82 has type 9"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["dump", "convert"])
def test_a_foreign_or_broken_file_is_one_line_and_exit_status_1(
    content: bytes, says: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "input").write_bytes(content)
    argv = [command, str(tmp_path / "input")] + (["-o", str(tmp_path / "out.json")] if command == "convert" else [])
    status, out, err = run(capsys, *argv)
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith(f"ringtrace {command}: ") and says in err, err
    assert not (tmp_path / "out.json").exists()
