"""The wire protocol's numbers the C accelerator is compiled with (``client/speedups/wire_constants.h``, exposed as
``WIRE_CONSTANTS``) are the Python definitions': change either side and this fails.

Checked in every run where the accelerator is built, the pure-Python one too: the module is imported for its
constants, not used.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest
from ringtrace.wire.frames import EVENT_COLUMNS, EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.model import MAX_ARG_ITEMS, MAX_ARG_TEXT, RECORD_FIELDS

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
}


def c_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not built here")


def test_a_record_is_its_events_columns() -> None:
    assert len(EVENT_COLUMNS) == RECORD_FIELDS


def test_the_recorder_and_packers_are_compiled_with_the_python_wire_constants() -> None:
    speedups = c_module("ringtrace.client._speedups")
    assert speedups.WIRE_CONSTANTS == PYTHON_VALUES
    assert (speedups.MAX_ARG_ITEMS, speedups.MAX_ARG_TEXT) == (MAX_ARG_ITEMS, MAX_ARG_TEXT)
