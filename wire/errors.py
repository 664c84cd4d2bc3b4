"""The ringtrace exception tree.

    RingtraceError                  base of everything ringtrace raises
    ├── ConfigError                 an option or address that cannot work (names it, the expected type, the value)
    │   └── OutOfRange              a size or duration written right but past what it can be (negative, past 64 bits)
    └── ProtocolError               a stream broke the wire format; the connection (or file) cannot go on
        ├── BadPreamble             the stream does not start with the ringtrace magic
        ├── UnsupportedVersion      no stream format or protocol version both sides speak (names both)
        ├── FrameTooLarge           a frame exceeds max_frame_bytes (names the limit and the size seen)
        ├── LimitExceeded           a stream declares more than a limit allows (names the limit and the value)
        ├── UnexpectedFrame         a frame type that is unknown, or not allowed from this peer or at this point
        ├── MalformedFrame          a frame body that does not decode (names the frame and the field)
        └── TornStream              the stream ended inside a frame (a torn file tail, a connection cut mid-frame)
    InvalidField (a ValueError)     a typed event's field value does not fit its declared type (names the field)

Recording never raises any of these into the host program: they come from configuration (``connect``, listeners),
from the sans-I/O protocol and session decoder (where the streamer or the collector catches them and closes the
connection), and from the collector's own start-up.
"""

from __future__ import annotations

__all__ = [
    "BadPreamble",
    "ConfigError",
    "FrameTooLarge",
    "InvalidField",
    "LimitExceeded",
    "MalformedFrame",
    "OutOfRange",
    "ProtocolError",
    "RingtraceError",
    "TornStream",
    "UnexpectedFrame",
    "UnsupportedVersion",
]


class RingtraceError(Exception):
    """Base class of every error ringtrace raises."""


class ConfigError(RingtraceError, ValueError):
    """An option has a value that cannot work."""


class OutOfRange(ConfigError):
    """A size or duration written right, but past what it can be: negative, or more than 64 bits hold (a caller with
    a lower limit of its own may say that one instead)."""


class ProtocolError(RingtraceError):
    """The peer broke the wire format. The connection cannot continue."""


class BadPreamble(ProtocolError):
    """The byte stream does not begin with the ringtrace magic."""


class UnsupportedVersion(ProtocolError):
    """No stream format or protocol version that both sides speak."""


class FrameTooLarge(ProtocolError):
    """A frame is larger than the configured limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds max_frame_bytes={limit}")
        self.size = size
        self.limit = limit


class LimitExceeded(ProtocolError):
    """A stream declares more of something than a limit allows."""

    def __init__(self, what: str, limit_name: str, limit: int, value: int) -> None:
        super().__init__(f"{what}: {value} exceeds {limit_name}={limit}")
        self.limit_name = limit_name
        self.limit = limit
        self.value = value


class UnexpectedFrame(ProtocolError):
    """A frame type that is unknown, or not allowed from this peer or at this point of the stream."""


class MalformedFrame(ProtocolError):
    """A frame whose body does not decode; the message names the frame type and the field."""


class TornStream(ProtocolError):
    """The stream ended inside a frame: everything before that frame was read, the frame itself is lost."""


class InvalidField(ValueError):
    """A typed event's field value does not fit its declared type."""
