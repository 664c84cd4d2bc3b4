"""The streamer's options: ``StreamerOptions``, every value checked when it is made.

What each option means, its default, bounds and environment variable are in the option table
(``connect_options.py``); here are the fields (each takes its default from its row).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ringtrace.client.connect_options import checked_options, option_named
from ringtrace.wire.errors import ConfigError

if TYPE_CHECKING:
    import ssl

__all__ = ["StreamerOptions"]


def declared(name: str) -> Any:
    """The dataclass field ``name``, as its row in the option table declares it (default; a secret out of the repr)."""
    return dataclasses.field(default=option_named(name).default, repr=not option_named(name).secret)


@dataclass(frozen=True)
class StreamerOptions:
    """Tuning of the collector streamer; every field can be passed to ``connect`` by name (``connect_options.OPTIONS``
    says what each means and takes).

    Byte sizes take an int or a size text (``"16MiB"``); durations are seconds as int or float. ``token``: None is
    the one in ``token_file``, else in the file ``RINGTRACE_TOKEN_FILE`` names, else in ``RINGTRACE_TOKEN``, if any.

    Raises:
        ConfigError: a value its row refuses, token and token_file both given, a backoff that starts past its
            maximum, a token file that cannot be read.
    """

    process_name: str | None = declared("process_name")
    batch_interval_s: float = declared("batch_interval_s")
    max_queue_bytes: int = declared("max_queue_bytes")
    max_frame_bytes: int = declared("max_frame_bytes")
    max_events_per_frame: int = declared("max_events_per_frame")
    max_strings: int = declared("max_strings")
    connect_timeout_s: float = declared("connect_timeout_s")
    backoff_initial_s: float = declared("backoff_initial_s")
    backoff_max_s: float = declared("backoff_max_s")
    exit_timeout_s: float = declared("exit_timeout_s")
    heartbeat_s: float = declared("heartbeat_s")
    deliver_on_sigterm: bool = declared("deliver_on_sigterm")
    token: str | None = declared("token")
    token_file: str | os.PathLike[str] | None = declared("token_file")  # noqa: RUF009 - a dataclasses.field
    tls: bool | ssl.SSLContext = declared("tls")  # noqa: RUF009 - a dataclasses.field (a type not known immutable)

    def __post_init__(self) -> None:
        given = {option.name: getattr(self, option.name) for option in dataclasses.fields(self)}
        for name, value in checked_options(given).items():
            object.__setattr__(self, name, value)

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
