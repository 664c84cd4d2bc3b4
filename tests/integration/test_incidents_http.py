"""Saved incidents served by a real collector: incidents written into its ``--incidents-dir`` (with a native snapshot
from a real collector's ``GET /snapshot?format=native``), then listed, fetched in every format and deleted over HTTP
and through ``ringtrace incidents``; their counters in ``/metrics`` and ``/stats``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_process import CollectorProcess, events, run_script
from perfetto_model import PerfettoTrace
from ringtrace.collector.command.main import main
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.incidents.incident_files import IncidentFiles

# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("incidents_http")

RECORD = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="checkout")
for i in range(30):
    with tl.scope("request", i=i):
        tl.instant("tick")
assert tl.flush(5)
"""
#: What RECORD stores: 30 spans and 30 instants.
RECORDED = 60
SECOND = 10**9
T0 = 1_796_000_000 * SECOND


class Served:
    """The collector, its incidents' directory (written to by this side, as the engine would), the snapshot file
    the incidents hold, and the ids written, oldest first."""

    def __init__(self, collector: CollectorProcess, files: IncidentFiles, native: bytes) -> None:
        self.collector = collector
        self.files = files
        self.native = native
        self.ids: list[str] = []

    def save(self, rule: str, time_ns: int) -> str:
        record = {
            "id": self.files.new_id(rule, time_ns),
            "rule": rule,
            "time_ns": time_ns,
            "reason": "span 'request' lasted 250 ms",
            "processes": [{"pid": 1, "name": "checkout", "host": "here"}],
            "events": RECORDED,
        }
        self.files.begin(record)
        self.ids.append(self.files.save(record, [self.native])["id"])
        return self.ids[-1]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("incidents")
    collector = CollectorProcess("--incidents-dir", str(directory))
    try:
        collector.wait_for_log(lambda line: f"incidents: kept in {directory}" in line)
        run_script(collector, RECORD)
        collector.wait_for_stored(RECORDED)
        status, native = collector.get("/snapshot?format=native")
        assert status == 200, native
        served = Served(collector, IncidentFiles(directory, max_count=100, max_bytes=2**30), native)
        served.save("slow checkout", T0)
        served.save("error log", T0 + SECOND)
        served.save("slow checkout", T0 + 2 * SECOND)
        failed = {"id": served.files.new_id("crash", T0 + 3 * SECOND), "rule": "crash", "time_ns": T0 + 3 * SECOND}
        served.files.fail(failed, "the collector stopped before the window was collected")
        served.ids.append(failed["id"])
        yield served
    finally:
        collector.stop()


def listed(served: Served, query: str = "") -> list[str]:
    return [record["id"] for record in served.collector.json("/incidents" + query)["incidents"]]


def error_of(served: Served, path: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(served.collector.http_url + path, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            assert exc.headers["Content-Type"].startswith("text/plain")  # (as every endpoint's errors)
            text = exc.read().decode()
            assert text.endswith("\n") and text.count("\n") == 1, text
            return exc.code, text.removesuffix("\n")


def test_incidents_are_listed_newest_first_with_their_records(served: Served) -> None:
    assert listed(served) == served.ids[::-1]
    first = served.collector.json("/incidents")["incidents"][-1]
    assert first["rule"] == "slow checkout" and first["status"] == "saved" and first["time_ns"] == T0
    assert first["bytes"] == len(served.native) and first["events"] == RECORDED


def test_the_list_filters(served: Served) -> None:
    saved = served.ids[:3]
    assert listed(served, "?rule=slow+checkout") == [saved[2], saved[0]]
    assert listed(served, "?status=FAILED") == [served.ids[3]]
    assert listed(served, "?status=saved&limit=2") == [saved[2], saved[1]]
    assert listed(served, f"?since={T0 + SECOND}&until={T0 + 3 * SECOND}") == [saved[2], saved[1]]
    assert listed(served, "?since=2026-11-29T10:00:00Z&rule=nothing") == []


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?status=done", "'status' must be one of pending, saved, failed"),
        ("?limit=0", "'limit' must be a whole number"),
        ("?since=yesterday", "'since' must be wall-clock ns"),
        ("?colour=red", "unknown query parameter 'colour'"),
        ("?rule=a&rule=b", "'rule' is given more than once"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(served: Served, query: str, named: str) -> None:
    status, error = error_of(served, "/incidents" + query)
    assert status == 400 and named in error, error


def test_an_incident_is_served_as_chrome_json_by_default(served: Served) -> None:
    trace = served.collector.json(f"/incidents/{served.ids[0]}")
    assert len(events(trace, "X")) == 30 and len(events(trace, "i")) == 30


def test_an_incident_is_served_in_every_format(served: Served) -> None:
    incident = served.ids[1]
    status, native = served.collector.get(f"/incidents/{incident}?format=native")
    assert status == 200
    copy = served.files.directory.parent / "copy.rtsnap"
    copy.write_bytes(native)
    assert load_file(copy).events == RECORDED
    status, perfetto = served.collector.get(f"/incidents/{incident}?format=PERFETTO")
    assert status == 200
    assert sum(1 for s in PerfettoTrace(perfetto).slices if s.name == "request") == 30
    status, timeline = served.collector.get(f"/incidents/{incident}?format=timeline")
    assert status == 200 and isinstance(json.loads(timeline), dict)
    status, _ = served.collector.get(f"/incidents/{incident}?format=pprof")
    assert status == 200


def test_head_checks_an_incident_and_its_query_and_reads_nothing(served: Served) -> None:
    request = urllib.request.Request(f"{served.collector.http_url}/incidents/{served.ids[0]}?format=perfetto",
                                     method="HEAD")  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200 and response.headers["Content-Type"] == "application/octet-stream"
        assert response.read() == b""
    for path, status in ((f"{served.ids[0]}?format=svg", 400), ("20200101T000000000Z-nothing-0000", 404)):
        request = urllib.request.Request(f"{served.collector.http_url}/incidents/{path}", method="HEAD")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        refused.value.close()
        assert refused.value.code == status


def test_an_incident_is_filtered_as_a_snapshot_is(served: Served) -> None:
    trace = served.collector.json(f"/incidents/{served.ids[0]}?name=tick&limit=5")
    assert len(events(trace, "i")) == 5 and events(trace, "X") == []
    status, error = error_of(served, f"/incidents/{served.ids[0]}?flush_timeout_s=1")
    assert status == 400 and "unknown query parameter 'flush_timeout_s'" in error, error
    status, error = error_of(served, f"/incidents/{served.ids[0]}?format=native&format=chrome")
    assert status == 400 and "'format' is given more than once" in error, error


def test_an_incidents_parquet_is_any_table_and_columns_as_a_snapshots(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    incident = served.ids[0]
    status, body = served.collector.get(f"/incidents/{incident}?format=parquet&table=instants&columns=name,ts_ns")
    assert status == 200, body
    table = parquet.read_table(pyarrow.BufferReader(body))
    assert table.column_names == ["name", "ts_ns"] and table.column("name").to_pylist() == ["tick"] * 30
    for query, named in (
        ("format=parquet&table=frames", "'table' must be one of spans, instants"),
        ("format=parquet&columns=colour", "spans has no column 'colour'"),
        ("format=chrome&table=instants", "'table' is for format=parquet only"),
        ("format=timeline&columns=name", "'columns' is for format=parquet only"),
        ("format=record&table=spans", "'table' does not go with format=record"),
    ):
        status, error = error_of(served, f"/incidents/{incident}?{query}")
        assert status == 400 and named in error, (query, error)

    target = tmp_path / "instants.parquet"
    status, _, err = run(capsys, "incidents", "fetch", incident, "--format", "parquet", "--table", "instants",
                         "--columns", "name", "-o", str(target), "--url", served.collector.http_url)  # fmt: skip
    assert status == 0, err
    assert parquet.read_table(target).column_names == ["name"]
    status, out, err = run(capsys, "incidents", "fetch", incident, "--format", "parquet", "--columns", "colour",
                           "--url", served.collector.http_url)  # fmt: skip
    assert (status, out) == (2, "") and err.count("\n") == 1 and "--columns: spans has no column 'colour'" in err, err


def test_an_incident_is_gzipped_when_accepted(served: Served) -> None:
    request = urllib.request.Request(
        f"{served.collector.http_url}/incidents/{served.ids[0]}", headers={"Accept-Encoding": "gzip"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["Content-Type"] == "application/json"
        trace = json.loads(gzip.decompress(response.read()))
    assert len(events(trace, "X")) == 30


def test_unknown_ids_and_formats(served: Served) -> None:
    assert error_of(served, "/incidents/20200101T000000000Z-nothing-0000") == (
        404,
        "no incident '20200101T000000000Z-nothing-0000'",
    )
    status, error = error_of(served, f"/incidents/{served.ids[3]}")
    assert status == 404 and "was not saved (the collector stopped" in error, error
    status, error = error_of(served, f"/incidents/{served.ids[0]}?format=svg")
    formats = "chrome, native, perfetto, pprof, parquet, timeline"
    assert status == 400 and f"'format' must be one of {formats}" in error, error
    assert error_of(served, "/incidents/..%2Fetc", "DELETE")[0] == 404


def test_metrics_and_stats_say_the_incidents(served: Served) -> None:
    status, body = served.collector.get("/metrics")
    assert status == 200
    assert "ringtrace_incidents_removed_total 0.0" in body.decode()
    stats = served.collector.json("/stats")["incidents"]
    assert stats["directory"] == str(served.files.directory)
    assert stats["removed"] == 0 and stats["fired"] == 0


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_the_command_lists_fetches_and_opens(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = served.collector.http_url
    status, out, _ = run(capsys, "incidents", "--url", url)
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["id", "rule", "time"]
    assert [line.split()[0] for line in lines[1:]] == served.ids[::-1]
    assert "2026-11-30 00:53:20.000" in lines[-1] and "checkout" in lines[-1] and "saved" in lines[-1]
    assert "failed: the collector stopped" in lines[1]

    status, out, _ = run(capsys, "incidents", "list", "--url", url, "--rule", "error log", "--json")
    assert status == 0 and [r["id"] for r in json.loads(out)["incidents"]] == [served.ids[1]]

    target = tmp_path / "incident.pftrace"
    status, _, err = run(capsys, "incidents", "fetch", served.ids[0], "--format", "perfetto", "-o", str(target),
                         "--url", url)  # fmt: skip
    assert status == 0 and f"written to {target}" in err
    assert sum(1 for s in PerfettoTrace(target.read_bytes()).slices if s.name == "request") == 30

    target = tmp_path / "ticks.json"
    status, _, err = run(capsys, "incidents", "fetch", served.ids[0], "--name", "tick", "-o", str(target), "--url", url)
    assert status == 0 and len(events(json.loads(target.read_text()), "i")) == 30
    status, _, err = run(capsys, "incidents", "fetch", served.ids[0], "--limit", "0", "--url", url)
    assert status == 2 and "--limit must be a whole number" in err, err

    os.environ["BROWSER"] = "true"  # (webbrowser runs it with the URL: no browser opens)
    try:
        status, out, _ = run(capsys, "incidents", "--url", url, "open", served.ids[0])
    finally:
        del os.environ["BROWSER"]
    assert status == 0 and out == f"{url}/?incident={served.ids[0]}\n"


def test_the_command_says_an_unknown_id_or_no_collector_in_a_line(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    url = served.collector.http_url
    missing = "20200101T000000000Z-nothing-0000"
    for action in ("fetch", "open", "delete"):
        status, out, err = run(capsys, "incidents", action, missing, "--url", url, "-o", "-") if action == "fetch" \
            else run(capsys, "incidents", action, missing, "--url", url)  # fmt: skip
        assert status == 1 and out == "", action
        assert err.count("\n") == 1 and f"no incident '{missing}'" in err, err
    status, _, err = run(capsys, "incidents", "--url", "http://127.0.0.1:9")
    assert status == 1 and "cannot reach 127.0.0.1:9" in err and "is a collector running there?" in err


def test_list_is_the_default_action_and_its_bad_arguments_exit_2(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    url = served.collector.http_url
    status, out, err = run(capsys, "incidents", "--url", url, "--status", "failed")
    assert status == 0 and [line.split()[0] for line in out.splitlines()[1:]] == [served.ids[3]], err
    status, out, err = run(capsys, "incidents", "--url", url, "--limit", "1", "--json")
    assert status == 0 and [r["id"] for r in json.loads(out)["incidents"]] == [served.ids[3]], err
    for argv in (["list", "--status", "bogus"], ["--status", "bogus"]):
        status, out, err = run(capsys, "incidents", "--url", url, *argv)
        assert (status, out) == (2, "") and err.count("\n") == 1, err
        assert "--status must be one of pending, saved, failed" in err and "got 'bogus'" in err
    status, _, err = run(capsys, "incidents", "--url", url, "--status", "saved", "fetch", served.ids[0])
    assert status == 2 and err == "ringtrace incidents: --status goes with list (or no action), not fetch\n"
    # (fetch has a --since and --until of its own: list's, before it, were dropped in silence)
    for flag, value in (("--since", "-5m"), ("--until", "now"), ("--limit", "3")):
        status, _, err = run(capsys, "incidents", "--url", url, flag, value, "fetch", served.ids[0])
        assert status == 2 and err == f"ringtrace incidents: {flag} goes with list (or no action), not fetch\n"


def test_deleting_removes_an_incident_over_http_and_through_the_command(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    doomed, also = served.save("doomed", T0 + 10 * SECOND), served.save("doomed", T0 + 11 * SECOND)
    status, body = error_of(served, f"/incidents/{doomed}", "DELETE")
    assert (status, json.loads(body)) == (200, {"deleted": doomed})
    assert error_of(served, f"/incidents/{doomed}", "DELETE") == (404, f"no incident '{doomed}'")
    status, _, err = run(capsys, "incidents", "delete", also, "--url", served.collector.http_url)
    assert status == 0 and f"incident {also}: deleted" in err
    assert doomed not in listed(served) and also not in listed(served)
    assert not (served.files.directory / f"{doomed}.rtrace").exists()


def test_the_command_runs_as_a_program(served: Served) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ringtrace")), "incidents", "list", "--url", served.collector.http_url,
         "--status", "failed"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert served.ids[3] in done.stdout


def test_with_a_data_dir_incidents_are_kept_in_it_and_outlive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = CollectorProcess("--data-dir", str(data))
    try:
        first.wait_for_log(lambda line: f"incidents: kept in {data / 'incidents'} (at most 100" in line)
        run_script(first, RECORD)
        first.wait_for_stored(RECORDED)
        status, native = first.get("/snapshot?format=native")
        assert status == 200
        files = IncidentFiles(data / "incidents", max_count=100, max_bytes=2**30)
        saved = files.save({"id": files.new_id("slow checkout", T0), "rule": "slow checkout", "time_ns": T0}, [native])
        assert listed_by(first) == [saved["id"]]
    finally:
        first.stop()
    again = CollectorProcess("--data-dir", str(data))
    try:
        again.wait_for_log(lambda line: "incidents: kept in" in line and "1 there now" in line)
        assert listed_by(again) == [saved["id"]]
        assert len(events(again.json(f"/incidents/{saved['id']}"), "X")) == 30
    finally:
        again.stop()


def listed_by(collector: CollectorProcess) -> list[str]:
    return [record["id"] for record in collector.json("/incidents")["incidents"]]
