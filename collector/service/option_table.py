"""Every setting of the collector, declared once: one row (``Option``) per setting in ``OPTIONS``.

From the table come:

- ``CollectorConfig``'s defaults and the check of each value (``config.py``: ``declared``, ``check_setting``);
- the command line's flags (``add_arguments``) and the settings they make (``settings_from_args``);
- what the environment sets: each flag's variable is ``RINGTRACE_`` and the flag's name in capitals, ``-`` as ``_``
  (``ENVIRONMENT``, ``environment_args``);
- the flag table of the docs (``flags_markdown``), which a test holds to the docs.

A new setting is one row here and one typed field in ``CollectorConfig`` (the field takes its default from the row).
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Policy
from ringtrace.collector.store.segments import FSYNC_POLICIES
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.frames import DEFAULT_MAX_FRAME_BYTES, MAX_MAX_FRAME_BYTES, MIN_MAX_FRAME_BYTES
from ringtrace.wire.parsing import check_token, environment_token, parse_address, parse_size, read_token_file

__all__ = [
    "ENVIRONMENT",
    "FLAGS_END",
    "FLAGS_START",
    "OPTIONS",
    "Option",
    "add_arguments",
    "check_setting",
    "environment_args",
    "field_default",
    "flags_block",
    "flags_markdown",
    "option_of",
    "parse_listen_address",
    "settings_from_args",
    "with_flags_markdown",
]

#: The markers of the flag table in the docs (``with_flags_markdown`` writes between them).
FLAGS_START: Final = "<!-- flags:start -->"
FLAGS_END: Final = "<!-- flags:end -->"
#: What the wire protocol's WELCOME carries a count in.
_U32: Final = 2**32 - 1


def parse_listen_address(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` to listen on; port 0 picks a free one."""
    address: tuple[str, int] = parse_address(text, listen=True)
    return address


def _token(token_file: str | None, environ: Mapping[str, str]) -> str | None:
    """The token in ``--token-file``, else in the environment (``RINGTRACE_TOKEN_FILE``, ``RINGTRACE_TOKEN``)."""
    return read_token_file(token_file) if token_file is not None else environment_token(environ)


def parse_nats_urls(text: str) -> tuple[str, ...]:
    """``"nats://h1:4222,nats://h2:4222"`` (``nats://`` or ``tls://``; a bare ``HOST:PORT`` is ``nats://``)."""
    urls = []
    for part in text.split(","):
        url = part.strip()
        if not url:
            continue
        if "://" not in url:
            url = "nats://" + url
        scheme = url.split("://", 1)[0]
        if scheme not in ("nats", "tls"):
            raise ConfigError(f"--jetstream: {url!r} is not a nats:// or tls:// URL")
        urls.append(url)
    if not urls:
        raise ConfigError(f"--jetstream: {text!r} names no server (give nats://HOST:PORT[,nats://HOST:PORT...])")
    return tuple(urls)


def check_stream_name(name: str, what: str) -> None:
    """A JetStream stream name that is also a subject token (the stream's subjects begin with it)."""
    if not name or any(not (c.isascii() and (c.isalnum() or c in "_-")) for c in name):
        raise ConfigError(
            f"--jetstream-stream: {name!r} must be letters, digits, '_' and '-' (a stream name and subject token)"
        )


def _jetstream_token(token_file: str | None, environ: Mapping[str, str]) -> str | None:
    """The NATS token in ``--jetstream-token-file``."""
    return read_token_file(token_file, "--jetstream-token-file") if token_file is not None else None


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


# -- the table ---------------------------------------------------------------------------------------------------------
# In the order of --help. Texts say what a setting does, not how fast (benchmark figures belong to benchmarks/).

OPTIONS: Final[tuple[Option, ...]] = (
    Option(
        "tcp",
        "ingest listener",
        ("127.0.0.1", 7700),
        flag="--tcp",
        parse=parse_listen_address,
        metavar="HOST:PORT",
        fields=("tcp_host", "tcp_port"),
    ),
    Option(
        "http",
        "HTTP listener",
        ("127.0.0.1", 7701),
        flag="--http",
        parse=parse_listen_address,
        metavar="HOST:PORT",
        fields=("http_host", "http_port"),
    ),
    Option(
        "otlp_http",
        "OTLP/HTTP listener (/v1/traces, /v1/logs and /v1/metrics from OpenTelemetry SDKs and collectors; 4318 is "
        "the usual port), with the token and TLS of the others",
        None,
        flag="--otlp-http",
        parse=parse_listen_address,
        metavar="HOST:PORT",
        none_means="off",
    ),
    Option(
        "otlp_grpc",
        "OTLP/gRPC listener (TraceService, LogsService and MetricsService, what several SDKs and the OpenTelemetry "
        "Collector send by default; 4317 is the usual port; needs the grpc extra), with the token and TLS of the "
        "others",
        None,
        flag="--otlp-grpc",
        parse=parse_listen_address,
        metavar="HOST:PORT",
        none_means="off",
    ),
    Option(
        "otlp_max_body_bytes",
        "largest OTLP request body, compressed or inflated (a larger one gets a 413, or RESOURCE_EXHAUSTED over gRPC)",
        8 * 1024 * 1024,
        flag="--otlp-max-body",
        parse=parse_size,
        metavar="SIZE",
        range=(64 * 1024, 2**30),
        unit="bytes",
    ),
    Option(
        "otlp_max_connections",
        "OTLP/HTTP connections open at once, apart from the HTTP API's; more are answered 503 with Retry-After and "
        "closed at once",
        1024,
        flag="--otlp-max-connections",
        parse=int,
        metavar="N",
        range=(1, 2**20),
    ),
    Option(
        "otlp_max_processes",
        "OTLP resources (processes) with a stream open at once, apart from --max-connections; an idle one's stream is "
        "closed for a new one, and a request whose new resources do not fit gets a 503 with Retry-After",
        1024,
        flag="--otlp-max-processes",
        parse=int,
        metavar="N",
        range=(1, 2**20),
    ),
    Option(
        "capacity_bytes",
        "memory for stored events, e.g. 64MB, 1GiB, 1048576",
        256 * 1024 * 1024,
        flag="--capacity",
        parse=parse_size,
        metavar="SIZE",
        unit="bytes",
    ),
    Option(
        "process_capacity_bytes",
        "most one process may hold, so that a noisy one overwrites its own past, not everyone's",
        None,
        flag="--process-capacity",
        parse=parse_size,
        metavar="SIZE",
        none_means="the whole capacity",
        unit="bytes",
    ),
    Option(
        "policy",
        "when full: ring overwrites the oldest, discard refuses the newest and keeps the beginning",
        "ring",
        flag="--policy",
        parse=str.lower,  # RING as well as ring
        choices=typing.get_args(Policy),
    ),
    Option(
        "data_dir",
        "keep segments as files in DIR (created if missing) and recover them on start; without it everything stays "
        "in memory",
        None,
        flag="--data-dir",
        metavar="DIR",
    ),
    Option(
        "fsync",
        "with --data-dir, what survives a power loss (a crash of the collector loses nothing acknowledged whatever it "
        "is): never leaves writing back to the OS, interval syncs every second in the background, flush syncs before "
        "acknowledging each client flush, always after every batch received; each that syncs makes ingest as slow as "
        "the disk",
        "never",
        flag="--fsync",
        parse=str.lower,
        choices=FSYNC_POLICIES,
    ),
    Option(
        "max_age_s",
        "remove events this long after their segment was sealed (a segment is sealed at most a quarter of this after "
        "it opened), counted overwritten; with --jetstream, the stream's max_age",
        None,
        flag="--max-age",
        parse=float,
        metavar="SECONDS",
        range=(1.0, 1e10),
        none_means="no limit",
    ),
    Option(
        "jetstream",
        "store in a NATS JetStream stream on the cluster at these comma-separated URLs (nats://h1:4222,...) instead "
        "of memory or --data-dir: every collector on the stream serves every process's events; --capacity is the "
        "stream's max_bytes, --policy its discard (ring: old, discard: new)",
        None,
        flag="--jetstream",
        parse=parse_nats_urls,
        metavar="URLS",
        none_means="off",
    ),
    Option(
        "jetstream_stream",
        "with --jetstream, the stream's name (created if missing, updated to these settings if not); its subjects "
        "are NAME.HOST.PID.INSTANCE",
        "ringtrace",
        flag="--jetstream-stream",
        metavar="NAME",
        check=check_stream_name,
    ),
    Option(
        "jetstream_replicas",
        "with --jetstream, the copies of each message the cluster keeps (a FLUSH is acknowledged once they are)",
        3,
        flag="--jetstream-replicas",
        parse=int,
        metavar="N",
        range=(1, 5),
    ),
    Option(
        "jetstream_storage",
        "with --jetstream, where the servers keep the stream",
        "file",
        flag="--jetstream-storage",
        parse=str.lower,
        choices=("file", "memory"),
    ),
    Option(
        "jetstream_buffer_bytes",
        "with --jetstream, memory for segments the stream has not acknowledged yet; when it is full (the cluster "
        "cannot be reached), new events are refused and counted discarded",
        64 * 1024 * 1024,
        flag="--jetstream-buffer",
        parse=parse_size,
        metavar="SIZE",
        range=(1024 * 1024, 2**40),
        unit="bytes",
    ),
    Option(
        "jetstream_creds",
        "with --jetstream, a NATS credentials file (user JWT and NKey seed)",
        None,
        flag="--jetstream-creds",
        metavar="FILE",
    ),
    Option(
        "jetstream_token",
        "with --jetstream, the NATS token in FILE (one trailing newline ignored)",
        None,
        flag="--jetstream-token-file",
        metavar="FILE",
        secret=True,
        load=_jetstream_token,
    ),
    Option(
        "jetstream_tls_ca",
        "with --jetstream, speak TLS to the servers, trusting the CA certificates (PEM) in FILE",
        None,
        flag="--jetstream-tls-ca",
        metavar="FILE",
    ),
    Option(
        "jetstream_tls_cert",
        "with --jetstream, the client certificate chain (PEM) to show the servers (with --jetstream-tls-key)",
        None,
        flag="--jetstream-tls-cert",
        metavar="FILE",
    ),
    Option(
        "jetstream_tls_key",
        "the private key of --jetstream-tls-cert (PEM)",
        None,
        flag="--jetstream-tls-key",
        metavar="FILE",
    ),
    Option(
        "segment_bytes",
        "the size a stream's segments grow to (larger ones only when a frame and its session frames need it)",
        None,
        range=(MIN_SEGMENT_BYTES, 2**40),
        none_means="an eighth of the capacity (or of the process capacity, if smaller), between 64 KiB and 4 MiB",
        unit="bytes",
    ),
    Option(
        "forget_after_s",
        "forget a process this long after its last connection ended, once nothing of it is stored; its counts stay "
        "in the totals",
        60.0,
        flag="--forget-after",
        parse=float,
        metavar="SECONDS",
        range=(0, 1e9),
    ),
    Option(
        "max_frame_bytes",
        "largest frame a client may send (at most 256KiB with --jetstream; clients adopt it)",
        DEFAULT_MAX_FRAME_BYTES,
        flag="--max-frame-size",
        parse=parse_size,
        metavar="SIZE",
        range=(MIN_MAX_FRAME_BYTES, MAX_MAX_FRAME_BYTES),
        unit="bytes",
    ),
    Option(
        "max_connections",
        "client connections open at once; more are refused with a GOODBYE that says why, and counted",
        1024,
        flag="--max-connections",
        parse=int,
        metavar="N",
        range=(1, 2**31),
    ),
    Option(
        "max_connections_per_address",
        "connections one peer address may hold; loopback peers are not counted per address",
        None,
        flag="--max-connections-per-address",
        parse=int,
        metavar="N",
        range=(1, 2**31),
        none_means="half of --max-connections",
    ),
    Option(
        "max_snapshots",
        "snapshots served at once, each pinning what it reads; more get a 503 with Retry-After",
        4,
        flag="--max-snapshots",
        parse=int,
        metavar="N",
        range=(1, 1024),
    ),
    Option(
        "http_timeout_s",
        "close an HTTP connection that has not begun a request (its headers complete) this long after it opened or "
        "after its previous request, or that takes nothing of a response (a snapshot, a live tail) for as long; end an "
        "OTLP request whose body sends nothing for as long, or whose gRPC message has not all come",
        15.0,
        flag="--http-timeout",
        parse=float,
        metavar="SECONDS",
        range=(0.1, 1e6),
    ),
    Option(
        "max_http_connections",
        "HTTP API connections open at once; more are answered 503 with Retry-After and closed at once",
        256,
        flag="--max-http-connections",
        parse=int,
        metavar="N",
        range=(1, 2**20),
    ),
    Option(
        "idle_timeout_s",
        "close a connection that sent nothing for this long after its HELLO; clients send a heartbeat every 15 s",
        60.0,
        flag="--idle-timeout",
        parse=float,
        metavar="SECONDS",
        range=(1.0, 1e6),
    ),
    Option(
        "handshake_timeout_s",
        "close a connection that has not said HELLO this long after it opened; a TLS handshake must end within as long",
        10.0,
        flag="--handshake-timeout",
        parse=float,
        metavar="SECONDS",
        range=(1e-3, 1e6),
    ),
    Option(
        "snapshot_flush_timeout_s",
        "how long GET /snapshot waits for connected clients to flush, unless the query says otherwise",
        1.0,
        range=(0, 1e6),
    ),
    Option(
        "max_strings",
        "string table entries one connection may declare; clients adopt it",
        100_000,
        flag="--max-strings",
        parse=int,
        metavar="N",
        range=(2, _U32),
    ),
    Option(
        "max_string_bytes",
        "UTF-8 bytes of all the labels one connection may declare; clients adopt it",
        2 * 1024 * 1024,
        flag="--max-string-bytes",
        parse=parse_size,
        metavar="SIZE",
        range=(1024, 2**62),
        unit="bytes",
    ),
    Option(
        "max_schema_bytes",
        "UTF-8 bytes of the texts of all the event kinds one connection may declare (names, fields); clients adopt it",
        256 * 1024,
        flag="--max-schema-bytes",
        parse=parse_size,
        metavar="SIZE",
        range=(1024, 2**62),
        unit="bytes",
    ),
    Option(
        "max_tracks",
        "tracks (threads, task lanes) one connection may declare",
        10_000,
        flag="--max-tracks",
        parse=int,
        metavar="N",
        range=(2, _U32),
    ),
    Option("max_kinds", "event kinds one connection may declare", 1_000, range=(2, _U32)),
    Option(
        "token",
        "require the token in FILE (one trailing newline ignored) of every client (in HELLO) and HTTP request "
        "(Authorization: Bearer TOKEN); RINGTRACE_TOKEN may hold the token itself instead",
        None,
        flag="--token-file",
        metavar="FILE",
        check=check_token,
        secret=True,
        load=_token,
        environment_note="(or the token itself in `RINGTRACE_TOKEN`)",
    ),
    Option(
        "tls_cert", "certificate chain (PEM): both listeners speak TLS 1.2+", None, flag="--tls-cert", metavar="FILE"
    ),
    Option("tls_key", "the private key of --tls-cert (PEM)", None, flag="--tls-key", metavar="FILE"),
    Option(
        "insecure_open",
        "listen on an address other than loopback without a token (only where a firewall or a private network "
        "guards the ports)",
        False,
        flag="--insecure-open",
        switch=True,
    ),
    Option(
        "log_level",
        "the least severe messages logged",
        "INFO",
        flag="--log-level",
        parse=str.upper,  # debug as well as DEBUG
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        fields=(),
    ),
)

_FLAGGED: Final = tuple(option for option in OPTIONS if option.flag is not None)
#: Each configuration field's row, and its place in the row's value (None: the whole value).
_BY_FIELD: Final = {
    field: (option, None if option.fields is None else i) for option in OPTIONS for i, field in enumerate(option.sets)
}
#: Each flag's environment variable.
ENVIRONMENT: Final = {option.flag: option.environment for option in _FLAGGED if option.flag is not None}
#: Values of a switch's variable.
_SET, _NOT_SET = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def option_of(field: str) -> Option:
    """The row that sets the configuration field ``field``."""
    return _BY_FIELD[field][0]


def field_default(field: str) -> Any:
    """The default of the configuration field ``field``, from its row."""
    option, part = _BY_FIELD[field]
    return option.default if part is None else option.default[part]


# -- the configuration's checks ----------------------------------------------------------------------------------------


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


# -- the command line --------------------------------------------------------------------------------------------------


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
    for option in _FLAGGED:
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
    for option in _FLAGGED:
        value = getattr(args, option.dest)
        if option.load is not None:
            value = option.load(value, environ)
        if option.fields is None:
            settings[option.name] = value
        elif option.fields:
            settings.update(zip(option.fields, value, strict=True))
    return settings


# -- the environment ---------------------------------------------------------------------------------------------------


class _EnvironmentError(Exception):
    pass


class _Checker(argparse.ArgumentParser):
    """The same flags, for one variable's value at a time: an error is raised, to be reported under its name."""

    def error(self, message: str) -> typing.NoReturn:
        raise _EnvironmentError(message.split(": ", 1)[-1])


def _parser(
    prog: str, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
) -> argparse.ArgumentParser:
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
    for option in _FLAGGED:
        flag, name = option.flag, option.environment
        assert flag is not None
        value = environ.get(name)
        if not value or flag in given:
            continue
        if option.switch:
            if value.strip().lower() in _SET:
                args.append(flag)
            elif value.strip().lower() not in _NOT_SET:
                accepted = f"{', '.join(_SET)} or {', '.join(v for v in _NOT_SET if v)}, in any case"
                _parser(prog).error(f"environment variable {name}={value!r}: must be one of {accepted}")
            continue
        try:
            checker.parse_args([flag, value])
        except _EnvironmentError as exc:
            _parser(prog).error(f"environment variable {name}={value!r}: {exc}")
        args += [flag, value]
    return args


# -- the docs ----------------------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _flag_cell(option: Option) -> str:
    if option.switch:
        return f"`{option.flag}`"
    if option.choices is not None:
        return f"`{option.flag} {{{','.join(option.choices)}}}`"
    return f"`{option.flag} {option.metavar or 'VALUE'}`"


def _environment_cell(option: Option) -> str:
    cell = f"`{option.environment}`"
    if option.switch:
        cell += f" ({'; '.join(', '.join(f'`{v}`' for v in values if v) for values in (_SET, _NOT_SET))})"
    return f"{cell} {option.environment_note}".rstrip()


def _default_cell(option: Option) -> str:
    if option.switch:
        return "off"
    return option.shown_default or "none"


def flags_markdown() -> str:
    """The docs' flag table (Markdown, ``Flag | Environment | Default | Meaning``), one line a flag, as ``--help``."""
    lines = ["| Flag | Environment | Default | Meaning |", "|---|---|---|---|"]
    for option in _FLAGGED:
        cells = (_flag_cell(option), _environment_cell(option), _default_cell(option), option.help)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def flags_block(text: str) -> str | None:
    """What ``text`` holds between ``FLAGS_START`` and ``FLAGS_END`` (None: no such block), without the blank lines
    around it."""
    start, end = text.find(FLAGS_START), text.find(FLAGS_END)
    if start < 0 or end < start:
        return None
    return text[start + len(FLAGS_START) : end].strip("\n") + "\n"


def with_flags_markdown(text: str) -> str:
    """``text`` (a docs page) with ``flags_markdown()`` between its markers.

    Raises:
        ValueError: ``text`` has no ``FLAGS_START`` ... ``FLAGS_END`` block.
    """
    if flags_block(text) is None:
        raise ValueError(f"no {FLAGS_START} ... {FLAGS_END} block")
    start, end = text.index(FLAGS_START) + len(FLAGS_START), text.index(FLAGS_END)
    return f"{text[:start]}\n{flags_markdown()}{text[end:]}"
