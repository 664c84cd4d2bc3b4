"""Traced calls as records (wire/call_records.py): what a run of them means as events."""

from __future__ import annotations

import pytest
from ringtrace.wire.call_records import RECORD, CallRun, pack_records
from ringtrace.wire.model import CALL, CALL_RAISED, KINDS

LOCATIONS = [("main", "app.py", 10), ("Parser.parse", "parse.py", 3)]


def test_a_run_reads_back_as_the_spans_of_its_calls() -> None:
    run = CallRun(pack_records([(105, 130, 1, CALL), (100, 200, 0, CALL_RAISED)]), LOCATIONS)
    assert len(run) == 2
    assert run.as_flat() == [
        CALL, "Parser.parse", 105, 130, (("Parser.parse", "parse.py", 3),),
        CALL_RAISED, "main", 100, 200, (("main", "app.py", 10),),
    ]  # fmt: skip


def test_a_record_is_24_bytes_little_endian() -> None:
    assert RECORD.size == 24
    assert pack_records([(1, 2, 3, CALL)]) == bytes.fromhex("01000000000000000200000000000000030000000b000000")


def test_records_cut_short_or_of_another_kind_are_refused() -> None:
    with pytest.raises(ValueError, match="25 bytes is not a whole number of 24-byte records"):
        CallRun(pack_records([(1, 2, 0, CALL)]) + b"x", LOCATIONS)
    with pytest.raises(ValueError, match="kind 1 is not a call kind"):
        CallRun(pack_records([(1, 2, 0, 1)]), LOCATIONS).as_flat()


def test_call_kinds_are_declared_as_spans() -> None:
    assert (KINDS.by_id[CALL].name, KINDS.by_id[CALL].shape) == ("call", "span")
    assert (KINDS.by_id[CALL_RAISED].name, KINDS.by_id[CALL_RAISED].shape) == ("call_raised", "span")
