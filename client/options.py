"""Configuration values: the streamer's options, addresses, sizes and tokens, each checked with an error that names
it (never a token's value).

Shared by the client (``connect``) and the collector's command line, so both accept the same forms.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import re
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ringtrace.wire.errors import ConfigError
from ringtrace.wire.frames import DEFAULT_MAX_FRAME_BYTES, MAX_MAX_FRAME_BYTES, MIN_MAX_FRAME_BYTES

__all__ = [
    "MAX_TOKEN_CHARS",
    "TOKEN_FILE_VARIABLE",
    "TOKEN_VARIABLE",
    "StreamerOptions",
    "check_token",
    "environment_token",
    "parse_address",
    "parse_addresses",
    "parse_size",
    "read_token_file",
    "strip_newline",
]

#: The environment variable that holds the collector's token, for clients, the collector and the command line.
TOKEN_VARIABLE: Final = "RINGTRACE_TOKEN"
#: The environment variable that names a file holding the token (it wins over ``TOKEN_VARIABLE``).
TOKEN_FILE_VARIABLE: Final = "RINGTRACE_TOKEN_FILE"
#: A token is at most this long (HELLO's text fields are).
MAX_TOKEN_CHARS: Final = 256

_UNITS: Final = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
#: A frame's length field is 32 bits.
_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_HOST_NAME: Final = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?"
)


def parse_size(text: str) -> int:
    """Bytes from ``"1048576"``, ``"64MB"`` (10**6), ``"1GiB"`` (2**30), ``"512 KiB"``; units are case-insensitive.

    Raises:
        ConfigError: not a size.
    """
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ConfigError(f"size must be a number with an optional unit (B, KB, MB, GB, KiB, MiB, GiB), got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def parse_address(address: object, *, listen: bool = False) -> tuple[str, int]:
    """``"HOST:PORT"`` (``"[::1]:PORT"`` for IPv6) to ``(host, port)``.

    Args:
        listen: an address to bind, where port 0 means "any free port".

    Raises:
        ConfigError: not of that form (a URL scheme, spaces, a bad host or port), naming the value.
    """
    lowest = 0 if listen else 1
    form = f"address must be HOST:PORT (IPv6: [HOST]:PORT) with a port in {lowest}..65535"
    if not isinstance(address, str):
        raise ConfigError(f"{form}, got {type(address).__name__} {address!r}")
    if "://" in address:
        raise ConfigError(f"{form}, without a scheme such as tcp://, got {address!r}")
    host, sep, port_text = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if not sep or not port_text.isascii() or not port_text.isdigit() or not lowest <= int(port_text) <= 65535:
        raise ConfigError(f"{form}, got {address!r}")
    if not _valid_host(host, bracketed):
        raise ConfigError(f"{form}; {host!r} is not a host name or IP address, in {address!r}")
    return host, int(port_text)


def parse_addresses(addresses: object) -> list[tuple[str, int]]:
    """``"HOST:PORT"``, or several separated by commas (``"c1:7700,c2:7700"``: collectors to fail over between, in
    turn), to ``[(host, port), ...]``.

    Raises:
        ConfigError: one of them is not ``HOST:PORT`` (naming it), or there are none.
    """
    if not isinstance(addresses, str):
        return [parse_address(addresses)]  # (raises, naming the type)
    parts = addresses.split(",")
    if len(parts) > 1 and not all(parts):
        raise ConfigError(f"addresses must be HOST:PORT separated by commas, with none empty, got {addresses!r}")
    return [parse_address(part) for part in parts]


def _valid_host(host: str, bracketed: bool) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return not bracketed and _HOST_NAME.fullmatch(host) is not None
    return ip.version == 6 if bracketed else ip.version == 4


def strip_newline(text: str) -> str:
    """``text`` without one trailing newline (``\\n`` or ``\\r\\n``), as a token file or variable often ends."""
    return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text


def check_token(token: object, what: str) -> str:
    """``token``, if it can be one: 1 to ``MAX_TOKEN_CHARS`` printable ASCII characters, no spaces (it travels in
    HELLO and in an ``Authorization: Bearer`` header).

    Raises:
        ConfigError: not a token; the message names ``what`` and never shows the value.
    """
    if not isinstance(token, str):
        raise ConfigError(f"{what} must be a str, got {type(token).__name__}")
    if not token:
        raise ConfigError(f"{what} is empty")
    if len(token) > MAX_TOKEN_CHARS:
        raise ConfigError(f"{what} must be at most {MAX_TOKEN_CHARS} characters long, got {len(token)}")
    for position, char in enumerate(token, 1):
        if not "!" <= char <= "~":
            kind = "a newline" if char in "\r\n" else "a space" if char.isspace() else "not printable ASCII"
            raise ConfigError(
                f"{what} may hold only printable ASCII characters without spaces: character {position} is {kind}"
            )
    return token


def environment_token(environ: Mapping[str, str] | None = None) -> str | None:
    """The token in the file ``RINGTRACE_TOKEN_FILE`` names, else in ``RINGTRACE_TOKEN`` (one trailing newline ignored
    either way), or None if neither is set.

    Raises:
        ConfigError: the file cannot be read, or holds no valid token (the message names the variable, not the value).
    """
    environ = os.environ if environ is None else environ
    path = environ.get(TOKEN_FILE_VARIABLE)
    if path:
        return read_token_file(path, f"environment variable {TOKEN_FILE_VARIABLE}")
    value = environ.get(TOKEN_VARIABLE)
    if not value:
        return None
    return check_token(strip_newline(value), f"environment variable {TOKEN_VARIABLE}")


def read_token_file(path: str, what: str = "--token-file") -> str:
    """The token in the file at ``path``: its text, one trailing newline ignored. A WARNING if group or others may
    read or write it.

    Raises:
        ConfigError: it cannot be read, is empty, or is no token (the message names ``what`` and the file, never its
            text).
    """
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            raw = f.read(64 * 1024)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read the token file {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"{what}: the token file {path} holds more than printable ASCII characters") from None
    token = check_token(strip_newline(text), f"{what}: the token in {path}")
    if stat.S_ISREG(mode) and mode & 0o077:
        logging.getLogger("ringtrace").warning(
            "the token file %s may be read or written by group or others (mode %04o): chmod 600 %s",
            path,
            stat.S_IMODE(mode),
            path,
        )
    return token


@dataclass(frozen=True)
class StreamerOptions:
    """Tuning of the collector streamer; every field can be passed to ``connect`` by name.

    Byte sizes take an int or a size text (``"16MiB"``); durations are seconds as int or float.
    """

    process_name: str | None = None
    #: How often the flusher hands recorded events to listeners.
    batch_interval_s: float = 0.05
    #: Encoded events waiting to be sent; what does not fit is dropped and counted.
    max_queue_bytes: int = 16 * 1024 * 1024
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_events_per_frame: int = 8192
    max_strings: int = 100_000
    connect_timeout_s: float = 1.0
    backoff_initial_s: float = 0.1
    #: Reconnect attempts are at most this far apart, so data flows again soon after a collector restarts.
    backoff_max_s: float = 1.0
    #: How long the exit of the interpreter (or of a multiprocessing child) waits for delivery.
    exit_timeout_s: float = 2.0
    #: With nothing else to send for this long, a heartbeat tells the collector the connection is alive (collectors
    #: close connections idle past their --idle-timeout, 60 s by default).
    heartbeat_s: float = 15.0
    #: In a multiprocessing child, deliver before SIGTERM ends it (``Pool.terminate()``) (docs/client.md).
    deliver_on_sigterm: bool = True
    #: The collector's token, sent in HELLO (one trailing newline ignored, as a file read whole ends); None: the one
    #: in ``token_file``, else in the file ``RINGTRACE_TOKEN_FILE`` names, else in ``RINGTRACE_TOKEN``, if any. Never
    #: shown (not in the repr).
    token: str | None = field(default=None, repr=False)
    #: A file that holds the collector's token (instead of ``token``).
    token_file: str | os.PathLike[str] | None = field(default=None, repr=False)
    #: TLS to the collector: True verifies its certificate against the system's CAs (``ssl.create_default_context``);
    #: an ``ssl.SSLContext`` trusts what it is told to (``cafile=`` for a private CA or a self-signed collector).
    tls: bool | ssl.SSLContext = False

    def __post_init__(self) -> None:
        for option in dataclasses.fields(self):
            value = getattr(self, option.name)
            if option.name.endswith("_bytes") and isinstance(value, str):
                try:
                    object.__setattr__(self, option.name, parse_size(value))
                except ConfigError as exc:
                    raise ConfigError(f"option {option.name}: {exc}") from None
        _check_str_or_none(self, "process_name")
        if self.token is not None and self.token_file is not None:
            raise ConfigError("give option token or option token_file, not both")
        token: str | None
        if self.token is not None:  # as ``open("token").read()`` gives it, say: one trailing newline ignored
            token = check_token(
                strip_newline(self.token) if isinstance(self.token, str) else self.token, "option token"
            )
        elif self.token_file is not None:
            if not isinstance(self.token_file, str | os.PathLike):
                raise ConfigError(f"option token_file must be a path, got {type(self.token_file).__name__}")
            token = read_token_file(os.fspath(self.token_file), "option token_file")
        else:
            token = environment_token()
        object.__setattr__(self, "token", token)
        if not isinstance(self.tls, bool | ssl.SSLContext):
            raise ConfigError(f"option tls must be a bool or an ssl.SSLContext, got {type(self.tls).__name__}")
        if isinstance(self.tls, ssl.SSLContext) and self.tls.protocol == ssl.PROTOCOL_TLS_SERVER:
            raise ConfigError("option tls must be a client context (ssl.create_default_context()), got a server one")
        if not isinstance(self.deliver_on_sigterm, bool):
            value = self.deliver_on_sigterm
            raise ConfigError(f"option deliver_on_sigterm must be a bool, got {type(value).__name__} {value!r}")
        for name in ("batch_interval_s", "connect_timeout_s", "backoff_initial_s", "backoff_max_s", "heartbeat_s"):
            _check_number(self, name, low=0.0, inclusive=False)
        _check_number(self, "exit_timeout_s", low=0.0, inclusive=True)
        _check_int(self, "max_queue_bytes", 1)
        _check_int(self, "max_frame_bytes", MIN_MAX_FRAME_BYTES)
        if self.max_frame_bytes > MAX_MAX_FRAME_BYTES:
            raise ConfigError(
                f"option max_frame_bytes must be <= {MAX_MAX_FRAME_BYTES} (1 GiB), got {self.max_frame_bytes}"
            )
        if self.backoff_initial_s > self.backoff_max_s:
            raise ConfigError(
                f"option backoff_initial_s ({self.backoff_initial_s!r}) must not exceed backoff_max_s "
                f"({self.backoff_max_s!r})"
            )
        _check_int(self, "max_events_per_frame", 1)
        _check_int(self, "max_strings", 2)

    @classmethod
    def from_kwargs(cls, **options: Any) -> StreamerOptions:
        """Options from keyword arguments.

        Raises:
            ConfigError: an unknown option (the message lists the valid ones) or a bad value.
        """
        valid = {option.name for option in dataclasses.fields(cls)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise ConfigError(f"unknown option {unknown[0]!r}; valid options: {', '.join(sorted(valid))}")
        return cls(**options)


def _check_str_or_none(options: StreamerOptions, name: str) -> None:
    value = getattr(options, name)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"option {name} must be a str or None, got {type(value).__name__} {value!r}")


def _check_number(options: StreamerOptions, name: str, low: float, inclusive: bool) -> None:
    value = getattr(options, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"option {name} must be a number of seconds, got {type(value).__name__} {value!r}")
    if not (value >= low if inclusive else value > low) or value != value or value == float("inf"):
        bound = ">=" if inclusive else ">"
        raise ConfigError(f"option {name} must be a finite number {bound} {low:g}, got {value!r}")


def _check_int(options: StreamerOptions, name: str, low: int) -> None:
    value = getattr(options, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"option {name} must be an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise ConfigError(f"option {name} must be >= {low}, got {value!r}")
