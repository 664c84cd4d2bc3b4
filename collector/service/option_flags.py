"""The command line the option table makes: a flag for each row that has one (``add_arguments``, in the table's order),
and the configuration fields the parsed flags set (``settings_from_args``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any, Final

from ringtrace.collector.service.option_table import OPTIONS
from ringtrace.wire.errors import ConfigError

__all__ = ["FLAGGED", "add_arguments", "settings_from_args"]

#: The rows that have a flag, in the order of ``--help``.
FLAGGED: Final = tuple(option for option in OPTIONS if option.flag is not None)


def _argument_type(parse: Callable[[str], Any], flag: str) -> Callable[[str], Any]:
    """``parse`` for argparse: a ConfigError becomes its usage error (a ValueError is argparse's "invalid value"),
    less the flag its message may begin with (argparse's begins with it: "argument --flag: ")."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag}: ")) from None

    convert.__name__ = parse.__name__  # ("invalid int value")
    return convert


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """A flag for each row that has one, in the table's order."""
    for option in FLAGGED:
        assert option.flag is not None
        help_text = option.help_text.replace("%", "%%")
        if option.switch:
            parser.add_argument(option.flag, action="store_true", help=help_text)
            continue
        parser.add_argument(
            option.flag,
            type=_argument_type(option.parse or str, option.flag),
            default=option.default,
            choices=option.choices,
            metavar=option.metavar,
            help=help_text,
        )


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any]:
    """The configuration fields the parsed flags set, by name (a token file read now).

    Raises:
        ConfigError: a flag's value cannot be loaded (a token file that cannot be read, say).
    """
    settings: dict[str, Any] = {}
    for option in FLAGGED:
        value = getattr(args, option.dest)
        if option.load is not None:
            value = option.load(value, environ)
        if option.fields is None:
            settings[option.name] = value
        elif option.fields:
            settings.update(zip(option.fields, value, strict=True))
    return settings
