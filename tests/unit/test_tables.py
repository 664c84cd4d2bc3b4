"""A snapshot's typed tables (``export/table_rows.py``, ``export/parquet.py``): every table, every column, against the
same store's Chrome JSON snapshot, read column by column and through the walk alike, under filters; the ``table``
parameter; what a collector or a command without the extra says."""

from __future__ import annotations

import io
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from aiohttp import web
from arg_values import ARG_VALUES
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded_files import recorded, recorded_samples
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.command.main import main
from ringtrace.collector.command.sql import columns_read, tables_named
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.formats import FORMATS
from ringtrace.collector.export.parquet import METADATA_KEY, parquet_chunks
from ringtrace.collector.export.table_columns import ACCELERATED, ColumnBuffers
from ringtrace.collector.export.table_names import TABLES, missing_pyarrow
from ringtrace.collector.export.table_rows import TableRows
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.http.api import available
from ringtrace.collector.http.query import QueryError, parse_snapshot_query
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Pattern
from tables_model import chrome_table, parquet_rows

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def every_kind(tl: Timeline) -> None:
    warn = tl.message("net", "warning", "lost $count packets from $peer")
    disk = tl.source("disk")
    for i in range(300):
        with tl.scope("work", i=i, text='a"b\\c\nd ü ✓', trace_id=TRACE_ID if i % 3 == 0 else None):
            tl.instant("tick", f=i / 7, big=2**64 - 1, nan=math.nan)
        tl.instant("bare")
        tl.counter("queue", i % 5)
        warn(count=i, peer="10.0.0.1")
        tl.marker("phase", "start", step=i)
        tl.marker("phase", "end")
        disk.open()
        disk.close()
        tl.async_begin("request", i, url="/x")
        tl.async_end("request", i)
        if i % 50 == 0:
            tl.flush(timeout_s=30)
    tl.marker("never ended", "start")


def table(view: SnapshotView, name: str, selected: EventFilter = EVERYTHING, accelerated: bool = True) -> list[str]:
    """The rows of a table as the Parquet file holds them (``tables_model.parquet_rows``)."""
    return parquet_rows(b"".join(parquet_chunks(view, selected, name, accelerated=accelerated)))


def from_chrome(
    view: SnapshotView, name: str, selected: EventFilter = EVERYTHING, accelerated: bool = True
) -> list[str]:
    """The same table, made of the same store's Chrome JSON snapshot."""
    return chrome_table(json.loads(b"".join(chrome_trace_chunks(view, selected, accelerated=accelerated))), name)


@pytest.mark.parametrize("name", [name for name in TABLES if name != "samples"])
def test_every_table_holds_what_the_chrome_snapshot_shows_column_for_column(tmp_path: Path, name: str) -> None:
    view = recorded(tmp_path, every_kind)
    rows = table(view, name)
    assert rows == from_chrome(view, name)
    assert rows == table(view, name, accelerated=False)
    expected = {"spans": 300 + 300 + 300 + 1, "instants": 600 + 600, "messages": 300, "counters": 300}[name]
    assert len(rows) == expected


def test_the_columns_are_typed_and_spans_carry_their_trace_and_open_ended_slices(tmp_path: Path) -> None:
    view = recorded(tmp_path, every_kind)
    data = b"".join(parquet_chunks(view, EVERYTHING, "spans"))
    parquet = pq.read_table(io.BytesIO(data))
    assert parquet.schema.names == list(TABLES["spans"])
    types = {field.name: str(field.type) for field in parquet.schema}
    assert types["start_ns"] == types["duration_ns"] == types["end_ns"] == types["pid"] == "int64"
    assert types["args"] == types["trace_id"] == "string"
    spans = parquet.to_pylist()
    assert Counter(span["trace_id"] for span in spans if span["name"] == "work") == {TRACE_ID: 100, None: 200}
    (never,) = [span for span in spans if span["name"] == "never ended"]
    assert never["duration_ns"] is None and never["end_ns"] is None
    assert all(span["end_ns"] == span["start_ns"] + span["duration_ns"] for span in spans if span is not never)
    metadata = json.loads(pq.ParquetFile(io.BytesIO(data)).metadata.metadata[METADATA_KEY])
    chrome = json.loads(b"".join(chrome_trace_chunks(view)))["otherData"]
    assert metadata["processes"] == chrome["processes"]
    assert metadata["clock_origin_wall_ns"] == chrome["clock_origin_wall_ns"]


SAMPLE_STACKS = [(("main", "/app/main.py", 10), ("work", "/app/jobs.py", 20), ("hot", "/app/jobs.py", 31)), ()]


def test_samples_are_rows_with_their_stacks_root_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shown = EventWalk._shown

    def as_samples(self: EventWalk, *args: Any) -> tuple[list[Any], int]:  # instants named "as-sample" as samples
        events, skipped = shown(self, *args)
        return [
            ("P", e[4]["task"], e[2], 0, {"stack": SAMPLE_STACKS[e[4]["n"] % 2]}, "sample", "")
            if e[0] == "i" and e[1] == "as-sample"
            else e
            for e in events
        ], skipped

    monkeypatch.setattr(EventWalk, "_shown", as_samples)
    view = recorded_samples(tmp_path)
    rows = table(view, "samples", accelerated=False)  # (the column reader would take the instants itself)
    assert len(rows) == 20 and rows == from_chrome(view, "samples", accelerated=False)
    hot = [json.loads(row) for row in rows if json.loads(row)["leaf"] == "hot"]
    assert len(hot) == 10 and {row["task"] for row in hot} == {"worker-task"}
    assert [frame["function"] for frame in hot[0]["stack"]] == ["main", "work", "hot"]


def test_filters_select_the_rows_chrome_json_shows(tmp_path: Path) -> None:
    view = recorded(tmp_path, every_kind)
    starts = sorted(json.loads(row)["start_ns"] for row in table(view, "spans"))
    for selected in (
        EventFilter(since_ns=starts[200], until_ns=starts[700]),
        EventFilter(limit=50),
        EventFilter(name=Pattern("work")),
        EventFilter(trace_id=TRACE_ID),
        EventFilter(category=Pattern("counter")),
        EventFilter(process=Pattern("nobody")),
    ):
        for name in ("spans", "counters", "messages"):
            assert table(view, name, selected) == from_chrome(view, name, selected), (selected, name)
    assert len(table(view, "spans", EventFilter(name=Pattern("work")))) == 300


def test_a_table_is_written_in_row_groups_as_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ringtrace.collector.export import table_rows

    monkeypatch.setattr(table_rows, "BATCH_ROWS", 100)
    view = recorded(tmp_path, every_kind)
    chunks = [chunk for chunk in parquet_chunks(view, EVERYTHING, "spans") if chunk]
    assert len(chunks) > 3  # (row groups as they come, then the footer)
    parquet = pq.ParquetFile(io.BytesIO(b"".join(chunks)))
    assert parquet.metadata.num_rows == 901 and parquet.metadata.num_row_groups > 3
    assert len(list(TableRows(view, EVERYTHING, "counters").batches())) > 1


def test_the_table_parameter_takes_a_table_of_a_format_of_tables_only() -> None:
    assert parse_snapshot_query([("format", "parquet")], now_ns=0).table is None
    assert parse_snapshot_query([("format", "parquet"), ("table", "Counters")], now_ns=0).table == "counters"
    with pytest.raises(QueryError, match=r"'table' must be one of spans, instants, messages, counters, samples"):
        parse_snapshot_query([("format", "parquet"), ("table", "slices")], now_ns=0)
    with pytest.raises(QueryError, match=r"'table' is for format=parquet only"):
        parse_snapshot_query([("table", "spans")], now_ns=0)
    assert FORMATS["parquet"].tables[0] == "spans"


def test_the_columns_parameter_takes_a_table_s_columns_of_a_format_of_tables_only() -> None:
    def parsed(*params: tuple[str, str]) -> tuple[str, ...] | None:
        return parse_snapshot_query([("format", "parquet"), *params], now_ns=0).columns

    assert parsed(("columns", "duration_ns, Name")) == ("name", "duration_ns")  # the table's order
    assert parsed(("table", "counters"), ("columns", "value")) == ("value",)
    assert parsed() is None
    with pytest.raises(QueryError, match=r"'columns': spans has no column 'ts_ns' \(its columns: process, pid, "):
        parsed(("columns", "name,ts_ns"))
    with pytest.raises(QueryError, match=r"'columns' must name at least one of spans's columns"):
        parsed(("columns", " , "))
    with pytest.raises(QueryError, match=r"'columns' is for format=parquet only"):
        parse_snapshot_query([("columns", "name")], now_ns=0)


@pytest.mark.parametrize(
    ("sql", "read"),
    [
        ("SELECT name, count(*), quantile_cont(duration_ns, 0.99) FROM spans GROUP BY name", ("name", "duration_ns")),
        ("SELECT s.name FROM spans s WHERE s.args LIKE '%x%' ORDER BY 1", ("name", "args")),
        ("SELECT count(*) FROM spans", ("pid",)),  # (one column, for the rows)
        ("SELECT * FROM spans", None),
        ("SELECT * EXCLUDE (args) FROM spans", None),
        ("SELECT COLUMNS('.*_ns') FROM spans", None),
        ("SELECT s FROM spans s", None),  # a whole row
        ("SELECT #2 FROM spans", None),
        ("SELECT count(*) FROM spans JOIN spans AS t USING (pid)", None),
        ("PIVOT spans ON name USING count(*)", None),
        ("FROM spans", None),
        ("SELECT t.name FROM spans AS t(a1, a2, a3, a4, name)", None),  # (an alias list renames by position)
    ],
)
def test_the_query_command_asks_for_the_columns_its_sql_reads(sql: str, read: tuple[str, ...] | None) -> None:
    import duckdb

    assert columns_read(duckdb, sql, ["spans"]) == {"spans": read}


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("SELECT name FROM spans", ["spans"]),
        ('SELECT "name" FROM "Spans"', ["spans"]),
        # DuckDB cannot name these tables without their columns: each table the SQL names as a word is taken
        ("SELECT a.name FROM spans a JOIN spans b USING (span_id)", ["spans"]),
        ("SELECT name FROM spans NATURAL JOIN instants", ["spans", "instants"]),
        ("SELECT COLUMNS('.*_ns') FROM spans", ["spans"]),
        ("PIVOT spans ON name USING count(*)", ["spans"]),
        ("SELECT * FROM (PIVOT messages ON priority USING count(*)) -- not samples", ["messages"]),
    ],
)
def test_the_query_command_fetches_the_tables_its_sql_reads(sql: str, tables: list[str]) -> None:
    import duckdb

    assert tables_named(duckdb, sql) == tables


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("  ", "the SQL is empty: give one statement, e.g. 'SELECT name, count(*) FROM spans'"),
        (
            "SELECT * FROM nosuch",
            "the SQL reads none of the tables spans, instants, messages, counters, samples (it reads nosuch)",
        ),
        ("SELEC name FROM spans", 'Parser Error: syntax error at or near "SELEC"'),
        ("SELECT * FROM spans; SELECT 2", "the SQL is 2 statements (the second: 'SELECT 2'); give one"),
        (" ; ", "the SQL is empty: give one statement, e.g. 'SELECT name, count(*) FROM spans'"),
    ],
)
def test_sql_the_query_command_cannot_run_is_refused_before_any_fetch(sql: str, said: str) -> None:
    import duckdb

    with pytest.raises(CommandError) as refused:
        tables_named(duckdb, sql)
    assert str(refused.value) == said and refused.value.status == 2


def test_a_collector_without_pyarrow_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    assert missing_pyarrow() is None
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # an import blocker: `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert missing_pyarrow() == "format=parquet needs pyarrow in the collector: pip install 'ringtrace[tables]'"
    with pytest.raises(web.HTTPNotImplemented) as refused:  # what GET and HEAD /snapshot?format=parquet answer
        available(FORMATS["parquet"])
    assert refused.value.status == 501 and refused.value.text == f"{missing_pyarrow()}\n"
    assert available(FORMATS["chrome"]) is FORMATS["chrome"]


def test_the_query_command_without_duckdb_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "duckdb", None)
    assert main(["query", "SELECT count(*) FROM spans", "--url", "http://127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err == "ringtrace query: ringtrace query needs DuckDB and pyarrow here: pip install 'ringtrace[query]'\n"


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELECT count(*) FROM spanz", "the SQL reads none of the tables spans, instants, messages, counters, samples"),
        ("SELEC 1 FROM spans", "Parser Error"),
    ],
)
def test_sql_that_names_no_table_or_does_not_parse_is_one_line_and_status_2(
    sql: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["query", sql, "--url", "http://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringtrace query: ") and said in err and err.count("\n") == 1


@settings(max_examples=60, deadline=None)
@given(args=st.dictionaries(st.text(max_size=12), ARG_VALUES, max_size=5), name=st.text(max_size=20))
def test_any_args_are_the_chrome_snapshot_s_as_json_text(
    tmp_path_factory: pytest.TempPathFactory, args: dict[str, Any], name: str
) -> None:
    def record(tl: Timeline) -> None:
        tl.instant(name, **args)
        tl.counter(name, 1.5)
        with tl.scope(name, **args):
            pass

    view = recorded(tmp_path_factory.mktemp("args"), record)
    for table_name in ("spans", "instants", "counters"):
        rows = table(view, table_name)
        assert len(rows) == 1 and rows == from_chrome(view, table_name) == table(view, table_name, accelerated=False)


#: Every column name of every table: what an event's own args may be named too.
RESERVED = sorted({column for columns in TABLES.values() for column in columns} | {"id", "value1"})
#: Values no column of such a name holds (not text, not a number).
NOT_A_COLUMN_VALUE = [7, {"a": [1, "b"]}]


@pytest.mark.parametrize("accelerated", [True, False])
def test_a_message_value_named_priority_or_category_is_one_of_its_values(tmp_path: Path, accelerated: bool) -> None:
    def record(tl: Timeline) -> None:
        tl.message("net", "warning", "got $priority in $category")(5, {"a": 1})
        tl.message("net", "error", "${priority} ${category}")("urgent", "disk")

    view = recorded(tmp_path, record)
    rows = [json.loads(row) for row in table(view, "messages", accelerated=accelerated)]
    if accelerated and ACCELERATED:  # the C writer takes such kinds (but a map in a text, which Python renders)
        made = TableRows(view, EVERYTHING, "messages").batches()
        assert sum(batch.rows for batch in made if isinstance(batch, ColumnBuffers)) == 1
    assert sorted((row["category"], row["priority"], row["text"], row["args"]) for row in rows) == [
        ("net", "error", "urgent disk", {"priority": "urgent", "category": "disk"}),
        ("net", "warning", "got priority(5) in category({'a': 1})", {"priority": 5, "category": {"a": 1}}),
    ]


@pytest.mark.parametrize("value", NOT_A_COLUMN_VALUE, ids=["int", "map"])
def test_args_named_as_any_column_stay_args_in_every_table_in_c_and_python_alike(tmp_path: Path, value: Any) -> None:
    def record(tl: Timeline) -> None:
        for at in range(0, len(RESERVED), 6):  # (a message takes six values at most)
            names = RESERVED[at : at + 6]
            tl.message("net", "info", " ".join(f"${name}" for name in names))(*[value] * len(names))
        own = dict.fromkeys(RESERVED, value)
        tl.instant("tick", **own)
        with tl.scope("work", **own):
            pass
        tl.counter("queue", 1.5)

    view = recorded(tmp_path, record)
    for name in ("spans", "instants", "messages", "counters"):
        rows = table(view, name)
        assert rows == table(view, name, accelerated=False), name
        for row in map(json.loads, rows):
            args = row.get("args") or {}
            assert all(args[key] == value for key in args), (name, row)  # each arg as recorded
            if name == "messages":
                assert (row["category"], row["priority"], row["trace_id"]) == ("net", "info", None)
            elif name != "counters":
                assert set(args) == set(RESERVED), (name, row)
                assert (row["name"], row["trace_id"]) == ({"spans": "work", "instants": "tick"}[name], None)
        assert len(rows) == {"spans": 1, "instants": 1, "messages": -(-len(RESERVED) // 6), "counters": 1}[name]


def test_convert_writes_a_table_of_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.rttrace"
    tl = Timeline("unit", [FileListener(path, process_name="unit")])
    every_kind(tl)
    tl.close()
    out = tmp_path / "messages.parquet"
    assert main(["convert", str(path), "-o", str(out), "--format", "parquet", "--table", "messages"]) == 0
    assert parquet_rows(out.read_bytes()) == from_chrome(load_file(path).view, "messages")
    assert main(["convert", str(path), "-o", str(out), "--format", "parquet"]) == 0
    assert len(parquet_rows(out.read_bytes())) == 901  # spans, the default
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert main(["convert", str(path), "-o", str(out), "--format", "parquet"]) == 1
