"""Segments as files of a data dir (``DataDir``), each mapped into memory while it is stored, and the segment files
found on start (``Recovered``)."""

from __future__ import annotations

import errno
import fcntl
import itertools
import logging
import mmap
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ringtrace.collector.store.file_removal import FileRemover
from ringtrace.collector.store.segment_buffers import FsyncPolicy, SegmentBuffers
from ringtrace.collector.store.segment_scan import scan_segment, written_as
from ringtrace.collector.store.segments import Buffer, Segment
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.frame_types import FRAME_HEADER
from ringtrace.wire.frames import Stats
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.stream_limits import Limits

__all__ = ["LOCK_FILE", "SPARE_SUFFIX", "SUFFIX", "DataDir", "Recovered"]

log = logging.getLogger("ringtrace.collector.segments")

SUFFIX: Final = ".rtseg"
#: Added to the name of a segment file recovery can read nothing of, not starting with zeros: kept for a look.
UNREADABLE_SUFFIX: Final = ".unreadable"
SPARE_SUFFIX: Final = ".rtspare"
LOCK_FILE: Final = "LOCK"


@dataclass
class Recovered:
    """A segment file found on start: what of it was kept and why the rest was cut."""

    seq: int
    buffer: Buffer
    used: int
    hello: Hello
    #: (offset, size, track, count, first_ts, last_ts) of each EVENTS frame kept.
    entries: list[tuple[int, int, int, int, int, int]]
    stats: Stats | None
    why_cut: str | None


class DataDir(SegmentBuffers):
    """Segments as files ``DIR/<seq>.rtseg``, each mapped into memory while it is stored.

    A file is allocated in full when its segment opens (``posix_fallocate``), so a full disk is an error there and then,
    not a crash when a page of the mapping is first written. Writes go to the page cache at memory speed; they survive
    the collector being killed. What survives a power loss depends on ``fsync``. The file of an evicted segment is
    renamed to a spare and reused, mapping and all: creating, allocating, faulting in and unlinking a file per segment
    cost ingest most of its speed. A reused file holds old bytes after the new ones; each checksum is followed by an
    end marker (a zero frame header), so recovery stops there. Files not kept are unmapped and removed on a thread
    (``file_removal.py``), made unrecoverable first.
    """

    checksums = True

    def __init__(self, path: str | os.PathLike[str], fsync: FsyncPolicy = "never") -> None:
        if not str(path):
            raise ConfigError("--data-dir must name a directory, got ''")
        self.path = Path(path)
        self.fsync = fsync
        self._pool: dict[int, list[tuple[mmap.mmap, Path]]] = {}
        self._pooled_bytes = 0
        self._spares = itertools.count()
        #: Files of segments evicted while still read, renamed so that recovery does not take them back.
        self._retired: dict[int, Path] = {}
        #: The highest sequence number of any segment file found by ``recover``, read or not.
        self.highest_seq = -1
        #: A file was created, renamed or removed since the directory was last synced.
        self._names_changed = False
        self._remover = FileRemover()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = self._take_lock()
            for spare in self.path.glob(f"*{SPARE_SUFFIX}"):  # left by an earlier run: nothing in them counts
                spare.unlink()
        except OSError as exc:
            raise ConfigError(f"--data-dir {str(self.path)!r} is not a writable directory: {exc}") from None

    def _take_lock(self) -> int:
        """An exclusive lock on ``DIR/LOCK`` for the life of the process: two collectors on one data dir would
        recover, evict and reuse each other's files."""
        lock_path = self.path / LOCK_FILE
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"--data-dir {str(self.path)!r} is in use by another collector (pid {holder}, holding {lock_path})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def close(self) -> None:
        """Unmap the spare files and release the lock (segments still stored stay as they are)."""
        self.trim(0)
        self._remover.close()
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def file(self, seq: int) -> Path:
        return self.path / f"{seq:016d}{SUFFIX}"

    @property
    def pooled_bytes(self) -> int:
        return self._pooled_bytes

    def has(self, size: int) -> bool:
        return bool(self._pool.get(size))

    def spare_sizes(self) -> Iterable[int]:
        return [size for size, spares in self._pool.items() if spares]

    def new(self, seq: int, size: int) -> mmap.mmap:
        path = self.file(seq)
        pool = self._pool.get(size)
        if pool:
            buffer, spare = pool.pop()
            self._pooled_bytes -= size
            try:
                os.rename(spare, path)
                self._names_changed = True
            except OSError:
                buffer.close()
                spare.unlink(missing_ok=True)
                raise
            return buffer
        try:
            return self.create_file(path, size)
        except OSError as exc:
            if exc.errno != errno.ENOSPC or not self._remover.pending:
                raise
        self._remover.wait()  # the files being removed give their room back
        return self.create_file(path, size)

    def create_file(self, path: Path, size: int) -> mmap.mmap:
        """A new file of ``size`` bytes at ``path``, its room taken on the disk (``OSError`` ENOSPC where there is
        none), mapped: the one place a segment file is made (a subclass may stand for a smaller disk)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self._names_changed = True
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, size)  # a file system without fallocate: a sparse file
            return mmap.mmap(fd, size)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)

    def retire(self, segment: Segment) -> None:
        # A snapshot or a connection still reads it; a crash before release must not bring its events back, which
        # are counted as gone. Renaming leaves the mapping as it is.
        path, retired = self.file(segment.seq), self._spare_name()
        try:
            os.rename(path, retired)
        except OSError as exc:
            log.warning("cannot retire %s (%s): a crash before it is released would recover it", path, exc)
            return
        self._names_changed = True
        self._retired[segment.seq] = retired

    def _spare_name(self) -> Path:
        return self.path / f"{next(self._spares)}{SPARE_SUFFIX}"

    def release(self, segment: Segment, *, reuse: bool) -> None:
        buffer, path = segment.buffer, self._retired.pop(segment.seq, None) or self.file(segment.seq)
        assert isinstance(buffer, mmap.mmap)
        # Not a segment any more, whatever happens: a spare by its name, and by its bytes until that name is durable.
        buffer[: FRAME_HEADER.size] = bytes(FRAME_HEADER.size)
        spare = self._spare_name()
        try:
            os.rename(path, spare)
        except OSError as exc:
            log.warning("cannot rename %s to %s (%s): removing it", path, spare, exc)
            self._remover.remove(buffer, path)
            return
        self._names_changed = True
        if reuse:
            self._pool.setdefault(len(buffer), []).append((buffer, spare))
            self._pooled_bytes += len(buffer)
        else:
            self._remover.remove(buffer, spare)

    def trim(self, keep_bytes: int) -> None:
        for size in sorted(self._pool, reverse=True):
            pool = self._pool[size]
            while pool and self._pooled_bytes > keep_bytes:
                buffer, spare = pool.pop()
                self._pooled_bytes -= size
                self._remover.remove(buffer, spare)

    def sync(self, segment: Segment, start: int, end: int) -> None:
        # fdatasync of the file, not mmap.flush: msync holds the GIL (the event loop would stop for the whole
        # write-back), fdatasync does not, and on Linux it writes back the pages written through the mapping too.
        if end > start and not segment.evicted:
            try:
                fd = os.open(self.file(segment.seq), os.O_RDONLY)
            except FileNotFoundError:  # evicted meanwhile (renamed): nothing of it needs to last
                fd = -1
            if fd >= 0:
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
        if self._names_changed:  # a file's data is durable, its name only once the directory is
            self._names_changed = False
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def recover(self, limits: Limits) -> Iterator[Recovered]:
        """Every segment file, oldest first, validated; a file with nothing to keep is removed."""
        named: list[tuple[Path, int]] = []
        for path in sorted(self.path.glob(f"*{SUFFIX}")):
            try:
                named.append((path, int(path.name.removesuffix(SUFFIX))))
            except ValueError:
                log.warning("ignoring %s: not a segment file name", path)
        on_disk = max((seq for _, seq in named), default=0)
        for path, seq in named:
            self.highest_seq = max(self.highest_seq, seq)
            recovered = self._recover_one(path, seq, limits, on_disk)
            if recovered is not None:
                yield recovered

    def _recover_one(self, path: Path, seq: int, limits: Limits, highest_on_disk: int) -> Recovered | None:
        """``highest_on_disk``: the highest number among the directory's segment files.

        Raises:
        ConfigError: the file cannot be opened for reading and writing (its events would be lost in silence).
        """
        try:
            with open(path, "r+b") as file:
                size = os.fstat(file.fileno()).st_size
                buffer = mmap.mmap(file.fileno(), size) if size else None
        except OSError as exc:
            raise ConfigError(
                f"--data-dir: cannot open the segment file {str(path)!r} ({exc}); give the collector read and write "
                "access to it, or move it out of the directory"
            ) from None
        if buffer is None:
            log.warning("removing %s: empty", path)
            path.unlink(missing_ok=True)
            return None
        scan = scan_segment(buffer, limits, seq)
        if scan.hello is None or not scan.entries:
            why = scan.why_cut or "nothing after the session frames"
            # Something is there that cannot be read: kept. Not a file whose first frame header's bytes are zeros: one
            # allocated and never written, or made unrecoverable on purpose as it was released or removed (a crash
            # came before its new name or its removal was durable: its events are counted gone).
            if scan.why_cut is not None and any(buffer[: FRAME_HEADER.size]):
                written = written_as(buffer, limits, scan)
                # (Its name seeds its checksums: a copy under another name cannot be read. A segment of one checksum
                # gives some number for any corruption of it: only one no higher than the directory's is said.)
                if written is not None and written <= highest_on_disk:
                    why += (
                        f" (the segment's name is part of its checksum: was it renamed or copied from "
                        f"{self.file(written).name}?)"
                    )
                aside = path.with_name(path.name + UNREADABLE_SUFFIX)
                buffer.close()
                path.rename(aside)
                log.warning("%s: no events to keep (%s); set aside as %s (%d bytes, outside the capacity)",
                            path, why, aside.name, size)  # fmt: skip
                return None
            log.warning("removing %s: no events to keep (%s)", path, why)
            buffer.close()
            path.unlink(missing_ok=True)
            return None
        if scan.why_cut is not None:
            log.warning("%s: kept its first %d bytes, cut the rest: %s", path, scan.used, scan.why_cut)
        # Zero what was cut, so that the next recovery does not see it either.
        buffer[scan.used : size] = bytes(size - scan.used)
        return Recovered(seq, buffer, scan.used, scan.hello, scan.entries, scan.stats, scan.why_cut)
