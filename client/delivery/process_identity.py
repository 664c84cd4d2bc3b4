"""Who this process is, for every stream's HELLO (the stream encoder itself is the wire package's,
``ringtrace.wire.stream_encoder``: the collector writes native frames with it too)."""

from __future__ import annotations

import os
import socket
import time
from typing import Final

from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.version import __version__

__all__ = ["MAX_NAMES_REMEMBERED", "ProcessIdentity", "rename_instance"]

_instance: tuple[int, str] = (0, "")
#: The instance of each name this process was connected under, the last ``MAX_NAMES_REMEMBERED`` (by pid: a forked
#: child's are its own).
_named: tuple[int, dict[str, str]] = (0, {})
#: Names remembered: one connected under another after that is a new process to the collector.
MAX_NAMES_REMEMBERED: Final = 1000


def _instance_id() -> str:
    """Random per process incarnation: the same for every stream of this process, new in a forked child."""
    global _instance
    pid = os.getpid()
    if _instance[0] != pid:
        _instance = (pid, _uuid4_hex())
    return _instance[1]


def rename_instance(before: str, after: str) -> None:
    """Listeners made from now on are the process named ``after`` to the collector, its own source beside the one
    named ``before`` (``connect()`` again under another name): a new one the first time, the same again after. Those
    made before keep the identity they have."""
    global _instance, _named
    pid = os.getpid()
    if _named[0] != pid:  # (a forked child's names are its own)
        _named = (pid, {})
    named = _named[1]
    named[before] = _instance_id()  # (the names left, the least recently first: the one it has is not among them)
    while len(named) > MAX_NAMES_REMEMBERED:  # (a pool worker that names each task anew)
        del named[next(iter(named))]
    _instance = (pid, named.pop(after, "") or _uuid4_hex())


def _uuid4_hex() -> str:
    """``uuid.uuid4().hex``, as uuid makes it, without importing uuid (which loads ``platform`` too, at every start)."""
    number = int.from_bytes(os.urandom(16), "big")
    number = (number & ~(0xC000 << 48)) | 0x8000 << 48  # the RFC 4122 variant
    number = (number & ~(0xF000 << 64)) | 4 << 76  # version 4
    return f"{number:032x}"


class ProcessIdentity:
    """Who this process is, for every stream's HELLO (one ``instance_id`` per process, so that all the streams
    of a process are one process to the collector)."""

    def __init__(self, process_name: str) -> None:
        self.process_name = process_name
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.instance_id = _instance_id()
        self.boot_id = _boot_id()

    def hello(self, token: str = "", *, live: bool = False) -> Hello:
        """A HELLO for a new stream; ``token`` only for a live connection to a collector that requires it, ``live``
        for one (its streamer says GOODBYE when it closes: an end without one is a crash)."""
        return Hello(
            pid=self.pid,
            host=self.host,
            process_name=self.process_name,
            instance_id=self.instance_id,
            boot_id=self.boot_id,
            monotonic_ns=time.monotonic_ns(),
            wall_ns=time.time_ns(),
            client_version=__version__,
            token=token,
            says_goodbye=live,
        )


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""
