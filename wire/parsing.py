"""Values both sides parse the same way: sizes, ``HOST:PORT`` addresses and tokens, each checked with an error that
names it (never a token's value).

The client's ``connect`` and the collector's command line and environment accept the same forms.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import stat
from collections.abc import Mapping
from typing import Final

from ringtrace.wire.errors import ConfigError, OutOfRange

__all__ = [
    "MAX_DURATION_NS",
    "MAX_SIZE_BYTES",
    "MAX_TOKEN_CHARS",
    "TOKEN_FILE_VARIABLE",
    "TOKEN_VARIABLE",
    "check_token",
    "environment_token",
    "format_duration_ns",
    "parse_address",
    "parse_addresses",
    "parse_duration_ns",
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
#: Units of a duration, in ns (``parse_duration_ns``).
_DURATION_UNITS: Final = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
#: The largest size and duration parsed: what a signed 64-bit integer holds (every size and time past the parsing is
#: one: the store's counters, msgpack's ints, C's long long), 8 EiB or about 292 years of ns.
MAX_SIZE_BYTES: Final = 2**63 - 1
MAX_DURATION_NS: Final = 2**63 - 1
_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_HOST_NAME: Final = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?"
)


def parse_size(text: str) -> int:
    """Bytes from ``"1048576"``, ``"64MB"`` (10**6), ``"1GiB"`` (2**30), ``"512 KiB"``; units are case-insensitive.

    Raises:
        ConfigError: not a size; ``OutOfRange``: more than ``MAX_SIZE_BYTES``.
    """
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ConfigError(
            f"size must be a number with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got {text!r:.80}"
        )
    size = _times(match.group(1), _UNITS[unit])
    if not size <= MAX_SIZE_BYTES:
        raise OutOfRange(f"size must be at most {MAX_SIZE_BYTES} bytes (8 EiB, 2**63 - 1), got {text!r:.80}")
    return int(size)


def parse_duration_ns(text: str) -> int:
    """Nanoseconds from ``"1ms"``, ``"250us"``, ``"0.5 s"``, ``"800ns"``, ``"2m"``, ``"1h"`` (a number and a unit;
    ``"0"`` alone too).

    Raises:
        ConfigError: not a duration; ``OutOfRange``: negative, or longer than ``MAX_DURATION_NS``.
    """
    match = _SIZE.fullmatch(text.replace("µ", "u"))
    unit = match.group(2).lower() if match else ""
    if match is None and _SIZE.fullmatch(text.strip().removeprefix("-").replace("µ", "u")):
        raise OutOfRange(f"a duration must not be negative, got {text!r:.80}")
    if match is None or (unit not in _DURATION_UNITS and not (unit == "" and float(match.group(1)) == 0)):
        raise ConfigError(
            f"a duration is a number and a unit (ns, us, ms, s, m, h), like 1ms or 250us, got {text!r:.80}"
        )
    ns = _times(match.group(1), _DURATION_UNITS.get(unit, 0))
    if not ns <= MAX_DURATION_NS:
        raise OutOfRange(
            f"a duration is at most {MAX_DURATION_NS // 10**9} s (2**63 - 1 ns, about 292 years), got {text!r:.80}"
        )
    return round(ns)


def _times(number: str, unit: int) -> int | float:
    """``number`` (digits, perhaps a fraction) times ``unit``: exact for a whole number, so that the largest one taken
    is exactly the limit; a fraction as a float (inf for hundreds of digits, which the limit refuses)."""
    return int(number) * unit if number.isdigit() and len(number) <= 40 else float(number) * unit


def format_duration_ns(ns: int) -> str:
    """``ns`` as ``parse_duration_ns`` reads it back exactly, in the largest unit that holds it whole (``"200ms"``,
    ``"1500ms"``, ``"2m"``, ``"0s"``)."""
    if ns == 0:
        return "0s"
    unit, size = max(((u, n) for u, n in _DURATION_UNITS.items() if ns % n == 0), key=lambda pair: pair[1])
    return f"{ns // size}{unit}"


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
