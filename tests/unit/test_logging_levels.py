"""The logging integration's map from logging levels to ringtrace's nine priorities (importing it installs nothing)."""

from __future__ import annotations

import logging

import pytest
from ringtrace.client.integrations.logging_records import priority_of_level
from ringtrace.wire.message_format import PRIORITIES


@pytest.mark.parametrize(
    ("level", "priority"),
    [
        (logging.CRITICAL, "fatal"),
        (100, "fatal"),
        (logging.ERROR, "error"),
        (45, "error"),
        (logging.WARNING, "warning"),
        (25, "info"),  # NOTICE, SUCCESS
        (logging.INFO, "info"),
        (15, "debug"),  # VERBOSE
        (logging.DEBUG, "debug"),
        (9, "trace"),
        (5, "trace"),  # TRACE
        (4, "trace+"),
        (3, "trace+"),
        (2, "trace++"),
        (1, "trace+++"),
        (logging.NOTSET, "trace+++"),
        (-5, "trace+++"),
    ],
)
def test_a_level_takes_the_priority_of_the_standard_level_at_or_below_it(level: int, priority: str) -> None:
    assert priority_of_level(level) == priority


def test_every_priority_is_some_level_s_and_importing_the_integration_patched_nothing() -> None:
    assert {priority_of_level(level) for level in range(-1, 60)} == set(PRIORITIES)
    assert logging.Logger.isEnabledFor.__module__ == "logging"
