"""Segments, the unit of storage: one client stream's recent past in one buffer, readable alone.

Layout of a segment's buffer of ``size`` bytes (in memory, or a file of the data dir mapped into memory)::

    [ preamble HELLO SCHEMA STRINGS TRACK ... EVENTS ... CHECKSUM ... ][ zeros / free ][ index entries ]
    0                                                                  used           size - 32 * entries

The front is a stream in the wire format (``wire/PROTOCOL.md``): the session frames its events need, replayed
verbatim from the connection when the segment opens, then frames verbatim as they arrive. So the session decoder
reads a segment alone, and a segment file is the same format as a client's trace file. The index grows down from the
tail, one 32-byte entry per EVENTS frame (offset, size, track, count, first and last timestamp): frames are selected
and accounted without decoding, and the index costs no memory beyond the segment's own bytes. It is derived data:
recovery rebuilds it from the frames.

In a data dir, CHECKSUM frames (type 0xFF, ignorable) each hold the CRC-32C of the segment's bytes from the end of the
previous one, so recovery keeps exactly what was checksummed and cuts a torn or corrupted tail. In memory they are left
out: nothing there can tear.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import mmap
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple

import crc32c
from ringtrace.collector.store.file_removal import FileRemover
from ringtrace.wire.decoder import Limits, SessionDecoder
from ringtrace.wire.errors import ConfigError, ProtocolError
from ringtrace.wire.frames import CHECKSUM_TYPE, FRAME_HEADER, PREAMBLE, Events, Hello, Stats, preamble

__all__ = [
    "CHECKSUM_FRAME",
    "CHECKSUM_RESERVE",
    "EVENTS_ENTRY",
    "FSYNC_POLICIES",
    "INDEX_ENTRY",
    "SYNC_INTERVAL_S",
    "DataDir",
    "EventsRun",
    "FsyncPolicy",
    "MemoryBuffers",
    "Recovered",
    "Scan",
    "Segment",
    "SegmentBuffers",
    "frame_spans",
    "scan_segment",
]

log = logging.getLogger("ringtrace.collector.segments")

#: offset, size (of the whole EVENTS frame), track id, event count, first and last timestamp (monotonic ns).
INDEX_ENTRY: Final = struct.Struct("<IIIIQQ")
#: An EVENTS frame as the index holds it (``EventsRun``; the name the scan of received frames knows it by).
EVENTS_ENTRY: Final = INDEX_ENTRY
#: A CHECKSUM frame: body length 4, type 0xFF (ignorable; in files only), CRC-32C of the bytes since the last one.
CHECKSUM_FRAME: Final = struct.Struct("<IBI")
#: Room a segment keeps free for its last CHECKSUM frame and the end marker after it.
CHECKSUM_RESERVE: Final = CHECKSUM_FRAME.size + FRAME_HEADER.size
_PREAMBLE_BYTES: Final = preamble()
#: What ``fsync`` may be: nothing (the OS writes back; survives a crash of the collector, not of the machine), every
#: second in the background (acknowledgements do not wait), at every FLUSH the collector acknowledges, or after every
#: batch received.
FsyncPolicy = Literal["never", "interval", "flush", "always"]
FSYNC_POLICIES: Final = ("never", "interval", "flush", "always")
#: How often ``interval`` syncs.
SYNC_INTERVAL_S: Final = 1.0
SUFFIX: Final = ".rtseg"
SPARE_SUFFIX: Final = ".rtspare"
LOCK_FILE: Final = "LOCK"

Buffer = bytearray | mmap.mmap


class EventsRun(NamedTuple):
    """Complete EVENTS frames read into a segment, checked as the session decoder checks them, to be stored where they
    are (``Segment.index_run``; made by the ingest's scan of received frames)."""

    #: One ``EVENTS_ENTRY`` per frame, the last frame's first: the order of an index that grows down.
    entries: bytes
    #: Their events.
    events: int
    #: Per track id: [events, bytes] of its frames here.
    tracks: dict[int, list[int]]
    #: Offset in the buffer just past the last frame.
    end: int

    @property
    def frames(self) -> int:
        return len(self.entries) // EVENTS_ENTRY.size


def frame_spans(
    data: bytes | bytearray | memoryview | mmap.mmap, start: int, end: int
) -> Iterator[tuple[int, int, int]]:
    """``(type, offset, end)`` of each whole frame in ``data[start:end]``, by its header alone (nothing is checked or
    decoded: for walking stored frames that were checked on the way in); it stops at a frame that does not fit."""
    position = start
    while position + FRAME_HEADER.size <= end:
        body_length, frame_type = FRAME_HEADER.unpack_from(data, position)
        frame_end = position + FRAME_HEADER.size + body_length
        if frame_end > end:
            return
        yield frame_type, position, frame_end
        position = frame_end


class Segment:
    """One segment: its buffer, how much of it is used, and whom it belongs to (see the module docstring)."""

    __slots__ = (
        "buffer",
        "checked",
        "entries",
        "events",
        "evicted",
        "owner",
        "pins",
        "seq",
        "size",
        "synced",
        "tracks",
        "used",
        "written_ns",
    )

    def __init__(self, seq: int, buffer: Buffer, owner: int) -> None:
        self.seq = seq
        self.buffer = buffer
        self.size = len(buffer)
        #: The process (its uid in the registry) whose stream this segment holds.
        self.owner = owner
        self.used = 0
        self.entries = 0
        self.events = 0
        #: Per track id: [events, bytes] of its EVENTS frames here (what the segment's eviction takes from it).
        self.tracks: dict[int, list[int]] = {}
        #: End of the bytes covered by a CHECKSUM frame (data dir).
        self.checked = 0
        #: End of the bytes made durable (data dir, fsync).
        self.synced = 0
        #: Snapshots reading this segment: its buffer is neither reused nor unmapped while any are.
        self.pins = 0
        self.evicted = False
        #: When (the collector's monotonic ns) it was opened, and then sealed: ``--max-age`` counts from it.
        self.written_ns = time.monotonic_ns()

    @property
    def free(self) -> int:
        return self.size - self.used - INDEX_ENTRY.size * self.entries

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` (the caller checked ``free``); returns its offset."""
        offset = self.used
        end = offset + len(data)
        self.buffer[offset:end] = data
        self.used = end
        return offset

    def write_events(self, frame: bytes | memoryview, track_id: int, count: int, first_ts: int, last_ts: int) -> None:
        """Append one EVENTS frame (header included) and its index entry."""
        offset = self.used
        self.buffer[offset : offset + len(frame)] = frame
        self.index_events(offset, len(frame), track_id, count, first_ts, last_ts)

    def index_events(self, offset: int, size: int, track_id: int, count: int, first_ts: int, last_ts: int) -> None:
        """The EVENTS frame at ``offset`` (written there already) is stored: its index entry, and ``used`` past it."""
        self.used = offset + size
        self.entries += 1
        self.events += count
        INDEX_ENTRY.pack_into(
            self.buffer, self.size - INDEX_ENTRY.size * self.entries, offset, size, track_id, count, first_ts, last_ts
        )
        self._add_track(track_id, count, size)

    def index_run(self, run: EventsRun) -> None:
        """The EVENTS frames of ``run`` (read here already) are stored: their index entries, and ``used`` past
        them."""
        top = self.size - INDEX_ENTRY.size * self.entries
        bottom = top - len(run.entries)
        assert bottom >= run.end, "the reader leaves room for the index entries of what it reads"
        self.buffer[bottom:top] = run.entries
        self.used = run.end
        self.entries += run.frames
        self.events += run.events
        for track_id, (events, size) in run.tracks.items():
            self._add_track(track_id, events, size)

    def _add_track(self, track_id: int, events: int, size: int) -> None:
        total = self.tracks.get(track_id)
        if total is None:
            self.tracks[track_id] = [events, size]
        else:
            total[0] += events
            total[1] += size

    def write_checksum(self, *, end_marker: bool = True) -> None:
        """A CHECKSUM frame over the bytes since the last one, then an end marker that the next frame overwrites
        (the caller reserved ``CHECKSUM_RESERVE`` bytes for both)."""
        with memoryview(self.buffer) as view:
            crc = crc32c.crc32c(view[self.checked : self.used], crc_seed(self.seq))
        CHECKSUM_FRAME.pack_into(self.buffer, self.used, 4, CHECKSUM_TYPE, crc)
        self.used += CHECKSUM_FRAME.size
        self.checked = self.used
        if end_marker:
            self.write_end_marker()

    def write_end_marker(self) -> None:
        """A zero frame header at ``used``: recovery stops there (the caller reserved the room)."""
        FRAME_HEADER.pack_into(self.buffer, self.used, 0, 0)


class SegmentBuffers:
    """Where segment buffers come from and go back to: memory, or files of a data dir."""

    #: Whether segments carry CHECKSUM frames.
    checksums: bool = False
    fsync: FsyncPolicy = "never"

    def new(self, seq: int, size: int) -> Buffer:
        """A buffer of ``size`` bytes for segment ``seq``.

        Raises:
            OSError: no room for it (a full disk, say).
        """
        raise NotImplementedError

    def release(self, segment: Segment, *, reuse: bool) -> None:
        """The segment is gone: free its buffer (or keep it to reuse when ``reuse``)."""
        raise NotImplementedError

    def retire(self, segment: Segment) -> None:
        """The segment is gone, but still read (pinned): released later, and no longer a segment meanwhile."""

    def has(self, size: int) -> bool:
        """Whether ``new(size)`` would reuse a spare buffer."""
        return False

    def spare_sizes(self) -> Iterable[int]:
        """The sizes of the spare buffers kept for reuse."""
        return ()

    def spare_size(self, size: int, at_most: int) -> int:
        """The smallest size from ``size`` to ``at_most`` of a spare buffer; ``size`` when there is none."""
        fitting = [spare for spare in self.spare_sizes() if size <= spare <= at_most]
        return min(fitting, default=size)

    def trim(self, keep_bytes: int) -> None:
        """Free buffers kept for reuse beyond ``keep_bytes``."""

    @property
    def pooled_bytes(self) -> int:
        return 0

    def sync(self, segment: Segment, start: int, end: int) -> None:
        """Make bytes ``start:end`` of the segment durable (a data dir's fsync); safe on another thread."""


#: Buffers of a multiple of this are anonymous mappings on huge pages where the kernel allows (``madvise``): the
#: kernel's copy of each read into a segment then misses the TLB far less.
HUGE_PAGE_BYTES: Final = 2 * 1024 * 1024


def memory_buffer(size: int) -> Buffer:
    """A zeroed buffer of ``size`` bytes: on huge pages when ``size`` is a multiple of HUGE_PAGE_BYTES (an anonymous
    private mapping, zeroed by the kernel), else a bytearray."""
    if size % HUGE_PAGE_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return bytearray(size)
    buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # huge pages not enabled: small ones all the same
        buffer.madvise(mmap.MADV_HUGEPAGE)
    return buffer


class MemoryBuffers(SegmentBuffers):
    """Segment buffers in memory, recycled: a fresh buffer costs its page faults again on first touch, which was
    most of ingest's time when every segment got a new one."""

    def __init__(self) -> None:
        self._pool: dict[int, list[Buffer]] = {}
        self._pooled_bytes = 0

    @property
    def pooled_bytes(self) -> int:
        return self._pooled_bytes

    def has(self, size: int) -> bool:
        return bool(self._pool.get(size))

    def spare_sizes(self) -> Iterable[int]:
        return [size for size, spares in self._pool.items() if spares]

    def new(self, seq: int, size: int) -> Buffer:
        pool = self._pool.get(size)
        if pool:
            self._pooled_bytes -= size
            return pool.pop()
        return memory_buffer(size)

    def release(self, segment: Segment, *, reuse: bool) -> None:
        buffer = segment.buffer
        segment.buffer = bytearray()
        if reuse:
            self._pool.setdefault(len(buffer), []).append(buffer)
            self._pooled_bytes += len(buffer)

    def trim(self, keep_bytes: int) -> None:
        for size in sorted(self._pool, reverse=True):
            pool = self._pool[size]
            while pool and self._pooled_bytes > keep_bytes:
                pool.pop()
                self._pooled_bytes -= size


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
            return self._create(path, size)
        except OSError as exc:
            if exc.errno != errno.ENOSPC or not self._remover.pending:
                raise
        self._remover.wait()  # the files being removed give their room back
        return self._create(path, size)

    def _create(self, path: Path, size: int) -> mmap.mmap:
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
        for path in sorted(self.path.glob(f"*{SUFFIX}")):
            try:
                seq = int(path.name.removesuffix(SUFFIX))
            except ValueError:
                log.warning("ignoring %s: not a segment file name", path)
                continue
            self.highest_seq = max(self.highest_seq, seq)
            recovered = self._recover_one(path, seq, limits)
            if recovered is not None:
                yield recovered

    def _recover_one(self, path: Path, seq: int, limits: Limits) -> Recovered | None:
        """Raises:
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
            log.warning("removing %s: no events to keep (%s)", path, scan.why_cut or "nothing after the session frames")
            buffer.close()
            path.unlink(missing_ok=True)
            return None
        if scan.why_cut is not None:
            log.warning("%s: kept its first %d bytes, cut the rest: %s", path, scan.used, scan.why_cut)
        # Zero what was cut, so that the next recovery does not see it either.
        buffer[scan.used : size] = bytes(size - scan.used)
        return Recovered(seq, buffer, scan.used, scan.hello, scan.entries, scan.stats, scan.why_cut)


@dataclass
class Scan:
    """What ``scan_segment`` kept of a segment."""

    #: Bytes kept: everything up to the end of the last valid CHECKSUM frame.
    used: int = 0
    hello: Hello | None = None
    #: (offset, size, track, count, first_ts, last_ts) of each EVENTS frame kept.
    entries: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    #: The last STATS frame kept: the client's loss counters as of then.
    stats: Stats | None = None
    why_cut: str | None = None


def crc_seed(seq: int) -> int:
    """Each CHECKSUM's CRC-32C starts from the segment's number: a file reused for another segment keeps old frames
    and checksums after the new ones, and those can never validate as the new segment's."""
    return seq & 0xFFFFFFFF


def scan_segment(buffer: Buffer | bytes, limits: Limits, seq: int = 0) -> Scan:
    """Walk a segment's frames from the start; keep what a valid CHECKSUM frame covers and the decoder accepts.

    Zeros where a frame header would be are a clean end: a segment file is allocated in full when it opens.
    """
    scan = Scan()
    with memoryview(buffer) as view:
        if bytes(view[: PREAMBLE.size]) != _PREAMBLE_BYTES:
            scan.why_cut = "it does not start with the ringtrace preamble"
            return scan
        _SegmentScan(view, limits, seq, scan).walk()
    return scan


class _SegmentScan:
    """One walk of a segment's frames (``scan_segment``): what the next CHECKSUM frame will cover is pending, and kept
    in ``scan`` once that checksum matches."""

    __slots__ = ("checked", "crc", "decoder", "pending", "pending_stats", "position", "scan", "seed", "view")

    def __init__(self, view: memoryview, limits: Limits, seq: int, scan: Scan) -> None:
        self.view, self.scan = view, scan
        self.decoder = SessionDecoder(limits, live=False)
        self.decoder.receive_data(view[: PREAMBLE.size])
        #: Where the next frame starts, and where the bytes the next CHECKSUM frame covers start.
        self.checked = self.position = PREAMBLE.size
        self.seed = crc_seed(seq)
        self.crc = crc32c.crc32c(view[: self.checked], self.seed)
        self.pending: list[tuple[int, int, int, int, int, int]] = []
        self.pending_stats: Stats | None = None

    def walk(self) -> None:
        """Every frame, up to the zeros after the last one or the first that is cut (``why_cut``); then what is
        kept ends at the last checksum."""
        view, size = self.view, len(self.view)
        while self.position + FRAME_HEADER.size <= size:
            body_length, frame_type = FRAME_HEADER.unpack_from(view, self.position)
            if body_length == 0 and frame_type == 0:
                break  # the zeros after the last frame
            end = self.position + FRAME_HEADER.size + body_length
            if end > size:
                self.scan.why_cut = f"a frame at offset {self.position} runs past the end ({end} > {size} bytes)"
                break
            take = self._checksum if frame_type == CHECKSUM_TYPE else self._frame
            if not take(end):
                break
        self._end()

    def _checksum(self, end: int) -> bool:
        """The CHECKSUM frame ending at ``end``: what it covers is kept if it matches; False: it does not."""
        position, scan = self.position, self.scan
        body_length = end - position - FRAME_HEADER.size
        if body_length != 4 or struct.unpack_from("<I", self.view, position + FRAME_HEADER.size)[0] != self.crc:
            scan.why_cut = f"checksum mismatch over the bytes from offset {self.checked} to {position}"
            return False
        scan.entries.extend(self.pending)
        self.pending.clear()
        scan.stats = self.pending_stats
        self.checked = self.position = end
        self.crc = self.seed
        return True

    def _frame(self, end: int) -> bool:
        """Any other frame, ending at ``end``: decoded, and taken by its type; False: it does not decode."""
        position, view = self.position, self.view
        self.decoder.receive_data(view[position:end])
        try:
            frame = self.decoder.next_frame()
        except ProtocolError as exc:
            self.scan.why_cut = f"the frame at offset {position} does not decode: {exc}"
            return False
        take = _TAKE.get(type(frame))
        if take is not None:
            take(self, frame, end)
        self.crc = crc32c.crc32c(view[position:end], self.crc)
        self.position = end
        return True

    def _end(self) -> None:
        """Bytes after the last frame must be zeros, and every frame covered by a checksum; ``used`` ends at the
        last checksum."""
        scan, view, position, size = self.scan, self.view, self.position, len(self.view)
        if scan.why_cut is None and position < size and any(view[position : min(size, position + FRAME_HEADER.size)]):
            scan.why_cut = f"{size - position} bytes at offset {position} are less than a frame header"
            position = size
        if scan.why_cut is None and position > self.checked:
            scan.why_cut = f"the frames from offset {self.checked} to {position} are not covered by a checksum"
        scan.used = self.checked


# (``frame`` is of the type ``_TAKE`` maps to each.)
def _take_hello(walk: _SegmentScan, frame: Any, end: int) -> None:
    walk.scan.hello = frame


def _take_stats(walk: _SegmentScan, frame: Any, end: int) -> None:
    walk.pending_stats = frame


def _take_events(walk: _SegmentScan, frame: Any, end: int) -> None:
    position = walk.position
    walk.pending.append((position, end - position, frame.track_id, frame.count, frame.first_ts_ns, frame.last_ts_ns))


#: What a scan keeps of a decoded frame, by its type: the HELLO, the last STATS, the index entry of each EVENTS.
_TAKE: Final[dict[type, Callable[[_SegmentScan, Any, int], None]]] = {
    Hello: _take_hello,
    Stats: _take_stats,
    Events: _take_events,
}
