"""``ringtrace query "SQL"``: SQL over a collector's recent past, run here, never in the collector.

The tables the SQL names (``spans``, ``instants``, ``messages``, ``counters``, ``samples``: DuckDB's parser says which
it reads) are fetched as Parquet, one request each with the same filters (``GET /snapshot?format=parquet&table=``),
with only the columns the SQL reads (``columns=``, ``columns_read``: every column where it cannot tell), into a
temporary directory, and read there by an in-process DuckDB as views of those names; the result is printed as
a table, or written whole as CSV or Parquet. DuckDB and pyarrow are the ``query`` extra's; the collector needs the
``tables`` extra's pyarrow to write the tables (it answers 501 naming it otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from ringtrace.collector.command.failure import CommandError
from ringtrace.collector.command.filters import add_filters, check_params, filter_params
from ringtrace.collector.command.remote import CHUNK, Access, add_access, fetch, snapshot_url
from ringtrace.collector.export.table_names import TABLES

__all__ = ["DEFAULT_URL", "MAX_SHOWN_ROWS", "add_query_parser", "columns_read", "tables_named"]

DEFAULT_URL: Final = "http://127.0.0.1:7701"
#: Rows printed at most: more is a file's job (``--csv``, ``--parquet``).
MAX_SHOWN_ROWS: Final = 1000
_MISSING: Final = "ringtrace query needs DuckDB and pyarrow here: pip install 'ringtrace[query]'"


def add_query_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    query = commands.add_parser(
        "query",
        help=f"SQL over a collector's events, run here with DuckDB (tables: {', '.join(TABLES)})",
        description=(
            "Fetches the tables the SQL names from the collector as Parquet (the filters apply to each) and runs the "
            f"SQL over them with an in-process DuckDB. Tables: {', '.join(TABLES)} (docs/snapshots.md, Tables)."
        ),
    )
    query.add_argument("sql", metavar="SQL", help="one DuckDB SQL statement, e.g. 'SELECT name, count(*) FROM spans'")
    query.add_argument("--url", default=DEFAULT_URL, help=f"the collector's HTTP address (default {DEFAULT_URL})")
    written = query.add_mutually_exclusive_group()
    written.add_argument("--csv", metavar="FILE", help="write the result as CSV, with a header ('-': stdout)")
    written.add_argument("--parquet", metavar="FILE", help="write the result as Parquet")
    query.add_argument(
        "--flush-timeout", type=float, default=None, metavar="S", help="how long the collector waits for clients"
    )
    add_filters(query)
    add_access(query)
    query.set_defaults(run=_query, parser=query)


def tables_named(duckdb: Any, sql: str) -> list[str]:
    """The tables of ``TABLES`` that ``sql`` reads, in ``TABLES``' order.

    DuckDB names them by binding the SQL against tables of placeholder columns, which fails where the binding needs
    the columns themselves (``USING``, ``NATURAL``, ``COLUMNS('regex')``, a pivot): the tables are then each of
    ``TABLES`` the SQL names as a word (more than it reads at worst, never fewer), and DuckDB says what else is
    wrong once they are there.

    Raises:
        CommandError: the SQL is empty, more than one statement (DuckDB's parser splits it) or does not parse
            (status 2), or reads none of the tables.
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.ParserException as exc:
        raise CommandError(_first_line(exc), 2) from None
    if not statements:
        raise CommandError("the SQL is empty: give one statement, e.g. 'SELECT name, count(*) FROM spans'", 2)
    if len(statements) > 1:  # (DuckDB would run each, and show the last one's result)
        second = " ".join(statements[1].query.split())
        shown = second if len(second) <= 60 else second[:57] + "..."
        raise CommandError(f"the SQL is {len(statements)} statements (the second: {shown!r}); give one", 2)
    try:
        named = {name.lower() for name in duckdb.get_table_names(sql)}
    except duckdb.ParserException as exc:
        raise CommandError(_first_line(exc), 2) from None
    except duckdb.Error:
        named = {sql[start:end].strip().strip('"').lower() for start, end in _identifiers(duckdb, sql)}
    tables = [table for table in TABLES if table in named]
    if not tables:
        others = sorted(named - set(TABLES))
        reads = f" (it reads {', '.join(others)})" if others else ""
        raise CommandError(f"the SQL reads none of the tables {', '.join(TABLES)}{reads}", 2)
    return tables


def _identifiers(duckdb: Any, sql: str) -> list[tuple[int, int]]:
    """Where ``sql``'s identifiers are: (start, end) of each, by DuckDB's tokenizer."""
    tokens = duckdb.tokenize(sql)
    ends = [start for start, _ in tokens[1:]] + [len(sql)]
    return [
        (start, end) for (start, kind), end in zip(tokens, ends, strict=True) if kind == duckdb.token_type.identifier
    ]


#: What in the SQL's syntax tree (DuckDB's ``json_serialize_sql``) reads columns it does not name: a star (or
#: ``COLUMNS(...)``), a column by position, a join by like names (``USING``, ``NATURAL``), a pivot.
_READS_UNNAMED: Final = frozenset({"STAR", "POSITIONAL_REFERENCE", "NATURAL", "PIVOT", "UNPIVOT"})


def columns_read(duckdb: Any, sql: str, tables: list[str]) -> dict[str, tuple[str, ...] | None]:
    """For each of ``tables``, the columns ``sql`` may read, in the table's order (None: all of them, where the SQL
    reads one it does not name, a whole row, or it cannot be told). Every name the SQL's column references hold
    counts, whichever table it belongs to: more than it reads at worst, never fewer; a table of which it names no
    column (``count(*)``) gets one, for its rows."""
    every: dict[str, tuple[str, ...] | None] = dict.fromkeys(tables)
    try:
        tree = json.loads(duckdb.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    except Exception:  # (an older DuckDB) every column
        return every
    if tree.get("error"):  # (not a SELECT: COPY, PRAGMA ...) every column
        return every
    names: set[str] = set()
    rows: set[str] = set(tables)  # what names a whole row: the tables, and their aliases
    nodes: list[Any] = [tree]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        if _READS_UNNAMED.intersection(str(value) for value in node.values() if isinstance(value, str)):
            return every
        if node.get("using_columns") or node.get("column_name_alias"):  # (an alias list renames by position)
            return every
        if node.get("type") == "BASE_TABLE" and node.get("alias"):
            rows.add(str(node["alias"]).lower())
        if node.get("class") == "COLUMN_REF":
            parts = [str(part).lower() for part in node.get("column_names", [])]
            if len(parts) == 1 and parts[0] in rows:
                return every
            names.update(parts)
        nodes.extend(node.values())
    read: dict[str, tuple[str, ...] | None] = {}
    for table in tables:
        columns = tuple(column for column in TABLES[table] if column in names)
        read[table] = columns or (TABLES[table][1],)  # (pid: a number, the cheapest to read)
    return read


def _query(args: argparse.Namespace) -> int:
    try:
        import duckdb
    except ImportError:
        raise CommandError(_MISSING) from None
    filters = filter_params(args)
    if args.flush_timeout is not None:
        filters.append(("flush_timeout_s", str(args.flush_timeout)))
    check_params(filters)
    tables = tables_named(duckdb, args.sql)
    reads = columns_read(duckdb, args.sql, tables)
    access = Access(args)
    with tempfile.TemporaryDirectory(prefix="ringtrace-query-") as directory:
        connection = duckdb.connect()
        try:
            for table in tables:
                path = Path(directory, f"{table}.parquet")
                params = [*filters, ("format", "parquet"), ("table", table)]
                columns = reads[table]
                if columns is not None:
                    params.append(("columns", ",".join(columns)))
                _fetch_table(args.url, params, access, path)
                quoted = str(path).replace("'", "''")
                connection.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{quoted}')")
            _run(duckdb, connection, args, Path(directory))
        finally:
            connection.close()
    return 0


def _fetch_table(url: str, params: list[tuple[str, str]], access: Access, path: Path) -> None:
    with fetch(snapshot_url(url, params), access) as response, path.open("wb") as out:
        while chunk := response.read(CHUNK):
            out.write(chunk)


def _run(duckdb: Any, connection: Any, args: argparse.Namespace, directory: Path) -> None:
    """Run the SQL; print its result, or write it where ``--csv`` or ``--parquet`` says (DuckDB's ``COPY``, written
    here first: the file is then written whole or not at all)."""
    try:
        if args.csv is not None or args.parquet is not None:
            written = directory / "result"
            quoted = str(written).replace("'", "''")
            how = "FORMAT csv, HEADER" if args.csv is not None else "FORMAT parquet"
            # (the closing parenthesis on a line of its own: SQL that ends in a -- comment does not comment it out)
            connection.execute(f"COPY ({args.sql.strip().rstrip(';')}\n) TO '{quoted}' ({how})")
            from ringtrace.collector.command.output import output  # (here: the Chrome writer it imports is no query's)

            with output(args.csv or args.parquet) as out, written.open("rb") as result:
                while chunk := result.read(CHUNK):
                    out.write(chunk)
            return
        cursor = connection.execute(args.sql)
        if cursor.description is None:  # a statement with no result
            return
        columns = [str(column[0]) for column in cursor.description]
        rows = cursor.fetchmany(MAX_SHOWN_ROWS + 1)
    except duckdb.Error as exc:
        raise CommandError(_first_line(exc), 2) from None
    _print(columns, rows)


def _print(columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    from rich.console import Console  # (here: --csv and --parquet do without rich's imports)
    from rich.table import Table
    from ringtrace.collector.command.output import cell

    table = Table(box=None, pad_edge=False)
    for column in columns:
        table.add_column(cell(column), no_wrap=True)
    for row in rows[:MAX_SHOWN_ROWS]:
        table.add_row(*(cell(_cell(value)) for value in row))
    # On a terminal, as wide as it is; into a pipe or file, whole lines.
    Console(highlight=False, width=None if sys.stdout.isatty() else 1000).print(table)
    if len(rows) > MAX_SHOWN_ROWS:
        print(
            f"ringtrace query: the first {MAX_SHOWN_ROWS:,} rows shown; --csv FILE or --parquet FILE for all",
            file=sys.stderr,
        )


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return str(value)


def _first_line(exc: Exception) -> str:
    """DuckDB's message, on one line."""
    return " ".join(str(exc).split("\n")[0].split())
