"""The ringtrace exception tree.

    RingtraceError                  base of everything ringtrace raises
    ├── ConfigError                 an option has a value that cannot work (names the option and value)
    └── ProtocolError               the peer broke the wire format; the connection must be closed
        ├── BadPreamble             the stream does not start with the ringtrace magic
        ├── UnsupportedVersion      the peer speaks a protocol version we do not
        ├── FrameTooLarge           a frame exceeds max_frame_bytes (names the limit and the size seen)
        ├── UnexpectedFrame         a frame type that is unknown or not allowed in this direction or state
        └── MalformedFrame          a frame body that does not decode (names the frame and the field)

Recording never raises any of these into the host program: they come from configuration (``connect``), from the
sans-I/O protocol (where the transport or the collector catches them and closes the connection), and from the
collector's own start-up.
"""

from __future__ import annotations

__all__ = [
    "BadPreamble",
    "ConfigError",
    "FrameTooLarge",
    "MalformedFrame",
    "ProtocolError",
    "RingtraceError",
    "UnexpectedFrame",
    "UnsupportedVersion",
]


class RingtraceError(Exception):
    """Base class of every error ringtrace raises."""


class ConfigError(RingtraceError, ValueError):
    """An option has a value that cannot work."""


class ProtocolError(RingtraceError):
    """The peer broke the wire format. The connection cannot continue."""


class BadPreamble(ProtocolError):
    """The byte stream does not begin with the ringtrace magic."""


class UnsupportedVersion(ProtocolError):
    """The peer speaks a protocol version this side does not."""

    def __init__(self, version: int, supported: int) -> None:
        super().__init__(f"protocol version {version} is not supported (this side speaks version {supported})")
        self.version = version
        self.supported = supported


class FrameTooLarge(ProtocolError):
    """A frame is larger than the configured limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds max_frame_bytes={limit}")
        self.size = size
        self.limit = limit


class UnexpectedFrame(ProtocolError):
    """A frame type that is unknown, or not allowed in this direction or at this point of the stream."""


class MalformedFrame(ProtocolError):
    """A frame whose body does not decode; the message names the frame type and the field."""
