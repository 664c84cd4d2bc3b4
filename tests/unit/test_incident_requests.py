"""What the incidents' HTTP requests take: ``POST /incidents``'s JSON body (its trigger event's args, bounded, a bad
one named), ``GET /incidents?status=pending`` and ``format=record``; and when a pending incident a killed collector
left is to be written."""

from __future__ import annotations

import json

import pytest
from ringtrace.collector.http.incident_post import MAX_ARGS, MAX_ARGS_BYTES, parse_incident_args
from ringtrace.collector.http.incident_query import (
    IncidentsQuery,
    newest_first,
    parse_incident_query,
    parse_incidents_query,
)
from ringtrace.collector.http.query import QueryError
from ringtrace.collector.incidents.left_pending import MAX_RESUMED_WAIT_S, ready_wall_ns
from ringtrace.collector.store.processes import Registry
from ringtrace.wire.handshake_frames import Hello


def test_a_json_object_of_scalars_is_the_args_and_an_empty_body_none() -> None:
    args = {"version": "1.4.2", "canary": True, "shard": -(2**63), "load": 0.5, "note": None, "ünï": "ok"}
    assert parse_incident_args(json.dumps(args).encode()) == args
    assert parse_incident_args(b"") == {} and parse_incident_args(b" \n") == {}
    assert len(parse_incident_args(json.dumps({f"k{i}": i for i in range(MAX_ARGS)}).encode())) == MAX_ARGS


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"{", "is not JSON"),
        (b"\xff\xfe", "is not JSON"),
        (b'"text"', "must be a JSON object, not a str"),
        (b'{"a": {"b": 1}}', "arg 'a' is a JSON object"),
        (b'{"a": [1]}', "arg 'a' is a JSON array"),
        (b'{"a": 9223372036854775808}', "arg 'a' is 9223372036854775808: an integer arg fits in 64 bits"),
        (b'{"a": NaN}', "arg 'a' is nan: a number arg is finite"),
        (b'{"a": Infinity}', "arg 'a' is inf"),
        (b'{"": 1}', "a name is 1 to 100 characters"),
        (b'{"a\\u0007": 1}', "no control ones"),
        (json.dumps({"x" * 101: 1}).encode(), "a name is 1 to 100"),
        (json.dumps({f"k{i}": i for i in range(MAX_ARGS + 1)}).encode(), f"{MAX_ARGS + 1} args, more than {MAX_ARGS}"),
        (b" " * (MAX_ARGS_BYTES + 1), f"more than {MAX_ARGS_BYTES} bytes"),
    ],
)
def test_a_bad_body_is_refused_naming_the_arg_or_the_limit(body: bytes, said: str) -> None:
    with pytest.raises(QueryError) as refused:
        parse_incident_args(body)
    assert said in str(refused.value)


def test_pending_is_a_status_to_list_and_the_newest_come_first() -> None:
    assert parse_incidents_query([("status", "Pending")], 0) == IncidentsQuery(status="pending")
    with pytest.raises(QueryError, match="must be one of pending, saved, failed"):
        parse_incidents_query([("status", "done")], 0)
    records = [{"id": "b", "time_ns": 2}, {"id": "a", "time_ns": 3}, {"id": "c"}]
    assert [r["id"] for r in newest_first(records)] == ["a", "b", "c"]


def test_format_record_is_the_record_and_takes_no_filter() -> None:
    assert parse_incident_query([("format", "RECORD")], 0)[0] is None
    assert parse_incident_query([], 0)[0] is not None  # (chrome by default)
    with pytest.raises(QueryError, match="'name' does not go with format=record"):
        parse_incident_query([("format", "record"), ("name", "tick")], 0)


def test_a_left_pending_incident_waits_for_its_windows_end_only_if_any_process_was_recovered() -> None:
    registry = Registry()
    record = {"window": {"since_ns": 0, "until_ns": 5_000}, "processes": [{"pid": 100, "name": "proc", "host": "h"}]}
    assert ready_wall_ns(record, registry, now_ns=1_000) is None  # (none recovered: it fails at once)
    registry.known(Hello(100, "h", "proc", "i1", "boot", 1, 2, "test"))
    assert ready_wall_ns(record, registry, now_ns=1_000) == 5_000
    assert ready_wall_ns(record, registry, now_ns=6_000) is None  # (its window ended: written at once)
    assert ready_wall_ns({**record, "window": {}}, registry, now_ns=1_000) is None
    far = {**record, "window": {"since_ns": 0, "until_ns": 10**15}}
    assert ready_wall_ns(far, registry, now_ns=0) == int(MAX_RESUMED_WAIT_S * 1e9)
