"""The snapshot formats are declared once (``export/formats.py``): the HTTP query, the command line, the ``/``
listing and the docs all say what the registry says, and a format added to it is offered everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.command.main import build_parser, main
from ringtrace.collector.export.formats import (
    DEFAULT_FORMAT,
    FORMATS,
    FORMATS_END,
    FORMATS_START,
    Format,
    format_help,
    formats_block,
    formats_markdown,
    with_formats_markdown,
)
from ringtrace.collector.http.endpoints import ENDPOINTS
from ringtrace.collector.http.query import SNAPSHOT_PARAMETERS, QueryError, parse_snapshot_query
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EventFilter


def test_the_default_is_a_format_and_every_name_is_lower_case() -> None:
    assert DEFAULT_FORMAT in FORMATS
    assert all(name == format_.name == name.lower() for name, format_ in FORMATS.items())


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_is_a_value_of_the_query_in_any_case(name: str) -> None:
    assert parse_snapshot_query([("format", name.upper())], now_ns=0).format == name


def test_a_format_not_in_the_registry_is_refused_naming_those_that_are() -> None:
    with pytest.raises(QueryError, match=f"'format' must be one of {', '.join(FORMATS)}"):
        parse_snapshot_query([("format", "svg")], now_ns=0)
    assert SNAPSHOT_PARAMETERS["format"] == f"one of {', '.join(FORMATS)}"


@pytest.mark.parametrize("command", ["snapshot", "convert"])
def test_the_commands_format_flag_offers_the_registry_with_its_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    args = [command, "http://127.0.0.1:1" if command == "snapshot" else "in.rttrace", "-o", "-"]
    assert parser.parse_args(args).format == DEFAULT_FORMAT
    for name in FORMATS:
        assert parser.parse_args([*args, "--format", name.upper()]).format == name
    with pytest.raises(SystemExit):
        parser.parse_args([*args, "--format", "svg"])
    assert f"(choose from {', '.join(map(repr, FORMATS))})" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args([command, "--help"])
    assert " ".join(format_help().split()) in " ".join(capsys.readouterr().out.split())


def test_the_help_names_each_format_and_what_it_is() -> None:
    assert format_help() == (
        "chrome (Chrome trace JSON), native (a snapshot file), perfetto (a Perfetto trace), pprof (the samples as a "
        "pprof profile) or parquet (one table of typed rows (table=spans by default)); default chrome"
    )


def test_the_listing_of_endpoints_names_every_format() -> None:
    (snapshot,) = [
        endpoint for endpoint in ENDPOINTS if endpoint["path"] == "/snapshot" and endpoint["method"] == "GET"
    ]
    assert all(f"{name} ({format_.help})" in snapshot["does"] for name, format_ in FORMATS.items())


def test_the_docs_table_has_a_line_per_format_with_its_content_type() -> None:
    lines = formats_markdown().splitlines()[2:]
    assert [line.split(" | ")[0] for line in lines] == [f"| `{name}`" for name in FORMATS]
    assert all(f"`{FORMATS[name].content_type}`" in line for name, line in zip(FORMATS, lines, strict=True))


def test_the_table_is_written_between_the_markers_and_nothing_else_changes() -> None:
    page = f"# Snapshots\n\nBefore.\n\n{FORMATS_START}\n| old | table |\n{FORMATS_END}\n\nAfter.\n"
    written = with_formats_markdown(page)
    assert formats_block(written) == formats_markdown()
    assert written.startswith(f"# Snapshots\n\nBefore.\n\n{FORMATS_START}\n")
    assert written.endswith(f"{FORMATS_END}\n\nAfter.\n")
    with pytest.raises(ValueError, match="formats:start"):
        with_formats_markdown("# no block\n")


def _lines(view: SnapshotView, selected: EventFilter) -> Iterator[bytes]:
    for process in view.processes.values():
        yield f"{process.name}\n".encode()


def test_a_format_added_to_the_registry_is_one_the_query_and_the_command_take(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lines = Format("lines", "text/plain", _lines, help="a process a line", doc="a process a line", suffix=".txt")
    monkeypatch.setitem(FORMATS, "lines", lines)
    assert parse_snapshot_query([("format", "Lines")], now_ns=0).format == "lines"
    assert "lines (a process a line)" in format_help()
    trace = tmp_path / "t.rttrace"
    timeline = Timeline("unit", [FileListener(trace, process_name="unit")])
    timeline.instant("tick")
    timeline.close(timeout_s=30)
    out = tmp_path / "out.txt"
    assert main(["convert", str(trace), "-o", str(out), "--format", "lines"]) == 0
    assert out.read_text() == "unit\n"
