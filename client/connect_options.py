"""Every option of ``connect()`` (and of ``StreamerOptions``), declared once: one row (``ClientOption``) per option in
``OPTIONS``.

From the table come:

- ``StreamerOptions``' defaults and the check of each value (``options.py``: ``declared``, ``checked_options``), each
  refusal naming the option, what it takes and the value given;
- the environment variables the client reads (``ENVIRONMENT``: the token's, shared with the collector);
- the options table of the docs (``options_markdown``), which a test holds to ``docs/client.md``.

A new option is one row here and one typed field in ``StreamerOptions`` (the field takes its default from the row).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.wire.doc_blocks import marked_block, with_marked_block
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.frame_types import DEFAULT_MAX_FRAME_BYTES, MAX_MAX_FRAME_BYTES, MIN_MAX_FRAME_BYTES
from ringtrace.wire.parsing import (
    TOKEN_FILE_VARIABLE,
    TOKEN_VARIABLE,
    check_token,
    parse_size,
    read_token_file,
    strip_newline,
)

__all__ = [
    "ENVIRONMENT",
    "OPTIONS",
    "OPTIONS_END",
    "OPTIONS_START",
    "ClientOption",
    "checked_options",
    "option_named",
    "options_block",
    "options_markdown",
    "with_options_markdown",
]

#: The markers of the options table in the docs (``with_options_markdown`` writes between them).
OPTIONS_START: Final = "<!-- options:start -->"
OPTIONS_END: Final = "<!-- options:end -->"


# -- the checks of a value, by kind ------------------------------------------------------------------------------------
# Each takes the row and the value given, and returns the value kept (a size text as its bytes, a token as sent).


def _text_or_none(option: ClientOption, value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"option {option.name} must be a str or None, got {type(value).__name__} {value!r}")
    return value


def _seconds(option: ClientOption, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"option {option.name} must be a number of seconds, got {type(value).__name__} {value!r}")
    low = option.low
    if not (value >= low if option.low_inclusive else value > low) or math.isnan(value) or math.isinf(value):
        bound = ">=" if option.low_inclusive else ">"
        raise ConfigError(f"option {option.name} must be a finite number {bound} {low:g}, got {value!r}")
    return value


def _count(option: ClientOption, value: Any) -> Any:
    if option.unit == "bytes" and isinstance(value, str):
        try:
            value = parse_size(value)
        except ConfigError as exc:
            raise ConfigError(f"option {option.name}: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"option {option.name} must be an int, got {type(value).__name__} {value!r}")
    if value < option.low:
        raise ConfigError(f"option {option.name} must be >= {int(option.low)}, got {value!r}")
    if option.high is not None and value > option.high:
        raise ConfigError(
            f"option {option.name} must be <= {option.high} ({_size_text(option.high, ' ')}), got {value}"
        )
    return value


def _switch(option: ClientOption, value: Any) -> Any:
    if not isinstance(value, bool):
        raise ConfigError(f"option {option.name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def _token(option: ClientOption, value: Any) -> Any:
    """As ``open("token").read()`` gives it, say: one trailing newline ignored."""
    if value is None:
        return None
    return check_token(strip_newline(value) if isinstance(value, str) else value, f"option {option.name}")


def _path_or_none(option: ClientOption, value: Any) -> Any:
    if value is not None and not isinstance(value, str | os.PathLike):
        raise ConfigError(f"option {option.name} must be a path, got {type(value).__name__}")
    return value


def _tls(option: ClientOption, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    ssl = sys.modules.get("ssl")  # an SSLContext comes with ssl imported: ssl is for TLS only
    if ssl is None or not isinstance(value, ssl.SSLContext):
        raise ConfigError(f"option {option.name} must be a bool or an ssl.SSLContext, got {type(value).__name__}")
    if value.protocol == ssl.PROTOCOL_TLS_SERVER:
        raise ConfigError(
            f"option {option.name} must be a client context (ssl.create_default_context()), got a server one"
        )
    return value


#: Each kind of value: its check, and what the docs say it takes.
_KINDS: Final[dict[str, tuple[Callable[[ClientOption, Any], Any], str]]] = {
    "text": (_text_or_none, "a str or None"),
    "seconds": (_seconds, "seconds"),
    "count": (_count, "an int"),
    "switch": (_switch, "a bool"),
    "token": (_token, "a str"),
    "path": (_path_or_none, "a path"),
    "tls": (_tls, "a bool or an ssl.SSLContext"),
}


@dataclass(frozen=True)
class ClientOption:
    """One option: its ``StreamerOptions`` field, what it means, its default, the kind of value it takes and its
    bounds, and the environment variable that sets it, if any."""

    #: The ``StreamerOptions`` field, and the keyword of ``connect()``.
    name: str
    help: str
    default: Any
    #: A key of ``_KINDS``: how a value is checked.
    kind: str
    #: The lowest value (with ``low_inclusive``, the bound itself is taken); the highest, if any.
    low: float = 0
    low_inclusive: bool = True
    high: int | None = None
    #: ``bytes``: a size, which also takes a text such as ``"16MiB"``, and whose default is shown as such.
    unit: str = ""
    #: Read when the option is not given (see ``checked_options``).
    environment: str | None = None
    #: Kept out of the options' repr.
    secret: bool = False

    def checked(self, value: Any) -> Any:
        """``value``, held to this row (a size text read as its bytes).

        Raises:
            ConfigError: refused; the message names the option, what it takes and the value (never a token's).
        """
        return _KINDS[self.kind][0](self, value)

    @property
    def takes(self) -> str:
        """What the docs say it takes: the kind and the bounds."""
        takes = "a size" if self.unit == "bytes" else _KINDS[self.kind][1]
        if self.kind == "seconds":
            takes += f" {'>=' if self.low_inclusive else '>'} {self.low:g}"
        elif self.kind == "count":
            low = _size_text(int(self.low)) if self.unit == "bytes" else str(int(self.low))
            takes += f", {low} to {_size_text(self.high)}" if self.high is not None else f" >= {low}"
        return takes

    @property
    def shown_default(self) -> str:
        """The default as the docs show it."""
        if self.default is None:
            return "none"
        return _size_text(self.default) if self.unit == "bytes" else str(self.default)


def _size_text(size: int, space: str = "") -> str:
    """``16777216`` as ``16MiB``: in the largest binary unit that divides it."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size % factor == 0:
            return f"{size // factor}{space}{unit}"
    return str(size)


# -- the table ---------------------------------------------------------------------------------------------------------
# In the order of StreamerOptions' fields. Texts say what an option does, not how fast.

OPTIONS: Final[tuple[ClientOption, ...]] = (
    ClientOption(
        "process_name",
        "shown for this process in traces (connect() takes it as an argument of its own; see Processes)",
        None,
        "text",
    ),
    ClientOption(
        "batch_interval_s",
        "how often the flusher hands recorded events to listeners",
        0.05,
        "seconds",
        low_inclusive=False,
    ),
    ClientOption(
        "max_queue_bytes",
        "encoded events waiting to be sent; what does not fit is dropped and counted",
        16 * 1024 * 1024,
        "count",
        low=1,
        unit="bytes",
    ),
    ClientOption(
        "max_frame_bytes",
        "largest frame sent (a collector's smaller --max-frame-size wins once it answers)",
        DEFAULT_MAX_FRAME_BYTES,
        "count",
        low=MIN_MAX_FRAME_BYTES,
        high=MAX_MAX_FRAME_BYTES,
        unit="bytes",
    ),
    ClientOption("max_events_per_frame", "events in one EVENTS frame, at most", 8192, "count", low=1),
    ClientOption(
        "max_strings",
        "strings of the stream's string table (a collector's smaller limit wins once it answers)",
        100_000,
        "count",
        low=2,
    ),
    ClientOption(
        "connect_timeout_s",
        "how long a connection attempt (and its TLS handshake) may take",
        1.0,
        "seconds",
        low_inclusive=False,
    ),
    ClientOption(
        "backoff_initial_s",
        "the wait after the first failed connection attempt; each failure doubles it",
        0.1,
        "seconds",
        low_inclusive=False,
    ),
    ClientOption(
        "backoff_max_s",
        "reconnect attempts are at most this far apart, so data flows again soon after a collector restarts",
        1.0,
        "seconds",
        low_inclusive=False,
    ),
    ClientOption(
        "exit_timeout_s",
        "how long the exit of the interpreter (or of a multiprocessing child) waits for delivery",
        2.0,
        "seconds",
    ),
    ClientOption(
        "heartbeat_s",
        "with nothing else to send for this long, a heartbeat tells the collector the connection is alive "
        "(collectors close connections idle past their --idle-timeout)",
        15.0,
        "seconds",
        low_inclusive=False,
    ),
    ClientOption(
        "deliver_on_sigterm",
        "in a multiprocessing child, deliver before SIGTERM ends it (Pool.terminate())",
        True,
        "switch",
    ),
    ClientOption(
        "token",
        "the collector's token, sent in HELLO (one trailing newline ignored); never logged nor shown in the repr",
        None,
        "token",
        environment=TOKEN_VARIABLE,
        secret=True,
    ),
    ClientOption(
        "token_file",
        "a file that holds the collector's token (instead of token); its variable wins over the token's",
        None,
        "path",
        environment=TOKEN_FILE_VARIABLE,
        secret=True,
    ),
    ClientOption(
        "tls",
        "TLS to the collector: True checks its certificate against the system's CAs; an ssl.SSLContext trusts what "
        "it is told to",
        False,
        "tls",
    ),
)

_BY_NAME: Final = {option.name: option for option in OPTIONS}
#: Each option's environment variable, where it has one.
ENVIRONMENT: Final = {option.name: option.environment for option in OPTIONS if option.environment is not None}


def option_named(name: str) -> ClientOption:
    """The row of the option ``name``."""
    return _BY_NAME[name]


# -- the checks --------------------------------------------------------------------------------------------------------


def checked_options(given: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The options ``given`` (every row's, by name), each held to its row, then to the others; the token read from
    ``token_file`` or, where neither token nor file is given, from the environment (``environ``, by default the
    process's).

    Raises:
        ConfigError: a value refused; the message names the option, what it takes and the value (never a token's).
    """
    values = {option.name: option.checked(given[option.name]) for option in OPTIONS}
    if values["token"] is not None and values["token_file"] is not None:
        raise ConfigError("give option token or option token_file, not both")
    if values["backoff_initial_s"] > values["backoff_max_s"]:
        raise ConfigError(
            f"option backoff_initial_s ({values['backoff_initial_s']!r}) must not exceed backoff_max_s "
            f"({values['backoff_max_s']!r})"
        )
    if values["token_file"] is not None:
        values["token"] = read_token_file(os.fspath(values["token_file"]), "option token_file")
    elif values["token"] is None:
        values["token"] = _environment_token(os.environ if environ is None else environ)
    return values


def _environment_token(environ: Mapping[str, str]) -> str | None:
    """The token in the file the token file's variable names, else in the token's variable (one trailing newline
    ignored either way), or None if neither is set (an empty variable is not set)."""
    path = environ.get(option_named("token_file").environment or "")
    if path:
        return read_token_file(path, f"environment variable {option_named('token_file').environment}")
    value = environ.get(option_named("token").environment or "")
    if not value:
        return None
    return check_token(strip_newline(value), f"environment variable {option_named('token').environment}")


# -- the docs ----------------------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def options_markdown() -> str:
    """The docs' options table (Markdown, ``Option | Takes | Default | Environment | Meaning``), one line an option."""
    lines = ["| Option | Takes | Default | Environment | Meaning |", "|---|---|---|---|---|"]
    for option in OPTIONS:
        environment = f"`{option.environment}`" if option.environment else ""
        cells = (f"`{option.name}`", option.takes, option.shown_default, environment, option.help)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def options_block(text: str) -> str | None:
    """What ``text`` holds between ``OPTIONS_START`` and ``OPTIONS_END`` (None: no such block), without the blank lines
    around it."""
    return marked_block(text, OPTIONS_START, OPTIONS_END)


def with_options_markdown(text: str) -> str:
    """``text`` (a docs page) with ``options_markdown()`` between its markers.

    Raises:
        ValueError: ``text`` has no ``OPTIONS_START`` ... ``OPTIONS_END`` block.
    """
    return with_marked_block(text, OPTIONS_START, OPTIONS_END, options_markdown())
