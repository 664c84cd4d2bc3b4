"""Typed tables over HTTP (``GET /snapshot?format=parquet&table=``) and ``ringtrace query`` against a real collector
that real client processes recorded into: the tables against the same collector's Chrome JSON snapshot, filters,
refusals, and SQL (p99 by name) against a Python reference over the Chrome snapshot."""

from __future__ import annotations

import csv
import json
import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from collector_process import CollectorProcess, recorded_collector, run_script
from ringtrace.collector.command.main import main
from ringtrace.collector.export.table_names import TABLES
from tables_model import chrome_table, parquet_rows

# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("query_command")

RECORD = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
slow = tl.message("engine", "warning", "slow $n")
for i in range(200):
    with tl.scope("request", i=i, trace_id="0af7651916cd43dd8448eb211c80319c" if i % 10 == 0 else None):
        with tl.scope("query", table="users"):
            sum(range(i * 50))
        tl.instant("cache-miss", key=i)
    tl.counter("queue", i % 7)
    if i % 40 == 0:
        slow(i)
print(tl.flush(5))
"""


@pytest.fixture(scope="module")
def collector() -> Iterator[CollectorProcess]:
    with recorded_collector(RECORD, "web", "db") as collector:
        yield collector


def get_table(collector: CollectorProcess, table: str, **params: str) -> list[str]:
    status, body = collector.get("/snapshot?" + urllib.parse.urlencode({"format": "parquet", "table": table, **params}))
    assert status == 200, body
    return parquet_rows(body)


@pytest.mark.parametrize("table", [table for table in TABLES if table != "samples"])
def test_every_table_over_http_is_what_the_chrome_snapshot_shows(collector: CollectorProcess, table: str) -> None:
    rows = get_table(collector, table)
    assert rows == chrome_table(collector.snapshot(), table)
    expected = {"spans": 800, "instants": 400, "messages": 10, "counters": 400}[table]
    assert len(rows) == expected


def test_samples_of_processes_that_recorded_none_is_an_empty_table(collector: CollectorProcess) -> None:
    assert get_table(collector, "samples") == []


def test_the_filters_select_the_rows_as_for_chrome_json(collector: CollectorProcess) -> None:
    for params in ({"process": "web"}, {"name": "query"}, {"trace_id": "0af7651916cd43dd8448eb211c80319c"}):
        rows = get_table(collector, "spans", **params)
        assert rows == chrome_table(collector.snapshot("?" + urllib.parse.urlencode(params)), "spans"), params
        assert 0 < len(rows) < 800
    assert {json.loads(row)["process"] for row in get_table(collector, "spans", process="web")} == {"web"}


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("format=parquet&table=slices", "query parameter 'table' must be one of spans, instants, messages"),
        ("table=spans", "query parameter 'table' is for format=parquet only"),
        ("format=parquet&table=spans&table=messages", "'table'"),
    ],
)
def test_a_bad_table_is_a_400_naming_the_parameter(collector: CollectorProcess, query: str, said: str) -> None:
    status, body = collector.get("/snapshot?" + query)
    assert status == 400 and said in body.decode()


def test_the_default_table_is_spans(collector: CollectorProcess) -> None:
    status, body = collector.get("/snapshot?format=parquet")
    assert status == 200 and parquet_rows(body) == get_table(collector, "spans")


def p99_by_name(collector: CollectorProcess) -> dict[str, tuple[int, float]]:
    """count and p99 of durations (DuckDB's quantile_cont: linear between the closest ranks) of each span name, from
    the Chrome JSON snapshot."""
    by_name: dict[str, list[int]] = {}
    for row in chrome_table(collector.snapshot(), "spans"):
        span = json.loads(row)
        by_name.setdefault(span["name"], []).append(span["duration_ns"])
    out = {}
    for name, durations in by_name.items():
        durations.sort()
        position = 0.99 * (len(durations) - 1)
        low = int(position)
        high = min(low + 1, len(durations) - 1)
        out[name] = (len(durations), durations[low] + (durations[high] - durations[low]) * (position - low))
    return out


P99 = "SELECT name, count(*) AS n, quantile_cont(duration_ns, 0.99) AS p99_ns FROM spans GROUP BY name ORDER BY name"


def test_query_p99_by_name_is_the_reference_s(
    collector: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p99.csv"
    assert main(["query", P99, "--url", collector.http_url, "--csv", str(out)]) == 0
    with out.open() as f:
        got = {row["name"]: (int(row["n"]), float(row["p99_ns"])) for row in csv.DictReader(f)}
    expected = p99_by_name(collector)
    assert got.keys() == expected.keys() == {"request", "query"}
    for name, (count, p99) in expected.items():
        assert got[name][0] == count == 400
        assert got[name][1] == pytest.approx(p99, rel=1e-9)
    assert main(["query", P99, "--url", collector.http_url]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["name", "n", "p99_ns"]
    assert [line.split()[:2] for line in printed[1:]] == [["query", "400"], ["request", "400"]]


def test_query_ending_in_a_comment_writes_csv_and_parquet_as_it_prints(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    sql = "SELECT name, count(*) AS n FROM spans GROUP BY name ORDER BY name -- per name"
    out = tmp_path / "names.csv"
    assert main(["query", sql, "--url", collector.http_url, "--csv", str(out)]) == 0
    with out.open() as f:
        assert [(row["name"], row["n"]) for row in csv.DictReader(f)] == [("query", "400"), ("request", "400")]
    assert main(["query", sql, "--url", collector.http_url, "--parquet", str(tmp_path / "names.parquet")]) == 0
    assert (tmp_path / "names.parquet").read_bytes()[:4] == b"PAR1"


def test_query_joins_tables_fetched_with_the_same_filters(
    collector: CollectorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = (
        "SELECT s.process, count(DISTINCT m.ts_ns) AS warnings FROM spans s JOIN messages m ON m.process = s.process "
        "GROUP BY s.process ORDER BY s.process"
    )
    out = tmp_path / "joined.parquet"
    assert main(["query", sql, "--url", collector.http_url, "--process", "web", "--parquet", str(out)]) == 0
    import pyarrow.parquet as pq

    assert pq.read_table(out).to_pylist() == [{"process": "web", "warnings": 5}]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a.name, count(*) AS n FROM spans a JOIN spans b USING (pid, track, start_ns, name) GROUP BY a.name "
        "ORDER BY a.name",
        "SELECT name, n FROM (SELECT name, count(*) AS n FROM spans GROUP BY ALL) NATURAL JOIN (SELECT DISTINCT name "
        "FROM spans) ORDER BY name",
        "SELECT * FROM (PIVOT (SELECT name FROM spans) ON name USING count(*))",
    ],
)
def test_sql_duckdb_binds_by_its_columns_runs_over_every_column(
    collector: CollectorProcess, tmp_path: Path, sql: str
) -> None:
    out = tmp_path / "result.csv"
    assert main(["query", sql, "--url", collector.http_url, "--csv", str(out)]) == 0
    with out.open() as f:
        rows = list(csv.reader(f))
    assert rows[1:] in ([["query", "400"], ["request", "400"]], [["400", "400"]])


def test_sql_that_fails_is_duckdbs_message_on_one_line_and_status_2(
    collector: CollectorProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["query", "SELECT no_such_column FROM spans", "--url", collector.http_url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringtrace query: Binder Error") and "no_such_column" in err and err.count("\n") == 1


def test_more_than_one_statement_is_refused_before_any_runs(
    collector: CollectorProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "result.csv"
    sql = "SELECT name FROM spans; COPY (SELECT 1) TO '" + str(out).replace("'", "''") + "'"
    assert main(["query", sql, "--url", collector.http_url]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith('ringtrace query: the SQL is 2 statements (the second: "COPY (SELECT 1) TO')
    assert not out.exists()  # (the second did not run)
    assert main(["query", "SELECT count(*) AS n FROM spans;", "--url", collector.http_url]) == 0  # (one, ended by ;)


def test_snapshot_writes_one_table_with_the_table_flag(collector: CollectorProcess, tmp_path: Path) -> None:
    out = tmp_path / "counters.parquet"
    assert main(["snapshot", collector.http_url, "-o", str(out), "--format", "parquet", "--table", "counters"]) == 0
    assert parquet_rows(out.read_bytes()) == get_table(collector, "counters")
    assert main(["snapshot", collector.http_url, "-o", str(out), "--table", "counters"]) == 2


#: Messages whose values are named as the messages table's columns, of values no such column holds.
NAMED_AS_COLUMNS = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
tl.message("jobs", "warning", "job $priority took $text")(3, {"ms": [1, 2]})
tl.message("jobs", "error", "${category} ${trace_id} ${args} ${ts_ns}")(7, 8, [9], "x")
tl.message("jobs", "info", "flat $priority")(2.5)
tl.message("", "info", "plain $priority")(1)  # (of the category of plain instants: shown as one)
print(tl.flush(5))
"""


@pytest.mark.parametrize("pure_python", [False, True], ids=["c-writer", "python-rows"])
def test_message_values_named_as_columns_stay_args_in_parquet_sql_and_aggregates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pure_python: bool
) -> None:
    """A message's value named ``priority`` (or ``category``, ``text``, ...) is one of its values: its row's
    priority and category are its kind's. A non-text one in the priority column once failed the Parquet write."""
    env = {name: value for name, value in os.environ.items() if name != "RINGTRACE_PURE_PYTHON"}
    if pure_python:  # (the collector's tables made in Python alone)
        env["RINGTRACE_PURE_PYTHON"] = "1"
    collector = CollectorProcess(env=env)
    try:
        run_script(collector, NAMED_AS_COLUMNS, "jobs")
        expected = [
            ("warning", "job priority(3) took text({'ms': [1, 2]})", {"priority": 3, "text": {"ms": [1, 2]}}),
            ("error", "7 8 [9] x", {"category": 7, "trace_id": 8, "args": [9], "ts_ns": "x"}),
            ("info", "flat priority(2.5)", {"priority": 2.5}),
        ]
        for params in ({}, {"category": "jobs"}, {"min_priority": "info"}, {"messages_only": "1"}):
            rows = sorted((json.loads(row) for row in get_table(collector, "messages", **params)), key=by_time)
            assert [(row["priority"], row["text"], row["args"]) for row in rows] == expected, params
            assert {(row["category"], row["trace_id"]) for row in rows} == {("jobs", None)}
        sql = "SELECT priority, category, args, trace_id FROM messages ORDER BY ts_ns"
        out = tmp_path / "messages.csv"
        assert main(["query", sql, "--url", collector.http_url, "--csv", str(out)]) == 0, capsys.readouterr().err
        with out.open() as f:
            got = [(r["priority"], r["category"], json.loads(r["args"]), r["trace_id"]) for r in csv.DictReader(f)]
        assert got == [(priority, "jobs", args, "") for priority, _, args in expected]
        # Counted by their kinds' priorities, the plain one as an instant, whether frames are read a column at a time
        # or event by event (a name filter): the first counted it as a message.
        for query in ("", "?name=*"):
            aggregates = collector.json("/aggregates" + query)
            assert (aggregates["instants"], aggregates["messages"]) == (1, {"warning": 1, "error": 1, "info": 1})
    finally:
        collector.stop()


def by_time(row: dict[str, Any]) -> int:
    return int(row["ts_ns"])
