"""The spans, instants, counters, messages and samples tables' C writer (``export/table_columns.py``,
``_tables.c``) against the Python rows it stands in for (``table_rows.py`` read through the walk alone): the same rows
and the same report, for any args (a message's values and text, a sample's stack table), under filters and windows, in
row groups, and for payloads and tables that are not what they should be."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any

import msgpack
import pyarrow.parquet as pq
import pytest
from arg_values import ARG_VALUES
from hypothesis import example, given, settings
from hypothesis import strategies as st
from recorded_files import recorded
from ringtrace.client import Timeline
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.parquet import METADATA_KEY, parquet_chunks
from ringtrace.collector.export.table_columns import ACCELERATED, ColumnBuffers, message_template
from ringtrace.collector.export.table_rows import TableRows
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView, segment_stream
from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Pattern
from ringtrace.wire.arg_values import normalise_values
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import COUNTER, INSTANT, SAMPLE, SPAN, THREAD_TRACK, KindRegistry, TrackInfo
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.table_frames import KindSpec
from tables_model import parquet_rows

pytestmark = pytest.mark.skipif(not ACCELERATED, reason="the C writer is not built here (or RINGTRACE_PURE_PYTHON)")

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACK = TrackInfo(7, THREAD_TRACK, "main", 1)


#: The tables the C writer makes rows of, in the order of their numbers there.
C_MADE = ("spans", "instants", "counters")


def spans_alike(
    view: SnapshotView,
    selected: EventFilter = EVERYTHING,
    columns: tuple[str, ...] | None = None,
    table: str = "spans",
) -> list[str]:
    """Assert that ``table`` (of ``columns``) is the same with the C writer and without, report and all; its rows."""
    files = [
        b"".join(parquet_chunks(view, selected, table, accelerated=fast, columns=columns)) for fast in (True, False)
    ]
    fast, slow = (parquet_rows(data) for data in files)
    assert fast == slow
    reports = [json.loads(pq.ParquetFile(io.BytesIO(data)).metadata.metadata[METADATA_KEY]) for data in files]
    assert reports[0] == reports[1]
    assert pq.read_schema(io.BytesIO(files[0])) == pq.read_schema(io.BytesIO(files[1]))
    return fast


def rows_in_c(view: SnapshotView, selected: EventFilter = EVERYTHING, table: str = "spans") -> int:
    """How many of ``table``'s rows the C writer made."""
    batches = TableRows(view, selected, table).batches()
    return sum(batch.rows for batch in batches if isinstance(batch, ColumnBuffers))


def mixed(tl: Timeline) -> None:
    for i in range(400):
        ids = {"trace_id": TRACE_ID, "span_id": f"{i:016x}"} if i % 4 == 0 else {}
        with tl.scope("work", i=i, text='a"b\\c\nd ü ✓', **ids):
            tl.instant("tick", f=i / 7, **ids)
        with tl.scope("bare"):
            pass
        with tl.scope(f"bytes-{i % 3}", blob=b"\x00\xff"):  # (bytes: the Python rows')
            pass
        tl.counter("queue", i % 5)
        tl.marker("phase", "start", step=i)
        tl.marker("phase", "end")
        if i % 50 == 0:  # (async events and incidents: the Python rows' instants)
            tl.async_begin("load", i, step=i)
            tl.async_end("load", i)
            tl.instant(f"bytes-{i % 3}", blob=b"\x00\xff")
        if i % 100 == 0:
            tl.flush(timeout_s=30)
    tl.incident("slow", where="here")
    tl.marker("never ended", "start")


def test_spans_of_every_sort_are_the_python_rows_and_most_are_made_in_c(tmp_path: Path) -> None:
    view = recorded(tmp_path, mixed)
    rows = [json.loads(row) for row in spans_alike(view)]
    assert len(rows) == 400 * 4 + 1
    assert rows_in_c(view) == 800  # work and bare; not the spans with bytes, the markers' or the one never ended
    work = [row for row in rows if row["name"] == "work"]
    assert sum(row["trace_id"] == TRACE_ID for row in work) == 100
    assert all(row["end_ns"] == row["start_ns"] + row["duration_ns"] and row["category"] is None for row in work)
    assert {row["process"] for row in rows} == {"unit"} and {row["track"] for row in rows} == {"unit (MainThread)"}


def test_counters_are_the_python_rows_and_made_in_c(tmp_path: Path) -> None:
    view = recorded(tmp_path, mixed)
    rows = [json.loads(row) for row in spans_alike(view, table="counters")]
    assert len(rows) == 400 and rows_in_c(view, table="counters") == 400
    assert {(row["name"], row["series"]) for row in rows} == {("queue", "value")}
    assert sorted({row["value"] for row in rows}) == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_instants_of_every_sort_are_the_python_rows_and_most_are_made_in_c(tmp_path: Path) -> None:
    view = recorded(tmp_path, mixed)
    rows = [json.loads(row) for row in spans_alike(view, table="instants")]
    kinds = [row["kind"] for row in rows]
    assert (kinds.count("instant"), kinds.count("async_begin"), kinds.count("async_end")) == (408, 8, 8)
    assert kinds.count("incident") == 1
    assert rows_in_c(view, table="instants") == 400  # the ticks; not those with bytes, async events or the incident
    ticks = [row for row in rows if row["name"] == "tick"]
    assert sum(row["trace_id"] == TRACE_ID for row in ticks) == 100 and all(row["async_id"] is None for row in ticks)
    assert {row["async_id"] for row in rows if row["kind"] == "async_end"} == {str(i) for i in range(0, 400, 50)}


@pytest.mark.parametrize("table", C_MADE)
def test_filters_and_windows_select_the_same_rows(tmp_path: Path, table: str) -> None:
    view = recorded(tmp_path, mixed)
    starts = sorted(json.loads(row)["start_ns"] for row in spans_alike(view))
    for selected in (
        EventFilter(since_ns=starts[300], until_ns=starts[900]),
        EventFilter(since_ns=starts[-5]),
        EventFilter(until_ns=starts[10]),
        EventFilter(limit=50),
        EventFilter(name=Pattern("work")),
        EventFilter(trace_id=TRACE_ID),
        EventFilter(process=Pattern("nobody")),
    ):
        spans_alike(view, selected, table=table)
    window = EventFilter(since_ns=starts[300], until_ns=starts[900])
    assert 0 < rows_in_c(view, window, table) < (600 if table == "spans" else 350)  # (ticks, counters: 1 each)


def test_a_limit_counts_the_events_a_snapshot_shows_and_every_table_holds_theirs(tmp_path: Path) -> None:
    """``limit`` is one of events, the same whatever the format: the tables of one query hold the rows of the same
    newest events (a counter's row per series), so a join of them lines up."""
    view = recorded(tmp_path, mixed)
    selected = EventFilter(limit=50)
    shown = json.loads(b"".join(chrome_trace_chunks(view, selected)))["traceEvents"]
    events = [event for event in shown if event["ph"] != "M"]
    rows = {table: spans_alike(view, selected, table=table) for table in ("spans", "instants", "counters")}
    assert 40 <= len(events) <= 50  # (events as stored: a marker's start and end are two, shown as one slice)
    assert sum(map(len, rows.values())) == len(events)
    assert len(rows["spans"]) == sum(event["ph"] in "XB" for event in events)


@pytest.mark.parametrize(
    ("table", "columns"),
    [
        ("spans", ("name", "duration_ns")),
        ("spans", ("pid",)),
        ("spans", ("trace_id", "span_id")),
        ("spans", ("args",)),
        ("spans", ("process", "host", "track", "end_ns")),
        ("instants", ("name", "ts_ns")),
        ("instants", ("kind", "async_id")),
        ("instants", ("trace_id",)),
        ("instants", ("args", "pid")),
        ("counters", ("value",)),
        ("counters", ("series", "ts_ns")),
        ("counters", ("process", "host", "track", "name", "pid")),
    ],
)
def test_some_columns_are_those_of_the_whole_table(tmp_path: Path, table: str, columns: tuple[str, ...]) -> None:
    view = recorded(tmp_path, mixed)
    rows = spans_alike(view, columns=columns, table=table)
    whole = [json.loads(row) for row in spans_alike(view, table=table)]
    assert rows == sorted(json.dumps({key: row[key] for key in columns}, sort_keys=True) for row in whole)


def test_row_groups_hold_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ringtrace.collector.export import table_rows

    monkeypatch.setattr(table_rows, "BATCH_ROWS", 64)
    view = recorded(tmp_path, mixed)
    spans_alike(view)
    spans_alike(view, table="instants")
    spans_alike(view, table="counters")
    parquet = pq.ParquetFile(io.BytesIO(b"".join(parquet_chunks(view, EVERYTHING, "spans"))))
    assert parquet.metadata.num_rows == 1601 and parquet.metadata.num_row_groups > 3


@settings(max_examples=80, deadline=None)
@given(
    args=st.dictionaries(st.text(max_size=12), ARG_VALUES, max_size=5),
    name=st.text(max_size=20),
    ids=st.lists(st.sampled_from(["trace_id", "span_id", "parent_span_id"]), max_size=3),
)
def test_any_args_and_ids_are_the_python_rows(
    tmp_path_factory: pytest.TempPathFactory, args: dict[str, Any], name: str, ids: list[str]
) -> None:
    carried = {**args, **{key: f"{key}-{len(args)}" for key in ids}}

    def record(tl: Timeline) -> None:
        with tl.scope(name, **carried):
            tl.instant(name, **carried)
        with tl.scope(name):
            tl.instant(name)

    view = recorded(tmp_path_factory.mktemp("args"), record)
    assert len(spans_alike(view)) == 2
    assert len(spans_alike(view, table="instants")) == 2


# -- payloads that are not what they should be ------------------------------------------------------------------------


def stream_with(tmp_path: Path, payloads: list[tuple[int, bytes]]) -> SnapshotView:
    """A file of one stream whose EVENTS frames carry ``payloads`` ((count, payload) each) as given, on a track that
    declares the spans and instants of a real encoder."""
    encoder = StreamEncoder()
    records = [SPAN, "a", 10**18, 10**18 + 5, {"k": 1}, INSTANT, "b", 10**18, 10**18, None]
    batch = encoder.encode(TRACK, [*records, COUNTER, "c", 10**18, 10**18, {"value": 1}])
    frames = [preamble(), encode(Hello(1, "host", "bad", "i1", "boot", 1, 2, "test")), *encoder.prefix()]
    frames += [*batch.control, *(frame for frame, _ in batch.events)]
    for count, payload in payloads:
        frames.append(encode(Events(TRACK.track_id, count, 10**18, 10**18 + 10, payload)))
    path = tmp_path / "bad.rttrace"
    path.write_bytes(b"".join(frames))
    return load_file(path).view


def ids_of_a_span(tmp_path: Path, table: str = "spans") -> tuple[int, int]:
    """The kind id of a span (or an instant, a counter) and the string id of its name in ``stream_with``'s stream."""
    view = stream_with(tmp_path, [])
    (segment,) = view.frames.segments
    for _, frame in segment_stream(segment, view.limits):
        if isinstance(frame, Events):
            kinds, names = msgpack.unpackb(frame.payload)[:2]
            which = C_MADE.index(table)
            return kinds[which], names[which]
    raise AssertionError("no EVENTS frame")


def columns(kinds: list[Any], names: list[Any], ts: list[Any], dur: list[Any], args: list[Any]) -> bytes:
    return msgpack.packb([kinds, names, ts, dur, args])  # type: ignore[no-any-return]


def counters_of(tmp_path: Path, args: list[bytes]) -> SnapshotView:
    """A stream of counters, each with ``args`` as given (msgpack bytes)."""
    (tmp_path / "ids").mkdir()
    counter, c = ids_of_a_span(tmp_path / "ids", "counters")
    count = len(args)
    leading = b"".join(
        msgpack.packb(column) for column in ([counter] * count, [c] * count, [*range(count)], [0] * count)
    )
    return stream_with(tmp_path, [(count, b"\x95" + leading + msgpack.packb([0] * count)[:-count] + b"".join(args))])


def test_counters_of_odd_values_and_keys_are_the_python_rows(tmp_path: Path) -> None:
    args = [
        b"\x82\xa1a\x01\xa1b\xcb" + struct.pack(">d", 2.5),  # two series
        b"\x81\xa1f\xca" + struct.pack(">f", 1.1),  # a float32
        b"\x81\xa1u\xcf" + (2**64 - 1).to_bytes(8, "big"),  # past int64
        b"\x81\xa1i\xd3" + (-(2**63)).to_bytes(8, "big", signed=True),  # the least int64
        b"\x81\xa1t\xc3",  # a bool: null
        b"\x81\xa1s\xa1x",  # text: null
        b"\x81\xa1n\x91\x01",  # a list: null
        b"\xc0",  # none: no row
        b"\x80",  # an empty map: no row
        b"\x82\xa1a\x01\xa1a\x02",  # a key twice: the Python rows' (a dict keeps one)
        b"\x81\x05\x01",  # an int key: the Python rows'
        b"\x92\x01\x02",  # no map: the Python rows'
    ]
    view = counters_of(tmp_path, args)
    rows = [json.loads(row) for row in spans_alike(view, table="counters")]
    assert {(row["series"], row["value"]) for row in rows} >= {("a", 1.0), ("b", 2.5), ("t", None), ("u", 2.0**64)}
    assert rows_in_c(view, table="counters") == 8 + 1  # (and the stream's own counter)


@settings(max_examples=60, deadline=None)
@given(args=st.lists(st.one_of(st.none(), st.dictionaries(st.text(max_size=8), ARG_VALUES, max_size=5)), max_size=6))
def test_counters_of_any_args_are_the_python_rows(
    tmp_path_factory: pytest.TempPathFactory, args: list[dict[str, Any] | None]
) -> None:
    view = counters_of(tmp_path_factory.mktemp("counters"), [msgpack.packb(arg) for arg in args])
    assert len(spans_alike(view, table="counters")) == 1 + sum(len(arg or {}) for arg in args)  # (1: the stream's)


@pytest.mark.parametrize("table", C_MADE)
def test_odd_payloads_make_the_python_rows_and_the_same_report(tmp_path: Path, table: str) -> None:
    (tmp_path / "ids").mkdir()
    span, a = ids_of_a_span(tmp_path / "ids", table)

    def with_args(raw: bytes, count: int = 1) -> bytes:
        return columns([span] * count, [a] * count, list(range(count)), [3] * count, [None] * count)[:-count] + raw

    good = columns([span, span], [a, a], [0, 1], [5, 7], [{"k": 1, "trace_id": "x"}, None])
    payloads = [
        (2, good),
        (2, good + b"\x00"),  # trailing bytes
        (3, good),  # a count the columns do not hold
        (1, with_args(b"\x81\xa1\xff\x01")),  # a map key that is not UTF-8
        (1, columns([span], [a], [True], [5], [None])),  # a bool is not an integer
        (1, columns([span], [a], [0], [-5], [None])),  # a negative duration
        (1, columns([span], [a], [2**63], [0], [None])),  # past what a wall clock gives
        (1, columns([999], [a], [0], [0], [None])),  # a kind never declared
        (1, columns([span], [12345], [0], [0], [None])),  # a string never declared
        (1, columns([span], [a], [0], [0], [[1, 2]])),  # args that are not a map
        (1, with_args(b"\x81\xa1e\xc7\x03\x05xyz")),  # an extension type
        (1, with_args(b"\x81\x05\x01")),  # an int key
        (1, with_args(b"\x82\xa8trace_id\xa1x\xa8trace_id\xa1y")),  # a key twice: the last counts
        (1, with_args(b"\x82\xa8trace_id\xa1x\xa8trace_id\x05")),  # ... even when it is no text
        (2, with_args(b"\x81\xa1k\x01\x81\xa1d" + b"\x91" * 40 + b"\x01", count=2)),  # deeper than the C writer goes
    ]
    view = stream_with(tmp_path, payloads)
    rows = [json.loads(row) for row in spans_alike(view, table=table)]
    if table != "counters":  # (a counter's args are its series)
        assert {row["trace_id"] for row in rows} >= {"x", "y"}
    assert rows_in_c(view, table=table) >= 4


@pytest.mark.parametrize("table", C_MADE)
def test_a_payload_cut_anywhere_adds_no_row(table: str) -> None:
    from ringtrace.collector.export import _tables  # here: not built everywhere

    builder = _tables.builder(C_MADE.index(table))
    code = {"spans": b"X", "instants": b"i", "counters": b"C"}[table]
    payload = columns([0, 0], [0, 0], [0, 1], [5, 7], [{"k": [1.5, "x" * 40], "trace_id": "t"}, None])
    where = (b"p", 1, b"h", b"t")

    def add(data: bytes, count: int = 2) -> Any:
        spans = bytes(8) + (1).to_bytes(8, "little")  # string 0, "a": bytes 0 to 1 of names
        return _tables.add_rows(
            builder, data, count, (0, 1, 2, 3, 4), 10**18, 0, None, None, code, b"a", spans, *where, 0x1FFF
        )

    made = add(payload)
    assert made is not None and made[0] == 2 and made[2] is None
    for cut in range(len(payload)):
        assert add(payload[:cut]) is None
        assert add(payload[:cut] + b"\xc1" * 3) is None
    taken_rows, ints, strings, floats = _tables.take_rows(builder)
    assert len(ints) == (4 if table == "spans" else 2) and len(strings) == (5 if table == "counters" else 8)
    second = 10**18 if table == "counters" else 10**18 + 1  # (a counter's rows: one per series of the first)
    assert taken_rows == 2 and ints[1] == (10**18).to_bytes(8, "little") + second.to_bytes(8, "little")
    valid, offsets, data = strings[4]  # args: the first row's, then a null; a counter's series: k, trace_id
    if table == "counters":
        assert floats == (b"\x00", bytes(16)) and data == b"ktrace_id"  # (a list and a text: no number)
    else:
        assert valid == b"\x01" and data == b'{"k":[1.5,"' + b"x" * 40 + b'"],"trace_id":"t"}'
        assert offsets == b"".join(n.to_bytes(4, "little") for n in (0, len(data), len(data))) and floats is None
    assert _tables.take_rows(builder)[0] == 0
    with pytest.raises(ValueError, match="table must be 0 to 4, got 5"):
        _tables.builder(5)


# -- messages ---------------------------------------------------------------------------------------------------------


def chatty(tl: Timeline) -> None:
    request = tl.message("http", "info", "GET $path took ${ms} ms for ${user}, $trace_id")
    plain = tl.message("db", "warning", 'pool "exhausted"\n(detail on a second line)')
    for i in range(200):
        request(f"/p/{i}", i, None if i % 3 else True, TRACE_ID if i % 4 == 0 else i)
        plain()
        if i % 10 == 0:  # (a float shown in the text, bytes, values past the fields: the Python rows' or not)
            request(f"/q/{i}", i / 7, "ü", TRACE_ID)
            request(f"/r/{i}", i, b"\x00\xff", TRACE_ID)
            request(f"/s/{i}", i, "x", TRACE_ID, "extra", 5)
            request()
        if i % 50 == 0:
            tl.flush(timeout_s=30)
    with tl.scope("work"):
        tl.instant("tick")


def test_messages_are_the_python_rows_and_most_are_made_in_c(tmp_path: Path) -> None:
    view = recorded(tmp_path, chatty)
    rows = [json.loads(row) for row in spans_alike(view, table="messages")]
    assert len(rows) == 200 * 2 + 20 * 4
    in_c = rows_in_c(view, table="messages")
    assert in_c == 200 * 2 + 20 * 2  # (not the float in the text, nor the bytes)
    first = next(row for row in rows if row["text"].startswith("GET path(/p/1) "))
    assert first["text"] == "GET path(/p/1) took 1 ms for None, trace_id(1)" and first["trace_id"] is None
    assert (first["category"], first["priority"]) == ("http", "info")
    assert first["args"] == {"path": "/p/1", "ms": 1, "user": None, "trace_id": 1}
    assert sum(row["trace_id"] == TRACE_ID for row in rows) == 50 + 20 * 3
    extra = next(row for row in rows if row["text"].startswith("GET path(/s/10)"))
    assert extra["args"] == {
        "path": "/s/10",
        "ms": 10,
        "user": "x",
        "trace_id": TRACE_ID,
        "value5": "extra",
        "value6": 5,
    }
    empty = next(row for row in rows if row["args"] is None and row["category"] == "http")
    assert empty["text"] == "GET $path took ${ms} ms for ${user}, $trace_id"
    assert {row["text"] for row in rows if row["category"] == "db"} == {'pool "exhausted"'}


@pytest.mark.parametrize(
    "columns",
    [("text",), ("ts_ns", "pid"), ("args", "trace_id"), ("category", "priority", "process", "host", "track")],
)
def test_some_message_columns_are_those_of_the_whole_table(tmp_path: Path, columns: tuple[str, ...]) -> None:
    view = recorded(tmp_path, chatty)
    rows = spans_alike(view, columns=columns, table="messages")
    whole = [json.loads(row) for row in spans_alike(view, table="messages")]
    assert rows == sorted(json.dumps({key: row[key] for key in columns}, sort_keys=True) for row in whole)


def test_messages_under_filters_windows_and_row_groups_are_the_python_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ringtrace.collector.export import table_rows

    view = recorded(tmp_path, chatty)
    starts = sorted(json.loads(row)["ts_ns"] for row in spans_alike(view, table="messages"))
    for selected in (
        EventFilter(since_ns=starts[100], until_ns=starts[300]),
        EventFilter(since_ns=starts[-5]),
        EventFilter(limit=50),
        EventFilter(name=Pattern("GET*")),
        EventFilter(category=Pattern("db")),
    ):
        spans_alike(view, selected, table="messages")
    assert 0 < rows_in_c(view, EventFilter(since_ns=starts[100], until_ns=starts[300]), "messages") < 200
    monkeypatch.setattr(table_rows, "BATCH_ROWS", 64)
    spans_alike(view, table="messages")


#: Pieces of a message's text; among its values' names, those of the messages table's columns (a value of such a name is
#: one of its values, in ``args``: its row's priority and category are its kind's).
MESSAGE_PIECES = [
    *("$a", "${b}", "${trace_id}", "$value3", "${value7}", "$zz", " lit ", "$", "{", "}", "ü", "$a_b"),
    *("$priority", "${category}", "$text", "${args}", "$ts_ns", "$process"),
]


@settings(max_examples=80, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(MESSAGE_PIECES), max_size=6),
    category=st.sampled_from(["app", "", "call", "sample", "db ü"]),
    values=st.lists(st.lists(st.text(max_size=4) | st.integers(-5, 5) | ARG_VALUES, max_size=8), max_size=4),
)
@example(pieces=["$priority", " lit ", "${category}"], category="app", values=[[3, {"a": [1]}], ["x", "y"]])
def test_messages_of_any_text_and_values_are_the_python_rows(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str], category: str, values: list[list[Any]]
) -> None:
    def record(tl: Timeline) -> None:
        message = tl.message(category, "info", "".join(pieces))
        for each in values:
            message(*each)

    view = recorded(tmp_path_factory.mktemp("messages"), record)
    rows = [json.loads(row) for row in spans_alike(view, table="messages")]
    assert len(rows) == (0 if category in ("", "call", "sample") else len(values))
    assert all((row["category"], row["priority"]) == (category, "info") for row in rows)  # the kind's, as its values


def declared_messages(tmp_path: Path, kinds: list[KindSpec], values: list[list[Any]]) -> SnapshotView:
    """A file of one stream that declares message ``kinds`` as given (names any stream may declare) and holds a
    message of each of ``values`` of each kind."""
    registry = KindRegistry()
    declared = [registry.register(k.name, "message", k.fields, normalise_values, k.text, k.priority) for k in kinds]
    encoder = StreamEncoder(registry=registry)
    records = [value for kind in declared for given in values for value in (kind.id, kind.name, 10**18, 10**18, given)]
    batch = encoder.encode(TRACK, records)
    frames = [preamble(), encode(Hello(1, "host", "odd", "i1", "boot", 1, 2, "test")), *encoder.prefix()]
    path = tmp_path / "odd.rttrace"
    path.write_bytes(b"".join([*frames, *batch.control, *(frame for frame, _ in batch.events)]))
    return load_file(path).view


def test_message_kinds_a_template_cannot_describe_are_the_python_rows(tmp_path: Path) -> None:
    kinds = [
        KindSpec(0, "twice", "message", (("a", "any"), ("a", "any")), "$a", "info"),
        KindSpec(0, "category", "message", (("category", "any"), ("priority", "any")), "$category", "info"),
        KindSpec(0, "named", "message", (("value2", "any"),), "${value2} $value3", "info"),
        KindSpec(0, "incident", "message", (("a", "any"),), "$a", "info"),
        KindSpec(0, "fine", "message", (("a", "any"),), "${a} $value2 $value99 ${value1}", ""),
    ]
    view = declared_messages(tmp_path, kinds, [[1, 2, 3], ["x"], []])
    rows = [json.loads(row) for row in spans_alike(view, table="messages")]
    assert len(rows) == 4 * 3  # (a message of category "incident" is no row)
    assert rows_in_c(view, table="messages") == 2 * 3  # the fine kind's, and the one of values named as columns
    named = sorted((row["priority"], json.dumps(row["args"])) for row in rows if row["category"] == "category")
    assert named == [
        ("info", "null"),
        ("info", '{"category": "x"}'),
        ("info", '{"category": 1, "priority": 2, "value3": 3}'),
    ]
    fine = sorted(row["text"] for row in rows if row["category"] == "fine")
    assert fine == ["${a} $value2 $value99 ${value1}", "1 value2(2) $value99 ${value1}", "x $value2 $value99 ${value1}"]


def test_odd_message_payloads_make_the_python_rows_and_the_same_report(tmp_path: Path) -> None:
    kinds = [KindSpec(0, "app", "message", (("a", "any"), ("b", "any")), "$a ${b}", "info")]
    (tmp_path / "ids").mkdir()
    ids = stream_of_messages(tmp_path / "ids", kinds, [])
    (segment,) = ids.frames.segments
    kind, name = next(
        [column[0] for column in msgpack.unpackb(frame.payload)[:2]]
        for _, frame in segment_stream(segment, ids.limits)
        if isinstance(frame, Events)
    )

    def one(args: bytes) -> tuple[int, bytes]:
        return 1, columns([kind], [name], [0], [0], [None])[:-1] + args

    payloads = [
        one(b"\x92\x01\x02"),  # fine
        one(b"\x92\xa1x\xcb" + struct.pack(">d", 2.5)),  # a float in the text
        one(b"\x81\xa1a\x01"),  # a map, not a list of values
        one(b"\xc0"),  # none
        one(b"\xdc\x00\x41" + b"\x01" * 65),  # more values than the C writer takes
        one(b"\x92\xc4\x01x\x01"),  # bytes in the text
        one(b"\x92\x01" + b"\x91" * 40 + b"\x01"),  # deeper than the C writer goes
        one(b"\x93\x01\x02\xc7\x03\x05xyz"),  # an extension type past the text
        one(b"\x92\x01\xa2\xff\xfe"),  # text that is no UTF-8
        (2, columns([kind], [name], [0], [0], [[1, 2]])),  # a count the columns do not hold
        (1, columns([kind], [12345], [0], [0], [[1, 2]])),  # a string never declared
    ]
    view = stream_of_messages(tmp_path, kinds, payloads)
    rows = [json.loads(row) for row in spans_alike(view, table="messages")]
    assert {row["text"] for row in rows} >= {"a(1) 2", "a(x) 2.5", "a(0) 0"}
    assert rows_in_c(view, table="messages") >= 2


def test_a_message_payload_or_template_cut_anywhere_adds_no_row() -> None:
    from ringtrace.collector.export import _tables  # here: not built everywhere

    kind = KindSpec(0, "app", "message", (("a", "any"), ("trace_id", "any")), "x $a ${trace_id} $value3 y", "info")
    template = message_template(kind)
    assert template is not None
    builder = _tables.builder(3)
    payload = columns([0, 0], [0, 0], [0, 1], [0, 0], [[1.5, "t", 7], ["\u00fc", None]])
    spans = bytes(8) + (1).to_bytes(8, "little")  # string 0, "a": bytes 0 to 1 of names
    where = (b"p", 1, b"h", b"t")

    def add(data: bytes, blob: bytes, count: int = 2) -> Any:
        ends = bytes(8) + len(blob).to_bytes(8, "little")
        return _tables.add_rows(
            builder, data, count, (0, 1, 2, 3, 4), 10**18, 0, None, None, b"\x01", b"a", spans, *where, 0x1FFF,
            blob, ends,
        )  # fmt: skip

    made = add(payload, template)
    assert made is not None and made[0] == 1 and made[2] == b"\x01\x00"  # (the float in the text: Python's)
    for cut in range(len(payload)):
        assert add(payload[:cut], template) is None
        assert add(payload[:cut] + b"\xc1" * 3, template) is None
    taken_rows, ints, strings, floats = _tables.take_rows(builder)
    assert taken_rows == 1 and len(ints) == 2 and len(strings) == 8 and floats is None
    assert [data for _, _, data in strings] == [
        b"p", b"h", b"t", "x a(ü) None $value3 y".encode(), b'{"a":"\xc3\xbc","trace_id":null}', b"", b"app",
        b"info",
    ]  # fmt: skip
    assert strings[5][0] == b"\x00"  # (trace_id: null, no text)
    assert add(payload, b"")[::2] == (0, b"\x01\x01")  # (no template: no message is the C writer's)
    for cut in range(len(template)):  # (the Python side makes templates: what matters here is that any is read safely)
        made = add(payload, template[:cut])
        assert made is not None and made[2] == b"\x01\x01"  # (a template that does not read: both Python's)
        add(payload, template[:cut] + b"\xff" * 8 + template[cut:])
        add(payload, template[:cut] + b"\x00" * 8 + template[cut:])


def stream_of_messages(tmp_path: Path, kinds: list[KindSpec], payloads: list[tuple[int, bytes]]) -> SnapshotView:
    """``declared_messages``' stream (one message of each kind) with EVENTS frames of ``payloads`` as given after it."""
    registry = KindRegistry()
    declared = [registry.register(k.name, "message", k.fields, normalise_values, k.text, k.priority) for k in kinds]
    encoder = StreamEncoder(registry=registry)
    batch = encoder.encode(TRACK, [v for kind in declared for v in (kind.id, kind.name, 10**18, 10**18, [0, 0])])
    frames = [preamble(), encode(Hello(1, "host", "odd", "i1", "boot", 1, 2, "test")), *encoder.prefix()]
    frames += [*batch.control, *(frame for frame, _ in batch.events)]
    for count, payload in payloads:
        frames.append(encode(Events(TRACK.track_id, count, 10**18, 10**18 + 10, payload)))
    path = tmp_path / "messages.rttrace"
    path.write_bytes(b"".join(frames))
    return load_file(path).view


@pytest.mark.parametrize("table", C_MADE)
def test_the_other_tables_leave_messages_out_in_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str) -> None:
    """A message of a kind the C writer has a template of is no row of the spans, instants or counters tables: left
    out in C, so a frame of spans and messages is not read again through the walk (those it cannot render too)."""
    from ringtrace.collector.read.event_walk import EventWalk

    walked = []
    shown = EventWalk.shown

    def counted(self: EventWalk, *args: Any) -> Any:
        walked.append(args)
        return shown(self, *args)

    monkeypatch.setattr(EventWalk, "shown", counted)
    view = recorded(tmp_path, chatty)
    assert len(spans_alike(view, table=table)) == (0 if table == "counters" else 1)
    walked.clear()
    assert rows_in_c(view, table=table) == (0 if table == "counters" else 1)
    assert walked == []


# -- samples ----------------------------------------------------------------------------------------------------------


def sampled(
    tmp_path: Path, frames: list[tuple[str, str, int]], nodes: list[tuple[int | None, int]], args: list[Any]
) -> SnapshotView:
    """A stream as a sampler sends it: a stack table of ``frames`` and stack ``nodes`` (STACKS, as given), then an
    EVENTS frame of a span and a sample of each of ``args`` (a stack id, or anything), named "task-a" or "" in turn."""
    encoder = StreamEncoder()
    ts = 10**18
    declared = encoder.encode(TRACK, [INSTANT, "task-a", ts, ts, None, INSTANT, "", ts, ts, None])
    names = encoder.strings
    rows = [(SPAN, names["task-a"], 0, 5000, None)]
    rows += [(SAMPLE, names["" if n % 2 else "task-a"], 100 * n, 0, arg) for n, arg in enumerate(args)]
    payload = msgpack.packb([list(column) for column in zip(*rows, strict=True)])
    hello = encode(Hello(42, "host", "sampled", "i42", "boot", 1, 2, "test"))
    stacks = [encode(Stacks(0, tuple(frames), 0, tuple(nodes)))] if frames or nodes else []
    events = encode(Events(TRACK.track_id, len(rows), ts, ts + 100 * len(rows) + 5000, payload))
    path = tmp_path / "sampled.rttrace"
    path.write_bytes(b"".join([preamble(), hello, *encoder.prefix(), *stacks, *declared.control, events]))
    return load_file(path).view


MAIN_FRAME, WORK_FRAME, HOT_FRAME = ("main", "/app/main.py", 10), ("work", "/app/jobs.py", 20), ("hot", "/jobs ü", 31)


def test_samples_are_the_python_rows_and_made_in_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ringtrace.collector.export import table_rows

    nodes = [(None, 0), (0, 1), (1, 2), (0, 2)]
    args = [0, 1, 2, 3, 2, 4, -1, None, "x", 1.5, True, [1]]  # (4 and on: no stack declared, an empty one)
    view = sampled(tmp_path, [MAIN_FRAME, WORK_FRAME, HOT_FRAME], nodes, args)
    rows = [json.loads(row) for row in spans_alike(view, table="samples")]
    assert len(rows) == len(args) and rows_in_c(view, table="samples") == len(args)
    deepest = [row for row in rows if len(row["stack"]) == 3]
    assert len(deepest) == 2 and all(row["leaf"] == "hot" for row in deepest)
    assert deepest[0]["stack"] == [
        dict(zip(("function", "file", "line"), f, strict=True)) for f in (MAIN_FRAME, WORK_FRAME, HOT_FRAME)
    ]
    assert sum(row["stack"] == [] and row["leaf"] is None for row in rows) == 7
    assert {row["task"] for row in rows} == {"task-a", None}
    for columns in (("stack",), ("leaf", "task"), ("ts_ns", "pid", "track")):
        part = spans_alike(view, columns=columns, table="samples")
        assert part == sorted(json.dumps({key: row[key] for key in columns}, sort_keys=True) for row in rows)
    starts = sorted(row["ts_ns"] for row in rows)
    spans_alike(view, EventFilter(since_ns=starts[3], until_ns=starts[8]), table="samples")
    monkeypatch.setattr(table_rows, "BATCH_ROWS", 4)
    spans_alike(view, table="samples")


def test_samples_deeper_than_a_reader_resolves_keep_their_innermost_frames(tmp_path: Path) -> None:
    frames = [(f"f{i}", "deep.py", i) for i in range(1100)]
    nodes = [(None if i == 0 else i - 1, i) for i in range(1100)]
    view = sampled(tmp_path, frames, nodes, [1099, 1023, 1024])
    rows = [json.loads(row) for row in spans_alike(view, table="samples")]
    assert sorted(len(row["stack"]) for row in rows) == [1024, 1024, 1024]
    assert rows_in_c(view, table="samples") == 3


@settings(max_examples=60, deadline=None)
@given(
    frames=st.lists(
        st.tuples(st.text(max_size=6), st.text(max_size=6), st.integers(0, 2**31 - 1)), min_size=1, max_size=6
    ),
    parents=st.lists(st.integers(-1, 8), max_size=8),
    leaves=st.lists(st.integers(0, 5), max_size=8),
    args=st.lists(st.integers(-2, 10) | ARG_VALUES, max_size=8),
)
def test_samples_of_any_stack_table_are_the_python_rows(
    tmp_path_factory: pytest.TempPathFactory,
    frames: list[tuple[str, str, int]],
    parents: list[int],
    leaves: list[int],
    args: list[Any],
) -> None:
    # (a node's parent comes before it, and its frame is declared: what the decoder holds a STACKS frame to)
    nodes = [
        (None if p < 0 or p >= i else p, leaf % len(frames))
        for i, (p, leaf) in enumerate(zip(parents, leaves, strict=False))
    ]
    try:
        view = sampled(tmp_path_factory.mktemp("samples"), frames, nodes, args)
    except UnicodeEncodeError:  # (a lone surrogate: no stream carries it)
        return
    assert len(spans_alike(view, table="samples")) == len(args)


def test_a_stack_table_that_does_not_hold_adds_no_row_and_reads_nothing_past_it() -> None:
    from ringtrace.collector.export import _tables  # here: not built everywhere

    builder = _tables.builder(4)
    payload = columns([0, 0, 0], [0, 0, 0], [0, 1, 2], [0, 0, 0], [0, 1, 5])
    spans = bytes(8) + (1).to_bytes(8, "little")  # string 0, "a": bytes 0 to 1 of names
    texts = b"mainmain.pyhotjobs.py"

    def q(*values: int) -> bytes:
        return struct.pack(f"<{len(values)}q", *values)

    def add(parents: bytes, leaves: bytes, frames: bytes) -> Any:
        return _tables.add_rows(
            builder, payload, 3, (0, 1, 2, 3, 4), 10**18, 0, None, None, b"P", b"a", spans, b"p", 1, b"h", b"t",
            0x1FFF, b"", b"", parents, leaves, texts, frames,
        )  # fmt: skip

    good = q(0, 4, 4, 11, 10, 11, 14, 14, 21, 31)
    made = add(q(-1, 0), q(0, 1), good)
    assert made is not None and made[0] == 3 and made[2] is None  # (stack 5: none declared, an empty stack)
    taken, _, strings, stacks = _tables.take_rows(builder)
    assert taken == 3 and [data for _, _, data in strings] == [b"ppp", b"hhh", b"ttt", b"aaa", b"mainhot"]
    offsets, (_, functions), (_, files), lines = stacks
    assert offsets == q(0)[:4] + struct.pack("<3i", 1, 3, 3) and functions == b"mainmainhot"
    assert files == b"main.pymain.pyjobs.py" and lines == q(10, 10, 31)
    for parents, leaves, frames in [
        (q(-1, 7), q(0, 1), good),  # a parent past the table
        (q(-1, 0), q(0, 9), good),  # a frame past it
        (q(-1, 0), q(0, 1), good[:-8]),  # frames cut short
        (q(-1, 0), q(0, 1), q(0, 4, 4, 11, 10, 11, 14, 14, 99, 31)),  # a text past the texts
        (q(-1, 0), q(0, 1), q(0, 4, 4, 11, 10, -1, -1, -1, -1, 0)),  # a frame the Python rows make
        (q(-1, 0), q(0, -3), good),  # a negative frame id
    ]:
        made = add(parents, leaves, frames)
        assert made is not None and made[2] == b"\x00\x01\x00"  # (stack 1 is the Python rows'; 0 and 5 are not)
    assert add(q(1, 0), q(0, 1), good) is not None  # (a cycle: bounded by the depth a reader resolves)


def test_each_frame_the_c_writer_reads_counts_as_letting_the_event_loop_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ringtrace.collector.export import table_columns

    let_go: list[None] = []
    monkeypatch.setattr(table_columns, "let_go", lambda: let_go.append(None))
    view = recorded(tmp_path, mixed)
    frames = sum(
        isinstance(frame, Events)
        for segment in view.frames.segments
        for _, frame in segment_stream(segment, view.limits)
    )
    assert rows_in_c(view) == 800 and len(let_go) == frames
