"""The option table by configuration field: each field's row, its default, and the check of a value against the row
(what ``CollectorConfig`` takes from the table, ``config.py``)."""

from __future__ import annotations

from typing import Any, Final

from ringtrace.collector.service.option_row import Option
from ringtrace.collector.service.option_table import OPTIONS
from ringtrace.wire.errors import ConfigError

__all__ = ["check_setting", "field_default", "option_of"]

#: Each configuration field's row, and its place in the row's value (None: the whole value).
_BY_FIELD: Final = {
    field: (option, None if option.fields is None else i) for option in OPTIONS for i, field in enumerate(option.sets)
}


def option_of(field: str) -> Option:
    """The row that sets the configuration field ``field``."""
    return _BY_FIELD[field][0]


def field_default(field: str) -> Any:
    """The default of the configuration field ``field``, from its row."""
    option, part = _BY_FIELD[field]
    return option.default if part is None else option.default[part]


def check_setting(field: str, value: Any) -> None:
    """Hold ``value`` of the configuration field ``field`` to its row: range, choices, check.

    Raises:
        ConfigError: refused; the message names the field, its flag and the value (a secret's check never shows it).
    """
    option, part = _BY_FIELD[field]
    if part is not None or (value is None and option.default is None):
        return  # (a pair's parts were checked as they were parsed; None where None is the default)
    named = f"{field} ({option.flag})" if option.flag else field
    if option.range is not None:
        low, high = option.range
        if not low <= value <= high:  # also refuses nan
            raise ConfigError(f"{named} must be between {low} and {high}, got {value}")
    if option.choices is not None and value not in option.choices:
        raise ConfigError(f"{named} must be {', '.join(option.choices)}, got {value!r}")
    if option.check is not None:
        option.check(value, field)
