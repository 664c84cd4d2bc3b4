"""The streamer's options, each checked with an error that names it.

Addresses, sizes and tokens are parsed by ``ringtrace.wire.parsing``, shared with the collector's command line.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from dataclasses import dataclass, field
from typing import Any

from ringtrace.wire.errors import ConfigError
from ringtrace.wire.frame_types import DEFAULT_MAX_FRAME_BYTES, MAX_MAX_FRAME_BYTES, MIN_MAX_FRAME_BYTES
from ringtrace.wire.parsing import check_token, environment_token, parse_size, read_token_file, strip_newline

__all__ = ["StreamerOptions"]


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
