"""Recordings of other systems read as ringtrace files: HawkTracer HTDUMP streams and GaBIEn TimeLogger streams,
the real files their own code wrote (tests/data/foreign) and streams written here byte by byte as they write them."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.client import read_trace_file
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.foreign import hawktracer
from ringtrace.collector.foreign.offline import LoadedFile, load_file
from ringtrace.collector.foreign.recording import ForeignFormatError, to_stream
from ringtrace.collector.read.query import parse_snapshot_query
from ringtrace.collector.read.rows import selected_rows
from ringtrace.wire.errors import BadPreamble

DATA = Path(__file__).parents[1] / "data" / "foreign"
HELLO_WORLD = DATA / "hawktracer-hello-world.htdump"
CUSTOM = DATA / "hawktracer-custom-event-type.htdump"
NODEJS = DATA / "hawktracer-nodejs-test.htdump"
TIMELOGGER = DATA / "timelogger-sample.bin"
#: Each sample, the size of its last event (or record), and the events ringtrace reads from it.
SAMPLES = [
    (HELLO_WORLD, 20 + 8 + 4 + len(b"hello_world()\0"), 101),
    (CUSTOM, 20 + 4 + 4 + len(b"fp3\0"), 6),
    (NODEJS, 20 + 8 + 4 + 8, 15),
    (TIMELOGGER, 1 + 4 + 8, 411),
]
property_test = settings(deadline=None, max_examples=60)


def chrome(loaded: LoadedFile) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(b"".join(chrome_trace_chunks(loaded.view)))
    return document


def shown(document: dict[str, Any], phase: str | None = None) -> list[dict[str, Any]]:
    return [e for e in document["traceEvents"] if e["ph"] != "M" and (phase is None or e["ph"] == phase)]


def untimed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` without their times (which the file's last event puts on the wall clock)."""
    return [{k: v for k, v in e.items() if k not in ("ts", "dur")} for e in events]


def metadata(document: dict[str, Any], name: str) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in document["traceEvents"] if e["ph"] == "M" and e["name"] == name}


def written(tmp_path: Path, data: bytes, name: str = "recording") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# -- HawkTracer: the real files ---------------------------------------------------------------------------------------


def test_hello_world_converts_to_what_hawktracers_own_converter_writes() -> None:
    document = chrome(load_file(HELLO_WORLD))
    ours = shown(document)
    theirs = json.loads((DATA / "hawktracer-hello-world.converter.json").read_bytes())["traceEvents"]
    assert len(ours) == len(theirs) == 101
    assert [(e["ph"], e["name"], e["tid"]) for e in ours] == [(e["ph"], e["name"], e["tid"]) for e in theirs]
    # They write whole microseconds cut down from ns; ringtrace keeps the ns (fractional microseconds).
    assert [math.floor(e["dur"]) for e in ours] == [e["dur"] for e in theirs]
    for mine, their in zip(ours, theirs, strict=True):
        assert abs((mine["ts"] - ours[0]["ts"]) - (their["ts"] - theirs[0]["ts"])) < 1
    (outer,) = [e for e in ours if e["name"] == "hello_world()"]
    inner = sorted((e for e in ours if e["name"] == "printf()"), key=lambda e: e["ts"])
    assert len(inner) == 100
    assert all(outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] for e in inner)
    assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in itertools.pairwise(inner))  # one after another
    assert metadata(document, "thread_name") == {1: "thread 1"}
    assert metadata(document, "process_name") == {0: "hawktracer-hello-world.htdump"}
    assert document["otherData"]["source_format"] == "HawkTracer HTDUMP"


def test_user_klasses_become_typed_events_their_fields_flattened_base_first() -> None:
    loaded = load_file(CUSTOM)
    assert loaded.error is None
    events = shown(chrome(loaded))
    assert [(e["ph"], e["name"], e["tid"]) for e in events] == [("i", "OpenFileEvent", 0)] * 2 + [
        ("i", "CloseFileEvent", 0),
        ("i", "OpenFileEvent", 0),
        ("i", "CloseFileEvent", 0),
        ("i", "CloseFileEvent", 0),
    ]
    assert [list(e["args"].items()) for e in events] == [
        [("id", 49), ("opened_files_count", 0), ("success", 0), ("name", "existing_file"), ("mode", "r")],
        [("id", 50), ("opened_files_count", 1), ("success", 1), ("name", "create-me.txt"), ("mode", "w")],
        [("id", 51), ("opened_files_count", 1), ("success", 0), ("label", "fp1")],
        [("id", 52), ("opened_files_count", 1), ("success", 0), ("name", "non_existing_file"), ("mode", "r")],
        [("id", 53), ("opened_files_count", 1), ("success", 1), ("label", "fp2")],
        [("id", 54), ("opened_files_count", 0), ("success", 0), ("label", "fp3")],
    ]
    selected = parse_snapshot_query([("category", "CloseFileEvent")], now_ns=0).filter
    assert [row.args["label"] for row in selected_rows(loaded.view, selected)] == ["fp1", "fp2", "fp3"]


def test_integer_labels_are_named_through_string_mapping_events() -> None:
    events = shown(chrome(load_file(NODEJS)))
    assert len(events) == 15
    assert {(e["ph"], e["name"], e["tid"]) for e in events} == {("X", "foo", 1)}
    assert [round(e["dur"] * 1000) for e in events] == [
        10084, 8551, 8241, 8106, 10440, 8318, 8181, 8289, 8046, 7952, 8289, 7961, 8794, 7968, 8624
    ]  # fmt: skip


def test_the_last_timestamp_is_paired_with_the_files_modification_time(tmp_path: Path) -> None:
    path = tmp_path / HELLO_WORLD.name
    shutil.copyfile(HELLO_WORLD, path)
    modified_ns = 1_700_000_000_123_456_789
    os.utime(path, ns=(modified_ns, modified_ns))
    rows = list(selected_rows(load_file(path).view))
    assert max(row.wall_ns + row.dur_ns for row in rows) == modified_ns
    (outer,) = [row for row in rows if row.name == "hello_world()"]
    assert outer.wall_ns + outer.dur_ns == modified_ns  # the last event written is the outermost scope
    assert {(row.process.name, row.process.pid, row.track) for row in rows} == {(HELLO_WORLD.name, 0, "thread 1")}


def test_the_same_file_converts_to_the_same_bytes() -> None:
    assert b"".join(chrome_trace_chunks(load_file(HELLO_WORLD).view)) == b"".join(
        chrome_trace_chunks(load_file(HELLO_WORLD).view)
    )


# -- TimeLogger: the real file ---------------------------------------------------------------------------------------


def test_timelogger_sources_become_source_tracks_with_overlap_and_the_unmatched_close_counted() -> None:
    loaded = load_file(TIMELOGGER)
    assert (loaded.error, loaded.events) == (None, 205 + 206)
    document = chrome(loaded)
    tracks = metadata(document, "thread_name")
    assert sorted(tracks.values()) == ["GPU upload", "frame", "semaphore"]
    slices = shown(document, "X")
    per_source = {name: [e for e in slices if tracks[e["tid"]] == name] for name in tracks.values()}
    assert {name: len(events) for name, events in per_source.items()} == {
        "frame": 55,
        "GPU upload": 50,
        "semaphore": 100,
    }
    assert all(e["name"] == tracks[e["tid"]] for e in slices)
    overlapping = {name: [e["args"] for e in events if "args" in e] for name, events in per_source.items()}
    assert overlapping == {
        "frame": [{"activity": 2, "overlap": True}] * 5,
        "GPU upload": [],
        "semaphore": [{"activity": 2, "overlap": True}],  # opened from two threads at once, once
    }
    (close,) = shown(document, "i")
    assert tracks[close["tid"]] == "GPU upload" and "source_anomalies" in close["args"]["ringtrace"]
    assert document["otherData"]["source_anomalies"] == 1
    assert not shown(document, "B")  # every open is closed
    assert document["otherData"]["source_format"] == "GaBIEn TimeLogger"


# -- Torn tails, foreign and broken files ----------------------------------------------------------------------------


@pytest.mark.parametrize(("sample", "last_size", "events"), SAMPLES, ids=lambda v: getattr(v, "name", None))
def test_a_file_cut_anywhere_in_its_last_event_is_read_up_to_it(
    sample: Path, last_size: int, events: int, tmp_path: Path
) -> None:
    data = sample.read_bytes()
    start = len(data) - last_size
    whole, before = load_file(written(tmp_path, data)), load_file(written(tmp_path, data[:start]))
    assert (whole.error, whole.events, before.error, before.events) == (None, events, None, events - 1)
    for cut in range(start + 1, len(data)):
        loaded = load_file(written(tmp_path, data[:cut]))
        assert loaded.torn and loaded.error is not None
        assert loaded.error.startswith("the file ends inside the") and re.search(rf"at offset {start}\b", loaded.error)
        assert loaded.events == events - 1
        assert untimed(shown(chrome(loaded))) == untimed(shown(chrome(before)))


@property_test
@given(st.sampled_from([sample for sample, _, _ in SAMPLES]), st.data())
def test_any_prefix_is_read_whole_or_up_to_a_torn_tail(sample: Path, data: st.DataObject) -> None:
    content = sample.read_bytes()
    cut = data.draw(st.integers(0, len(content)))
    loaded = read_bytes(content[:cut])
    if loaded is None:
        assert cut <= 20  # too short to tell a HawkTracer or TimeLogger stream
    else:
        assert loaded.error is None or loaded.torn, loaded.error


@property_test
@given(st.sampled_from([sample for sample, _, _ in SAMPLES]), st.data())
def test_damaged_bytes_are_read_up_to_the_damage_or_refused_never_raising_else(
    sample: Path, data: st.DataObject
) -> None:
    content = bytearray(sample.read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        content[data.draw(st.integers(25, len(content) - 1))] = data.draw(st.integers(0, 255))
    try:
        loaded = read_bytes(bytes(content))
    except ForeignFormatError:
        return  # a recording that cannot be carried at all (its timestamps span more than 2^63 ns)
    if loaded is not None:
        b"".join(chrome_trace_chunks(loaded.view))  # and what was read exports


def read_bytes(content: bytes) -> LoadedFile | None:
    """``content`` loaded from a file, or None if it is of no format known."""
    with tempfile.TemporaryDirectory() as directory:
        try:
            return load_file(written(Path(directory), content))
        except BadPreamble:
            return None


@pytest.mark.parametrize(
    "content",
    [b"GIF89a" + bytes(64), b"", bytes(20), HELLO_WORLD.read_bytes()[:20], b"\x01" + TIMELOGGER.read_bytes()[1:]],
)
def test_bytes_of_no_known_format_are_refused_naming_what_they_start_with(content: bytes, tmp_path: Path) -> None:
    with pytest.raises(BadPreamble) as refused:
        load_file(written(tmp_path, content))
    message = str(refused.value)
    assert f"starts with {content[:8]!r}" in message and "HawkTracer HTDUMP, GaBIEn TimeLogger" in message


def test_a_broken_hawktracer_event_stops_the_reading_naming_offset_field_and_value(tmp_path: Path) -> None:
    data = bytearray(HELLO_WORLD.read_bytes())
    offset = 2017  # the first callstack event, after the metadata prefix
    assert struct.unpack_from("<I", data, offset) == (6,)
    data[offset : offset + 4] = struct.pack("<I", 77)
    loaded = load_file(written(tmp_path, bytes(data)))
    assert not loaded.torn and loaded.events == 0
    assert loaded.error == (
        f"the HawkTracer event at offset {offset} has klass_id 77, which no HT_EventKlassInfoEvent declared"
    )


def test_a_broken_timelogger_record_stops_the_reading_naming_offset_field_and_value(tmp_path: Path) -> None:
    data = bytearray(TIMELOGGER.read_bytes())
    offset = 82  # the fifth record, after the three new-source records and an open
    data[offset] = 7
    loaded = load_file(written(tmp_path, bytes(data)))
    assert not loaded.torn and loaded.events == 1
    assert loaded.error == (
        f"the TimeLogger record at offset {offset} has type 7: TimeLogger writes 0 new source, 1 open, 2 close"
    )
    data[offset] = 1
    data[offset + 1 : offset + 5] = struct.pack(">i", 3)
    loaded = load_file(written(tmp_path, bytes(data)))
    assert loaded.error == (
        f"the TimeLogger record at offset {offset} (open) has source_id 3, which no earlier new-source record "
        "(type 0) made"
    )


# -- HawkTracer: streams written here --------------------------------------------------------------------------------

STRUCT, STRING, INTEGER, FLOAT, DOUBLE, POINTER, UNSIGNED = 1, 2, 3, 4, 5, 6, 99
BASE = ("HT_Event", "base", 24, STRUCT)
CALLSTACK_BASE = ("HT_CallstackBaseEvent", "base", 40, STRUCT)


def cstr(text: str) -> bytes:
    return text.encode() + b"\0"


class HtDump:
    """An HTDUMP stream as HawkTracer writes one: the endianness event, klass and field infos, events."""

    def __init__(self, order: str = "<") -> None:
        self.order = order
        self.data = bytearray()
        self.ids = itertools.count(1)
        self.raw(0, 0, bytes([0 if order == "<" else 1]), event_id=0)
        self.klass(4, "HT_CallstackBaseEvent", BASE, ("HT_DurationNs", "duration", 8, UNSIGNED),
                   ("HT_ThreadId", "thread_id", 4, UNSIGNED))  # fmt: skip
        self.klass(5, "HT_CallstackIntEvent", CALLSTACK_BASE, ("HT_CallstackEventLabel", "label", 8, UNSIGNED))
        self.klass(6, "HT_CallstackStringEvent", CALLSTACK_BASE, ("const char*", "label", 8, STRING))
        self.klass(7, "HT_StringMappingEvent", BASE, ("uint64_t", "identifier", 8, UNSIGNED),
                   ("const char*", "label", 8, STRING))  # fmt: skip
        self.klass(
            8,
            "HT_SystemInfoEvent",
            BASE,
            *(("uint8_t", f"version_{p}", 1, UNSIGNED) for p in ("major", "minor", "patch")),
        )

    def pack(self, fmt: str, *values: Any) -> bytes:
        return struct.pack(self.order + fmt, *values)

    def raw(self, klass_id: int, timestamp: int, body: bytes, event_id: int | None = None) -> HtDump:
        event_id = next(self.ids) if event_id is None else event_id
        self.last_offset = len(self.data)
        self.data += self.pack("IQQ", klass_id, timestamp, event_id) + body
        return self

    def klass(self, klass_id: int, name: str, *fields: tuple[str, str, int, int], count: int | None = None) -> HtDump:
        self.raw(2, 5, self.pack("I", klass_id) + cstr(name) + self.pack("B", len(fields) if count is None else count))
        for type_name, field_name, size, data_type in fields:
            self.raw(
                3, 5, self.pack("I", klass_id) + cstr(type_name) + cstr(field_name) + self.pack("QB", size, data_type)
            )
        return self

    def scope(self, label: str | int, timestamp: int, duration: int, thread_id: int) -> HtDump:
        if isinstance(label, str):
            return self.raw(6, timestamp, self.pack("QI", duration, thread_id) + cstr(label))
        return self.raw(5, timestamp, self.pack("QIQ", duration, thread_id, label))

    def mapping(self, identifier: int, label: str) -> HtDump:
        return self.raw(7, 1, self.pack("Q", identifier) + cstr(label))

    def load(self, tmp_path: Path) -> LoadedFile:
        return load_file(written(tmp_path, bytes(self.data), "stream.htdump"))


@pytest.mark.parametrize("order", ["<", ">"])
def test_either_byte_order_with_labels_mapped_late_or_never(order: str, tmp_path: Path) -> None:
    dump = HtDump(order).raw(8, 0, bytes([1, 2, 3]), event_id=0)
    dump.scope("parse", 1_000, 500, thread_id=2).scope(7, 2_000, 250, thread_id=3).scope(8, 3_000, 0, thread_id=3)
    dump.mapping(7, "mapped late")
    loaded = dump.load(tmp_path)
    assert loaded.error is None
    document = chrome(loaded)
    spans = [(e["name"], e["tid"], e["dur"]) for e in shown(document, "X")]
    assert spans == [("parse", 2, 0.5), ("mapped late", 3, 0.25), ("8", 3, 0)]  # unmapped: the number, as theirs
    starts = [e["ts"] for e in shown(document, "X")]
    assert [round((ts - starts[0]) * 1000) for ts in starts] == [0, 1_000, 2_000]
    assert metadata(document, "thread_name") == {2: "thread 2", 3: "thread 3"}
    hello = read_trace_file(written(tmp_path, to_stream(hawktracer.read(bytes(dump.data)), "x", 0, b""))).hello
    assert hello is not None and hello.client_version == "HawkTracer 1.2.3"


def test_user_klasses_with_struct_members_and_every_number_type(tmp_path: Path) -> None:
    dump = HtDump(">")
    dump.klass(9, "Point", BASE, ("double", "x", 8, DOUBLE), ("float", "y", 4, FLOAT))
    dump.klass(10, "Sample", BASE, ("Point", "pos", 16, STRUCT), ("void*", "where", 8, POINTER),
               ("int8_t", "small", 1, INTEGER), ("uint32_t", "thread_id", 4, UNSIGNED),
               ("uint16_t", "id", 2, UNSIGNED))  # fmt: skip
    dump.klass(11, "Timed", CALLSTACK_BASE, ("int64_t", "bytes", 8, INTEGER))
    dump.raw(10, 7_000, dump.pack("dfQbIH", 1.5, 0.25, 0xDEADBEEF, -3, 4, 9), event_id=42)
    dump.raw(11, 8_000, dump.pack("QIq", 100, 4, -1))
    loaded = dump.load(tmp_path)
    assert loaded.error is None
    sample, timed = sorted(shown(chrome(loaded)), key=lambda e: e["name"])  # (not in arrival order: export/chrome.py)
    assert (sample["name"], sample["ph"], sample["tid"]) == ("Sample", "i", 4)
    assert sample["args"] == {
        "id": 42,  # the event's own id; its field called id is named after its klass
        "pos.x": 1.5,
        "pos.y": 0.25,
        "where": 0xDEADBEEF,
        "small": -3,
        "thread_id": 4,
        "Sample.id": 9,
    }
    assert (timed["name"], timed["ph"], timed["tid"], timed["dur"], timed["args"]) == (
        "Timed",
        "X",
        4,
        0.1,
        {"bytes": -1},
    )


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda d: d.klass(9, "Short", BASE, ("int", "a", 4, INTEGER), count=3).raw(9, 1, b"\0" * 4),
         "needs klass 'Short' (9), whose HT_EventKlassInfoEvent announced field_count 3 but 2 "
         "HT_EventKlassFieldInfoEvents describe it"),
        (lambda d: d.klass(9, "Odd", BASE, ("int", "a", 3, INTEGER)).raw(9, 1, b"\0" * 3),
         "needs field 'a' of klass 'Odd', whose data_type 3 (integer) with size 3 HawkTracer does not write"),
        (lambda d: d.klass(9, "Holder", BASE, ("Missing", "m", 8, STRUCT)).raw(9, 1, b""),
         "needs field 'm' of klass 'Holder', a struct of klass 'Missing', which no HT_EventKlassInfoEvent declared"),
        (lambda d: d.klass(9, "Self", ("Self", "base", 8, STRUCT)).raw(9, 1, b""),
         "needs structs nested deeper than 32 (field 'base')"),
        (lambda d: d.raw(3, 1, d.pack("I", 99) + cstr("int") + cstr("a") + d.pack("QB", 4, INTEGER)),
         "has info_klass_id 99, which no HT_EventKlassInfoEvent declared"),
        (lambda d: d.raw(0, 0, bytes([2])), "has endianness 2 (0 little, 1 big)"),
    ],
)  # fmt: skip
def test_an_event_whose_end_cannot_be_found_stops_the_reading(damage: Any, says: str, tmp_path: Path) -> None:
    dump = HtDump().scope("before", 1, 1, thread_id=1)
    damage(dump)
    offset = dump.last_offset
    dump.scope("after", 2, 1, thread_id=1)
    loaded = dump.load(tmp_path)
    assert loaded.events == 1 and not loaded.torn
    assert loaded.error is not None and says in loaded.error and f" at offset {offset} " in loaded.error


# -- TimeLogger: streams written here --------------------------------------------------------------------------------


def record(kind: int, source_id: int, time_ns: int, name: str | None = None) -> bytes:
    head = struct.pack(">biq", kind, source_id, time_ns)
    if name is None:
        return head
    # What Java's writeUTF writes: UTF-16 code units as UTF-8, NUL as C0 80.
    units = struct.unpack(f"<{len(name.encode('utf-16-le')) // 2}H", name.encode("utf-16-le"))
    encoded = "".join(map(chr, units)).encode("utf-8", "surrogatepass").replace(b"\0", b"\xc0\x80")
    return head + struct.pack(">H", len(encoded)) + encoded


def test_timelogger_names_in_modified_utf8_and_negative_times(tmp_path: Path) -> None:
    data = record(0, 0, -5_000, "a\0b \U0001f600") + record(1, 0, -4_000) + record(2, 0, -1_000)
    loaded = load_file(written(tmp_path, data))
    assert loaded.error is None
    document = chrome(loaded)
    (slice_,) = shown(document)
    assert (slice_["name"], slice_["dur"]) == ("a\0b \U0001f600", 3)
    assert list(metadata(document, "thread_name").values()) == ["a\0b \U0001f600"]


def test_a_source_made_again_takes_its_later_name(tmp_path: Path) -> None:
    data = record(0, 0, 1, "old") + record(1, 0, 2) + record(0, 0, 3, "new") + record(2, 0, 4)
    document = chrome(load_file(written(tmp_path, data)))
    assert list(metadata(document, "thread_name").values()) == ["new"]
    assert [e["name"] for e in shown(document)] == ["old"]  # named when it opened
