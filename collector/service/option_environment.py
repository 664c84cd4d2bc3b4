"""What the environment sets: each flag of the option table has a variable, ``RINGTRACE_`` and the flag's name in
capitals, ``-`` as ``_`` (``ENVIRONMENT``); ``environment_args`` makes the flags they set, each value checked as the
flag's would be."""

from __future__ import annotations

import argparse
import typing
from collections.abc import Mapping, Sequence
from typing import Final

from ringtrace.collector.service.option_flags import FLAGGED, add_arguments
from ringtrace.collector.short_usage import ShortUsageParser

__all__ = ["ENVIRONMENT", "NOT_SET_VALUES", "SET_VALUES", "environment_args"]

#: Each flag's environment variable.
ENVIRONMENT: Final = {option.flag: option.environment for option in FLAGGED if option.flag is not None}
#: Values of a switch's variable.
SET_VALUES: Final = ("1", "true", "yes", "on")
NOT_SET_VALUES: Final = ("0", "false", "no", "off", "")


class _EnvironmentError(Exception):
    pass


class _Checker(argparse.ArgumentParser):
    """The same flags, for one variable's value at a time: an error is raised, to be reported under its name."""

    def error(self, message: str) -> typing.NoReturn:
        raise _EnvironmentError(message.split(": ", 1)[-1])


def _parser(prog: str, parser_class: type[argparse.ArgumentParser] = ShortUsageParser) -> argparse.ArgumentParser:
    """The flags alone (no description): for checking a variable's value, and for refusing one with the usage."""
    parser = parser_class(prog=prog, allow_abbrev=False)
    add_arguments(parser)
    return parser


def environment_args(
    environ: Mapping[str, str], argv: Sequence[str] = (), prog: str = "ringtrace-collector"
) -> list[str]:
    """The flags the environment sets and ``argv`` (the command line) does not, as command-line arguments. An empty
    variable is unset.

    Raises:
        SystemExit: a variable's value is refused (the message names the variable), as for a bad flag.
    """
    args: list[str] = []
    checker = _parser(prog, _Checker)
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
    for option in FLAGGED:
        flag, name = option.flag, option.environment
        assert flag is not None
        value = environ.get(name)
        if not value or flag in given:
            continue
        if option.switch:
            if value.strip().lower() in SET_VALUES:
                args.append(flag)
            elif value.strip().lower() not in NOT_SET_VALUES:
                accepted = f"{', '.join(SET_VALUES)} or {', '.join(v for v in NOT_SET_VALUES if v)}, in any case"
                _parser(prog).error(f"environment variable {name}={value!r}: must be one of {accepted}")
            continue
        try:
            checker.parse_args([flag, value])
        except _EnvironmentError as exc:
            _parser(prog).error(f"environment variable {name}={value!r}: {exc}")
        args += [flag, value]
    return args
