"""ringtrace client: record spans and instants in any Python process and stream them to a collector.

    import ringtrace.client

    tl = ringtrace.client.connect("127.0.0.1:7700", process_name="worker")
    with tl.scope("load", path="a.csv"):
        ...
    tl.instant("cache-miss", key="a")

Only msgpack is needed. Recording never raises into or blocks the program; events that cannot be delivered are
dropped and counted, and the counts reach the collector.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from ._version import __version__
from .errors import (
    BadPreamble,
    ConfigError,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    RingtraceError,
    UnexpectedFrame,
    UnsupportedVersion,
)
from .timeline import Scope, Timeline
from .transport import Transport, TransportOptions

__all__ = [
    "BadPreamble",
    "ConfigError",
    "FrameTooLarge",
    "MalformedFrame",
    "ProtocolError",
    "RingtraceError",
    "Scope",
    "Timeline",
    "TransportOptions",
    "UnexpectedFrame",
    "UnsupportedVersion",
    "__version__",
    "connect",
    "default_timeline",
]

_default = Timeline()
_connect_lock = threading.Lock()
_connected_to: tuple[str, TransportOptions] | None = None


def default_timeline() -> Timeline:
    """The process-wide timeline (records nothing until ``connect``)."""
    return _default


def connect(address: str, *, process_name: str | None = None, **options: Any) -> Timeline:
    """Stream the process-wide timeline to the collector at ``address`` and return it.

    Connecting happens in the background: this returns at once, and events recorded before the collector answers
    are queued (within ``max_queue_bytes``). Calling it again with the same arguments returns the same timeline;
    with others, the timeline is flushed and moves to the new collector.

    Args:
        address: ``"HOST:PORT"`` of the collector's ingest listener.
        process_name: shown for this process in traces; defaults to the script's name.
        **options: fields of ``TransportOptions`` (``batch_interval_s``, ``max_queue_bytes``, ...).

    Raises:
        ConfigError: a malformed address or option.
    """
    global _connected_to
    try:
        opts = TransportOptions(process_name=process_name, **options)
    except TypeError as exc:
        raise ConfigError(f"unknown option for connect(): {exc}") from None
    with _connect_lock:
        if _connected_to == (address, opts) and _default.transport is not None:
            return _default
        transport = Transport(_default, address, opts)  # validates the address before anything changes
        if _default.transport is not None:
            _default.close(opts.exit_timeout_s)
        _default.attach(transport)
        transport.start()
        _connected_to = (address, opts)
    return _default


def _close_at_exit() -> None:
    transport = _default.transport
    if transport is not None:
        _default.close(transport.options.exit_timeout_s)


def _after_fork_in_child() -> None:
    """The child starts with no sender thread and the parent's unsent events: start over, as a new process.

    The new sender thread starts on the child's first event or flush: starting threads inside a fork handler is
    unsafe (imports, for one, can fail there).
    """
    global _connect_lock, _connected_to
    _connect_lock = threading.Lock()
    previous = _connected_to if _default.transport is not None else None  # not if the parent had closed
    _connected_to = None
    _default._reset_after_fork()
    if previous is not None:
        address, opts = previous
        _default.attach(Transport(_default, address, opts))
        _connected_to = previous


atexit.register(_close_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
