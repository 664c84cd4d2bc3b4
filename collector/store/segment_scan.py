"""A segment's frames walked from the start (``scan_segment``): what a valid CHECKSUM frame covers and the decoder
accepts is kept, the rest cut with the reason (recovery of a data dir, and the reading of a segment file). A segment
whose first checksum does not match its number may be one renamed or copied from another name: ``written_as`` finds
the number its checksums were made with, if there is one."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import crc32c
from ringtrace.collector.store.segments import Buffer, crc_seed
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frame_types import CHECKSUM_TYPE, FRAME_HEADER, PREAMBLE
from ringtrace.wire.frames import Events, Stats, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.stream_limits import Limits

__all__ = ["Scan", "scan_segment", "written_as"]

_PREAMBLE_BYTES: Final = preamble()


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
    #: (where the bytes it covers end, the CRC it holds) of the first CHECKSUM frame, when it did not match: what
    #: ``written_as`` solves for the number the segment was written as.
    first_mismatch: tuple[int, int] | None = None


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
        stored = struct.unpack_from("<I", self.view, position + FRAME_HEADER.size)[0] if body_length == 4 else None
        if stored != self.crc:
            scan.why_cut = f"checksum mismatch over the bytes from offset {self.checked} to {position}"
            if stored is not None and self.checked == PREAMBLE.size:  # (no checksum matched before it)
                scan.first_mismatch = (position, stored)
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


def written_as(buffer: Buffer | bytes, limits: Limits, scan: Scan) -> int | None:
    """The segment number (its low 32 bits, what seeds its CRCs: ``crc_seed``) under which every checksum of a
    segment whose first checksum did not match (``scan``) matches, and it is kept whole: a file renamed or copied from
    that number's name. None for a segment corrupted in another way (a second checksum tells them apart)."""
    if scan.first_mismatch is None:
        return None
    covered_end, stored = scan.first_mismatch
    with memoryview(buffer) as view, view[:covered_end] as covered:
        # A CRC is affine in its seed: crc(seed) = crc(0) ^ M(seed), M linear; M's columns are those of the seed's bits.
        base = crc32c.crc32c(covered, 0)
        seed = _solve([crc32c.crc32c(covered, 1 << bit) ^ base for bit in range(32)], stored ^ base)
    if seed is None:
        return None
    again = scan_segment(buffer, limits, seed)
    return seed if again.why_cut is None and again.entries else None


def _solve(columns: list[int], target: int) -> int | None:
    """The bits ``s`` such that the columns of the set bits of ``s`` XOR to ``target`` (Gaussian elimination over
    GF(2)); None if there is none."""
    basis: dict[int, tuple[int, int]] = {}  # leading bit -> (a vector, the columns that XOR to it)
    for bit, column in enumerate(columns):
        vector, made_of = column, 1 << bit
        while vector:
            lead = vector.bit_length() - 1
            if lead not in basis:
                basis[lead] = (vector, made_of)
                break
            vector ^= basis[lead][0]
            made_of ^= basis[lead][1]
    solution = 0
    while target:
        lead = target.bit_length() - 1
        if lead not in basis:
            return None
        target ^= basis[lead][0]
        solution ^= basis[lead][1]
    return solution


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
