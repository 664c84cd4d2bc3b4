"""One row of the option table (``Option``): a setting's configuration field(s), its flag and variable, how its text
is read, its default and bounds, and how ``--help`` and the docs show its default."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Option"]


@dataclass(frozen=True)
class Option:
    """One setting: its configuration field(s), its flag and variable, how its text is read, its default and bounds.

    ``help`` says what it means; ``--help`` adds the default (``(default X)``, or ``(default: none_means)`` where
    the default is None and means something), and so does the docs' table.
    """

    #: The ``CollectorConfig`` field it sets (named in refusals), unless ``fields`` says otherwise.
    name: str
    help: str
    default: Any = None
    #: None: no flag (set in ``CollectorConfig`` only).
    flag: str | None = None
    #: The flag's text to a value (raising ConfigError or ValueError); None: the text itself.
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    #: Inclusive bounds, checked by the configuration (so that code that makes one directly is held to them too).
    range: tuple[float, float] | None = None
    #: A further check of the value, ``check(value, name)``, raising ConfigError.
    check: Callable[[Any, str], object] | None = None
    #: What None means, for ``--help`` and the docs.
    none_means: str = ""
    #: ``bytes``: a size, its default shown as such (256MiB).
    unit: str = ""
    #: A flag that takes no value; its variable is 1, true or yes (set), or 0, false, no or empty (not set).
    switch: bool = False
    #: Kept out of the configuration's repr.
    secret: bool = False
    #: The fields its value sets, when not the one of its name: the parts of a pair (``--tcp``: host, port), or none
    #: (a setting of the command itself, as ``--log-level``).
    fields: tuple[str, ...] | None = None
    #: The flag's value to the setting's, when the configuration is made (``--token-file``: the token it holds).
    load: Callable[[Any, Mapping[str, str]], Any] | None = None
    #: Said of the environment in the docs, besides the variable.
    environment_note: str = ""

    @property
    def sets(self) -> tuple[str, ...]:
        """The configuration fields it sets."""
        return (self.name,) if self.fields is None else self.fields

    @property
    def dest(self) -> str:
        """Its attribute in the parsed arguments."""
        assert self.flag is not None
        return self.flag[2:].replace("-", "_")

    @property
    def environment(self) -> str:
        """Its environment variable: ``--max-frame-size`` is ``RINGTRACE_MAX_FRAME_SIZE``."""
        assert self.flag is not None
        return "RINGTRACE_" + self.flag[2:].upper().replace("-", "_")

    @property
    def shown_default(self) -> str:
        """The default as ``--help`` and the docs show it ("" where they say none)."""
        if self.default is None:
            return self.none_means
        if self.switch:
            return ""
        if isinstance(self.default, tuple):
            host, port = self.default
            return f"{host}:{port}"
        return _size_text(self.default) if self.unit == "bytes" else str(self.default)

    @property
    def help_text(self) -> str:
        """Its ``--help`` line."""
        shown = self.shown_default
        if not shown:
            return self.help
        return f"{self.help} (default{':' if self.default is None else ''} {shown})"


def _size_text(size: int) -> str:
    """``268435456`` as ``256MiB``: in the largest binary unit that divides it."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)
