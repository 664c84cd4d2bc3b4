"""The wire protocol's numbers the C code is compiled with (``wire/packer/wire_constants.h``, exposed by the packer and
by the recorder as ``WIRE_CONSTANTS``) are the Python definitions': change either side and this fails.

Checked in every run where the C modules are built, the pure-Python one too: they are imported for their constants,
not used.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest
from ringtrace.wire.arg_values import MAX_ARG_ITEMS, MAX_ARG_TEXT
from ringtrace.wire.call_records import RECORD as CALL_RECORD
from ringtrace.wire.frame_types import EVENT_COLUMNS, EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.model import CALL, CALL_RAISED, RECORD_FIELDS

#: What each constant of wire_constants.h stands for, from the Python definitions.
PYTHON_VALUES = {
    "RECORD_FIELDS": RECORD_FIELDS,
    # A record's values are its event's columns, in the columns' order (wire/model.py, wire/frames.py).
    "RECORD_ARGS": EVENT_COLUMNS.index("args"),
    "MAX_ARG_ITEMS": MAX_ARG_ITEMS,
    "MAX_ARG_TEXT": MAX_ARG_TEXT,
    "FRAME_HEADER_SIZE": FRAME_HEADER.size,
    "EVENTS_HEADER_SIZE": EVENTS_HEADER.size,
    "FRAME_TYPE_EVENTS": int(FrameType.EVENTS),
    "EVENT_COLUMN_COUNT": len(EVENT_COLUMNS),
    "CALL_KIND_ID": CALL,
    "CALL_RAISED_KIND_ID": CALL_RAISED,
    "CALL_RECORD_SIZE": CALL_RECORD.size,
}


def c_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not built here")


def test_a_record_is_its_events_columns() -> None:
    assert len(EVENT_COLUMNS) == RECORD_FIELDS


@pytest.mark.parametrize("name", ["ringtrace.wire._packer", "ringtrace.client._speedups"])
def test_the_c_modules_are_compiled_with_the_python_wire_constants(name: str) -> None:
    assert c_module(name).WIRE_CONSTANTS == PYTHON_VALUES


def test_what_the_c_packer_leaves_to_python_is_past_the_models_limits() -> None:
    packer = c_module("ringtrace.wire._packer")
    assert (packer.MAX_ARG_ITEMS, packer.MAX_ARG_TEXT) == (MAX_ARG_ITEMS, MAX_ARG_TEXT)
