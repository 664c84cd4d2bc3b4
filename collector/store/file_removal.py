"""Segment files removed off the event loop: unmapping a file and unlinking it wait for the kernel (the file's pages,
its blocks, the journal), up to several ms each, which held up every connection and HTTP request while a data dir
turned its files over. The caller makes a file unrecoverable first (its preamble zeroed), so a crash before it is
removed does not bring its events back: recovery removes it as it finds it.
"""

from __future__ import annotations

import logging
import mmap
import os
import queue
import threading
from pathlib import Path

__all__ = ["FileRemover"]

log = logging.getLogger("ringtrace.collector.segments")


class FileRemover:
    """Unmaps and unlinks files on a thread of its own (started on first use), in the order they were given."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[mmap.mmap, Path] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> bool:
        """Whether files given are still to be removed."""
        return self._queue.unfinished_tasks > 0

    def remove(self, buffer: mmap.mmap, path: Path) -> None:
        """Unmap ``buffer`` and unlink ``path``, soon (nothing may use the mapping any more)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ringtrace-files", daemon=True)
            self._thread.start()
        self._queue.put((buffer, path))

    def wait(self) -> None:
        """Return once every file given so far is removed (their room on the disk is free)."""
        self._queue.join()

    def close(self) -> None:
        """Remove what was given, then stop the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                _remove(*item)
            finally:
                self._queue.task_done()
        self._queue.task_done()


def _remove(buffer: mmap.mmap, path: Path) -> None:
    try:
        buffer.close()
    except BufferError:  # still read somewhere (a bug): unmapped when the last view goes
        log.error("%s is unmapped late: a view of it is still in use", path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc)
