"""Descriptors of ours that the program may close under us.

A daemon closes every descriptor it did not open as it starts (``os.closerange(3, ...)``, python-daemon's
``DaemonContext``), and its next sockets and files get the same numbers. Used by number after that, a descriptor of
ours would send our bytes into the program's socket and read the program's bytes as ours; closed, it would close the
program's. So each one's identity (its device and inode) is kept, and checked before it is used or closed.
"""

from __future__ import annotations

import contextlib
import os
import socket

__all__ = ["OwnedSocket"]


class OwnedSocket:
    """A socket of ours, and whether its descriptor still is (``holds``)."""

    __slots__ = ("_key", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._key = _identity(sock.fileno())

    def holds(self) -> bool:
        """Whether the descriptor's number still names the socket we opened (one ``fstat``)."""
        return self._key is not None and _identity(self.sock.fileno()) == self._key

    def close(self) -> None:
        """Close it if it is still ours, else only let go of the number (it is the program's now)."""
        if self.holds():
            with contextlib.suppress(OSError):
                self.sock.close()
        else:
            with contextlib.suppress(OSError):
                self.sock.detach()


def _identity(fd: int) -> tuple[int, int] | None:
    if fd < 0:
        return None
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    return status.st_dev, status.st_ino
