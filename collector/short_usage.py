"""The parser of ``ringtrace-collector`` and of the ``ringtrace`` subcommands: a refused argument is said in two
lines, the command's usage in one (its positionals, the options as ``[options]``) and the error naming the flag and
the value, with where the rest is said (``--help``). argparse's own prints the usage of every flag first: the
collector's is three dozen lines, and the one that matters came last."""

from __future__ import annotations

import argparse
import difflib
import typing

__all__ = ["ShortUsageParser"]

_UNRECOGNIZED = "unrecognized arguments: "


class ShortUsageParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose refusals are short (its subcommands' parsers are of this class too)."""

    def error(self, message: str) -> typing.NoReturn:
        where = f"{self._suggestion(message)}see {self.prog} --help"
        self.exit(2, f"{self.short_usage()}\n{self.prog}: error: {message} ({where})\n")

    def short_usage(self) -> str:
        """``usage: PROG [options] POSITIONALS``, in one line however many flags there are."""
        formatter = self._get_formatter()
        positionals = [
            formatter._format_args(action, action.dest.upper())
            for action in self._get_positional_actions()
            if action.help is not argparse.SUPPRESS
        ]
        return " ".join(["usage:", self.prog, "[options]", *positionals])

    def _suggestion(self, message: str) -> str:
        """``did you mean --capacity? `` for a mistyped flag (``--capacty``), when one is close."""
        if not message.startswith(_UNRECOGNIZED):
            return ""
        known = [flag for action in self._actions for flag in action.option_strings if flag.startswith("--")]
        guesses = []
        for token in message.removeprefix(_UNRECOGNIZED).split():
            flag = token.partition("=")[0]
            if flag.startswith("--") and flag not in known:
                guesses += difflib.get_close_matches(flag, known, n=1)
        return f"did you mean {', '.join(guesses)}? " if guesses else ""
