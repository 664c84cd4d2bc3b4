"""Descriptors of ours that the program may close under us.

A daemon closes every descriptor it did not open as it starts (``os.closerange(3, ...)``, python-daemon's
``DaemonContext``), and its next sockets and files get the same numbers. Used by number after that, a descriptor of
ours would send our bytes into the program's socket and read the program's bytes as ours; closed, it would close the
program's. So each one's identity (its device and inode) is kept, and checked before it is used or closed.

A socket's check is an ``fstat``: in C where the accelerator is built (``fd_identity``), which holds the interpreter
lock through it, as ``os.fstat`` does not. The streamer's and flusher's passes check their sockets each time, and
each call that let go of the lock handed the interpreter to a program's thread and back.
"""

from __future__ import annotations

import contextlib
import errno
import operator
import os
import socket
from collections.abc import Callable
from typing import Final

from ringtrace.client.accelerator import speedups

__all__ = ["OwnedFile", "OwnedSocket"]


class OwnedSocket:
    """A socket of ours, and whether its descriptor still is (``holds``)."""

    __slots__ = ("_key", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._key = _socket_identity(sock.fileno())

    def holds(self) -> bool:
        """Whether the descriptor's number still names the socket we opened (one ``fstat``)."""
        return self._key is not None and _socket_identity(self.sock.fileno()) == self._key

    def close(self) -> None:
        """Close it if it is still ours, else only let go of the number (it is the program's now)."""
        if self.holds():
            with contextlib.suppress(OSError):
                self.sock.close()
        else:
            with contextlib.suppress(OSError):
                self.sock.detach()


class OwnedFile:
    """A file of ours opened for writing by descriptor (``os.open``), written and closed only while it still is."""

    __slots__ = ("_key", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._key = _fstat_identity(fd)

    def holds(self) -> bool:
        """Whether the descriptor's number still names the file we opened (one ``fstat``, letting go of the
        interpreter lock: a file's may wait on its file system, an NFS server's)."""
        return self._key is not None and _fstat_identity(self.fd) == self._key

    def write(self, data: bytes) -> None:
        """Write all of ``data``.

        Raises:
            OSError: the write failed, or the number is no longer ours (EBADF: nothing is written to it).
        """
        if not self.holds():
            raise OSError(errno.EBADF, "its descriptor was closed by the program (its number is not our file now)")
        with memoryview(data) as view:
            written = 0
            while written < len(data):  # (a file may take less than it is given)
                written += os.write(self.fd, view[written:])

    def close(self) -> None:
        """Close it if it is still ours, else only forget the number (it is the program's now)."""
        if self.holds():
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self._key = None


#: The largest number a descriptor can have (a C int's).
_LARGEST_FD: Final = 2**31 - 1


def _fstat_identity(fd: int) -> tuple[int, int] | None:
    """The device and inode of descriptor ``fd`` (an int: TypeError else); None for a number no descriptor has
    (negative, or past ``_LARGEST_FD``), or one ``fstat`` fails on."""
    if not 0 <= operator.index(fd) <= _LARGEST_FD:
        return None
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    return status.st_dev, status.st_ino


#: A socket's check: an fstat that does not wait (a file's may: ``OwnedFile`` lets go of the lock for it).
_socket_identity: Callable[[int], tuple[int, int] | None] = (
    _fstat_identity if speedups is None else speedups.fd_identity
)
