"""Snapshot query parameters parsed: every form of a time, patterns, limits, and the errors that name them."""

from __future__ import annotations

import pytest
from ringtrace.client.recording.messages import message_kind
from ringtrace.collector.command.filters import as_flags
from ringtrace.collector.http.query import QueryError, parse_snapshot_query, parse_time
from ringtrace.collector.read.selection import EVERYTHING, category_of
from ringtrace.wire.model import BUILTIN_KINDS

NOW = 1_795_000_000_123_456_789


def parse(**params: str):  # type: ignore[no-untyped-def]
    return parse_snapshot_query(params.items(), now_ns=NOW)


def test_no_parameters_select_everything_as_chrome() -> None:
    query = parse()
    assert query.filter == EVERYTHING and query.filter.selects_everything
    assert query.format == "chrome" and query.flush_timeout_s == 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1795000000000000000", 1_795_000_000_000_000_000),
        ("-5s", NOW - 5 * 10**9),
        ("-1.5m", NOW - 90 * 10**9),
        ("-250ms", NOW - 250 * 10**6),
        ("-2h", NOW - 7200 * 10**9),
        ("-1d", NOW - 86_400 * 10**9),
        ("-10us", NOW - 10_000),
        ("-7ns", NOW - 7),
        ("+30s", NOW + 30 * 10**9),
        ("+1.5m", NOW + 90 * 10**9),
        ("1970-01-01T00:00:01Z", 10**9),
        ("1970-01-01T00:00:01.5Z", 1_500_000_000),
        ("1970-01-01T00:00:01.000000001Z", 1_000_000_001),
        ("1970-01-01T00:00:01.123456789123Z", 1_123_456_789),  # (past the ns: truncated)
        ("1970-01-01T00:00:01.0000000009Z", 1_000_000_000),
        ("1970-01-01T01:00:00+01:00", 0),
        ("2026-11-22t10:00:00z", 1_795_341_600 * 10**9),
    ],
)
def test_times_take_ns_rfc3339_and_relative_forms(text: str, expected: int) -> None:
    assert parse_time("since", text, NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        *("", "soon", "5s", "-5", "-5 s", "+-5s", "+5", "-5y"),
        *("2026-11-22", "2026-11-22T10:00:00", "2026-02-30T00:00:00Z", "1e9"),
    ],
)
def test_a_bad_time_names_the_parameter_and_the_forms(text: str) -> None:
    with pytest.raises(QueryError, match="'until'") as error:
        parse(until=text)
    assert "RFC 3339" in str(error.value) or "valid time" in str(error.value)


@pytest.mark.parametrize(
    "text",
    ["-99999999d", "-" + "9" * 400 + "d", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "99999999999999999999"],
)
def test_a_time_outside_what_a_snapshot_can_hold_is_refused(text: str) -> None:
    with pytest.raises(QueryError, match="'since' must be a time from 1970-01-01 to 2262-04-11"):
        parse(since=text)


def test_unknown_and_repeated_parameters_are_named() -> None:
    with pytest.raises(QueryError, match=r"unknown query parameter 'pids' \(accepted: since, until, pid"):
        parse(pids="1")
    with pytest.raises(QueryError, match="'pid' is given more than once"):
        parse_snapshot_query([("pid", "1"), ("pid", "2")], now_ns=NOW)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "0"}, "'limit' must be a whole number from 1"),
        ({"limit": "1000000001"}, "'limit'"),
        ({"limit": "99999999999999999999999"}, "'limit'"),
        ({"pid": "1,,2"}, "'pid'"),
        ({"pid": ",".join(["1"] * 1001)}, "up to 1000"),
        ({"shown_pid": "4242,"}, "'shown_pid' must be up to 1000 comma-separated pids"),
        ({"min_priority": "loud"}, r"'min_priority' must be one of fatal, error, warning, .* \(any case\), got 'loud'"),
        ({"format": "json"}, "'format' must be one of chrome"),
        ({"flush_timeout_s": "nan"}, "between 0 and 60"),
        ({"flush_timeout_s": "x"}, "must be a number"),
        ({"name": "x" * 1025}, "1 to 1024 characters, got 1025"),
        ({"since": "-1s", "until": "-2s"}, "'since' .* must be before 'until'"),
        ({"process": "[web"}, r"'process' has a '\[' at character 1 that no '\]' closes"),
        ({"track": "w[!a"}, r"'track' has a '\[' at character 2"),
        ({"messages_only": "maybe"}, r"'messages_only' must be one of 1, true, yes, on .* 0, false, no, off .*'maybe'"),
        ({"messages_only": ""}, "'messages_only' must be one of"),
    ],
)
def test_bad_values_name_the_parameter_and_the_rule(params: dict[str, str], message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse(**params)


@pytest.mark.parametrize("text", ["1", "true", "TRUE", "Yes", "on", "ON"])
def test_a_yes_no_parameter_takes_yes_in_any_case(text: str) -> None:
    assert parse(messages_only=text).filter.messages_only


@pytest.mark.parametrize("text", ["0", "false", "False", "NO", "off", "Off"])
def test_a_yes_no_parameter_takes_no_in_any_case(text: str) -> None:
    assert not parse(messages_only=text).filter.messages_only


def test_values_from_a_list_are_taken_in_any_case() -> None:
    assert parse(format="CHROME").format == "chrome" and parse(format="Perfetto").format == "perfetto"
    assert parse(min_priority="WARNING").filter == parse(min_priority="warning").filter
    assert parse(min_priority="Trace+++").filter.describe() == {"min_priority": "trace+++"}
    assert parse(process="Web").filter.process_matches(1, 1, "Web", "h")  # names stay case-sensitive
    assert not parse(process="Web").filter.process_matches(1, 1, "web", "h")


def test_filters_match_processes_tracks_and_kinds() -> None:
    selected = parse(pid="10,20", process="web-*", host="db[12]", track="worker", min_priority="warning").filter
    assert selected.process_matches(10, 10, "web-1", "db1")
    assert selected.process_matches(5, 20, "web-2", "db2")  # by the pid a snapshot shows
    assert not selected.process_matches(30, 30, "web-1", "db1")
    assert not selected.process_matches(10, 10, "api", "db1")
    assert not selected.process_matches(10, 10, "web-1", "db3")
    shown = parse(shown_pid="10").filter  # the pid a snapshot shows, alone: not another process of OS pid 10
    assert shown.process_matches(10, 10, "web", "h") and shown.process_matches(5, 10, "web", "h")
    assert not shown.process_matches(10, 10 + (1 << 22), "web", "h")
    assert shown.describe() == {"shown_pid": [10]}
    assert selected.track_matches("worker") and not selected.track_matches("worker-2")
    assert selected.kind_matches(message_kind("net", "error", "down"))
    assert not selected.kind_matches(message_kind("net", "info", "up"))
    assert all(selected.kind_matches(kind) for kind in BUILTIN_KINDS)  # no priority: kept
    assert not selected.by_event or selected.since_ns is None


def test_categories_of_built_in_kinds_are_their_families() -> None:
    assert sorted({category_of(kind) for kind in BUILTIN_KINDS}) == [
        "async",
        "call",
        "counter",
        "incident",
        "instant",
        "marker",
        "sample",
        "source",
        "span",
    ]
    assert category_of(message_kind("engine", "info", "x")) == "engine"


def test_a_window_selects_by_start() -> None:
    selected = parse(since="1000", until="2000").filter
    assert selected.in_window(1000) and selected.in_window(1999)
    assert not selected.in_window(999) and not selected.in_window(2000)
    assert selected.overlaps(0, 1000) and selected.overlaps(1999, 5000)
    assert not selected.overlaps(0, 999) and not selected.overlaps(2000, 3000)
    assert selected.describe() == {"since_ns": 1000, "until_ns": 2000}


def test_globs_with_closed_sets_are_taken_and_messages_only_keeps_only_messages() -> None:
    for text in ("db[12]", "[!]x]*", "[]]", "[[]web"):
        assert parse(process=text).filter.process is not None
    only = parse(messages_only="1", min_priority="warning").filter
    assert only.by_event and only.describe()["messages_only"] is True
    assert only.kind_matches(message_kind("net", "error", "down"))
    assert not only.kind_matches(message_kind("net", "info", "up"))
    assert not any(only.kind_matches(kind) for kind in BUILTIN_KINDS)  # no priority: left out
    assert parse(messages_only="0").filter == parse().filter


def test_a_trace_id_is_32_hex_digits_in_any_case_and_selects_by_the_events_trace() -> None:
    trace = "0123456789ABCDEF0123456789abcdef"
    selected = parse_snapshot_query([("trace_id", trace)], now_ns=NOW).filter
    assert selected.trace_id == trace.lower() and selected.by_event
    assert selected.describe() == {"trace_id": trace.lower()}
    span = BUILTIN_KINDS[0]
    assert selected.trace_matches(span, {"trace_id": trace.lower(), "x": 1})
    assert not selected.trace_matches(span, {"trace_id": "0" * 32}) and not selected.trace_matches(span, None)
    log = message_kind("otlp-test", "info", "$body $severity $trace_id")  # a typed kind's values, by field name
    assert selected.trace_matches(log, ["body", "", trace.lower()])
    assert not selected.trace_matches(log, ["body", ""])
    for bad in ("", "0123", "g" * 32, "0" * 33):
        with pytest.raises(QueryError, match="'trace_id' must be 32 hex digits"):
            parse_snapshot_query([("trace_id", bad)], now_ns=NOW)


def test_a_command_names_a_parameter_by_its_flag_but_keeps_a_value_as_given() -> None:
    assert (
        as_flags("query parameter 'since' (5 ns) must be before 'until' (3 ns)")
        == "--since (5 ns) must be before --until (3 ns)"
    )
    assert as_flags("query parameter 'by' must be one of name, process, got 'host'", {"by": "--by"}).endswith(
        "got 'host'"
    )
