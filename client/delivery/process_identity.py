"""Who this process is, for every stream's HELLO (the stream encoder itself is the wire package's,
``ringtrace.wire.stream_encoder``: the collector writes native frames with it too)."""

from __future__ import annotations

import os
import socket
import time

from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.version import __version__

__all__ = ["ProcessIdentity", "start_new_instance"]

_instance: tuple[int, str] = (0, "")


def _instance_id() -> str:
    """Random per process incarnation: the same for every stream of this process, new in a forked child."""
    global _instance
    pid = os.getpid()
    if _instance[0] != pid:
        _instance = (pid, _uuid4_hex())
    return _instance[1]


def start_new_instance() -> None:
    """Listeners made from now on are a new process to the collector (a source of its own, beside what this OS process
    sent before): ``connect()`` again under another name. Listeners made before keep the identity they have."""
    global _instance
    _instance = (os.getpid(), _uuid4_hex())


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
