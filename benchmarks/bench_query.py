"""``ringtrace query`` of p99 by name over N spans, end to end, against a real collector: the issue's target is 10M
spans in <= 3 s.

A client subprocess records ``--n`` spans (8 names, one arg each) in a process named "bulk". Interleaved rounds then
time, each in the same run:

  query        ``ringtrace query "SELECT name, count(*), quantile_cont(duration_ns, 0.99) FROM spans GROUP BY name"``
               as a user runs it: a fresh interpreter (its imports), the spans table's columns the SQL reads fetched
               as Parquet (GET /snapshot?format=parquet&table=spans&columns=name,duration_ns), DuckDB over it, the
               result printed
  startup      a fresh interpreter importing what the query command does before it fetches (its parser's modules,
               DuckDB): the query's fixed cost
  parquet      the same columns fetched alone (read whole): how much of the query is the collector's writing of them
  duckdb       the SQL run by DuckDB (in this process, imported) over those columns as fetched, in a file: the rest
  parquet_all  the whole table (every column) fetched alone: a query that reads every column (SELECT *)
  chrome       GET /snapshot of the same selection as Chrome JSON, read whole: the baseline (ratio query / chrome)

Also reported: the table's size against Chrome JSON's, the rows a second each makes, and the query's time split
into startup, parquet and duckdb (what is left: the fetched file written, the result printed, the interpreter's exit).

python benchmarks/bench_query.py [--n 1000000] [--rounds 3]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _common import bench_main, collector, interleave, median, table, verdict

RECORD = """
import sys, ringtrace.client
n = int(sys.argv[2])
tl = ringtrace.client.connect(sys.argv[1], process_name="bulk", max_queue_bytes=1024 * 1024 * 1024)
names = [f"handler-{k}" for k in range(8)]
for i in range(n):
    with tl.scope(names[i % 8], i=i):
        pass
    if i % 100_000 == 99_999:  # (flat out, the recorder outruns the sender: it drops, counted, rather than wait)
        assert tl.flush(600), "bulk not delivered"
assert tl.flush(600), "bulk not delivered"
"""
SQL = "SELECT name, count(*) AS n, quantile_cont(duration_ns, 0.99) AS p99_ns FROM spans GROUP BY name ORDER BY name"
QUERY = "import sys; from ringtrace.collector.command.main import main; sys.exit(main())"
#: What the query command imports before it fetches: its parser's modules (main.py imports the named subcommand's
#: alone) and DuckDB (sql.py, when it runs).
STARTUP = "import duckdb; from ringtrace.collector.command.main import build_parser; build_parser('query')"
#: The issue's target: 10M spans in this many seconds.
TARGET_S = 3.0
TARGET_SPANS = 10_000_000


def fetch(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    size = 0
    with urllib.request.urlopen(url, timeout=3600) as response:
        while chunk := response.read(1 << 20):
            size += len(chunk)
    return time.perf_counter() - started, size


def run_query(http: str) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", QUERY, "query", SQL, "--url", f"http://{http}"], capture_output=True, text=True
    )
    took = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("handler-") == 8, done.stdout
    return took, 0


def run_startup() -> tuple[float, int]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", STARTUP], check=True)
    return time.perf_counter() - started, 0


def run_duckdb(path: Path) -> tuple[float, int]:
    import duckdb

    started = time.perf_counter()
    connection = duckdb.connect()
    connection.execute(f"CREATE VIEW spans AS SELECT * FROM read_parquet('{path}')")
    rows = connection.execute(SQL).fetchall()
    connection.close()
    took = time.perf_counter() - started
    assert len(rows) == 8, rows
    return took, 0


def bench(n: int, rounds: int) -> int:
    with collector("--capacity", "8GiB") as running:
        started = time.perf_counter()
        bulk = subprocess.run([sys.executable, "-c", RECORD, running.tcp, str(n)], capture_output=True, text=True)
        assert bulk.returncode == 0, bulk.stderr
        stored = running.stored_events()
        print(f"stored: {stored:,} spans in {time.perf_counter() - started:.1f} s")
        base = f"http://{running.http}/snapshot"
        columns = base + "?format=parquet&table=spans&columns=name,duration_ns"
        fetched = Path(tempfile.mkdtemp(prefix="bench-query-"), "spans.parquet")
        with urllib.request.urlopen(columns, timeout=3600) as response:
            fetched.write_bytes(response.read())
        results = interleave(
            {
                "query": lambda: run_query(running.http),
                "startup": run_startup,
                "parquet": lambda: fetch(columns),
                "duckdb": lambda: run_duckdb(fetched),
                "parquet_all": lambda: fetch(base + "?format=parquet&table=spans"),
                "chrome": lambda: fetch(base),
            },
            rounds,
        )
        fetched.unlink()
        fetched.parent.rmdir()
    seconds = {name: median([took for took, _ in values]) for name, values in results.items()}
    sizes = {name: values[-1][1] for name, values in results.items()}
    rows = [
        [
            name,
            f"{seconds[name]:.2f}",
            f"{n / seconds[name] / 1e6:.2f}",
            f"{sizes[name] / 1e6:.1f}" if sizes[name] else "",
        ]
        for name in results
    ]
    print(table(["variant", "s (median)", "M spans/s", "MB"], rows, title=f"{n:,} spans, {rounds} rounds"))
    ratio = seconds["query"] / seconds["chrome"]
    scaled = seconds["query"] * TARGET_SPANS / n
    print(f"query / chrome: {ratio:.2f}x")
    parts = {name: seconds[name] for name in ("startup", "parquet", "duckdb")}
    rest = seconds["query"] - sum(parts.values())
    split = ", ".join(f"{name} {took:.2f} s ({took / seconds['query']:.0%})" for name, took in parts.items())
    print(f"of the query's {seconds['query']:.2f} s: {split}, the rest {rest:.2f} s")
    print(
        f"query scaled to {TARGET_SPANS:,} spans (linear): {scaled:.1f} s; target <= {TARGET_S} s: "
        f"{verdict(scaled <= TARGET_S)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=1_000_000, rounds=3, quick=(20_000, 1)))
