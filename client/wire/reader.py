"""Reading a ringtrace stream, sans-I/O: received bytes in, frames out (framing only: ``decoder.py`` holds the rules
of a stream).

Theory of operation
-------------------
``FrameReader`` checks the preamble, refuses a frame header larger than ``max_frame_bytes`` before its body is
buffered, skips unknown frame types that carry the ignorable bit, and refuses the rest. ``next_frame()`` returns a
frame, or a ``Sentinel`` when there is none to give: ``NEED_DATA``, ``CLOSED``, or ``NEW_STREAM``.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from typing import Final

from ringtrace.wire.errors import (
    BadPreamble,
    ConfigError,
    FrameTooLarge,
    ProtocolError,
    TornStream,
    UnexpectedFrame,
    UnsupportedVersion,
)
from ringtrace.wire.frames import (
    CHECKSUM_TYPE,
    DEFAULT_MAX_FRAME_BYTES,
    FRAME_CLASSES,
    FRAME_HEADER,
    IGNORABLE,
    MAGIC,
    MIN_MAX_FRAME_BYTES,
    PREAMBLE,
    SENDABLE_BY,
    STREAM_FORMAT,
    Frame,
    FrameType,
    Peer,
)

__all__ = ["CLOSED", "NEED_DATA", "NEW_STREAM", "FrameReader", "Sentinel", "complete_frames"]


class Sentinel:
    """A marker ``next_frame()`` returns instead of a frame: ``NEED_DATA`` or ``CLOSED``."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: ``FrameReader.next_frame()`` needs more bytes.
NEED_DATA: Final = Sentinel("NEED_DATA")
#: The peer closed the stream cleanly, at a frame boundary.
CLOSED: Final = Sentinel("CLOSED")
#: Another stream's preamble follows the last frame (a reader of ``concatenated`` files).
NEW_STREAM: Final = Sentinel("NEW_STREAM")

_MIN_READ = 64 * 1024


def complete_frames(next_frame: Callable[[], Frame | Sentinel]) -> Iterator[Frame]:
    """The frames ``next_frame`` gives until it needs more data or the stream is closed."""
    while True:
        frame = next_frame()
        if isinstance(frame, Sentinel):
            return
        yield frame


class FrameReader:
    """Turns the bytes one peer sends into frames (framing only; ``decoder.py`` enforces the order of frames).

    Theory of operation: received bytes live in ``_buf[_start:_end]``. ``next_frame()`` first checks the preamble
    (failing on the first byte that differs from the magic), then parses one frame at a time. A frame header is
    checked against ``max_frame_bytes`` and the frame types ``peer`` may send before its body is awaited, so a
    hostile length never makes us buffer it. Bytes arrive either by copy (``receive_data``) or straight into our
    buffer (``get_buffer`` + ``buffer_updated``, the shape of asyncio's BufferedProtocol). After a ProtocolError the
    reader is dead: every later call raises the same error.

    Args:
        peer: who sends the bytes, ``"client"`` or ``"collector"``.
        max_frame_bytes: the largest frame accepted, header included.
        borrow: EVENTS payloads (and ``last_frame()``) are views of the reader's buffer instead of copies: valid only
            until the next ``get_buffer`` or ``receive_data`` call. For a caller that stores each frame at once.
        read_size: the least free room ``get_buffer`` offers (larger: fewer, bigger reads).
        live: a connection, not a file: frame types of files only (CHECKSUM) are an error.
        concatenated: a file of streams end to end (a snapshot): a preamble where a frame header would be starts
            the next stream, and ``next_frame`` says so (``NEW_STREAM``).

    The collector's ingest reads with a subclass that may also read into memory it is lent (a segment), so that
    nothing is copied: it reaches the buffer and its offsets (``_buf``, ``_start``, ``_end``, ``_frame_start``).
    """

    __slots__ = (
        "_borrow",
        "_buf",
        "_concatenated",
        "_end",
        "_eof",
        "_error",
        "_frame_start",
        "_live",
        "_max_frame_bytes",
        "_peer",
        "_preamble_done",
        "_read_size",
        "_sendable",
        "_start",
        "skipped_frames",
    )

    def __init__(
        self,
        peer: Peer,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        *,
        borrow: bool = False,
        read_size: int = _MIN_READ,
        live: bool = True,
        concatenated: bool = False,
    ) -> None:
        if max_frame_bytes < MIN_MAX_FRAME_BYTES:
            raise ConfigError(f"max_frame_bytes must be >= {MIN_MAX_FRAME_BYTES}, got {max_frame_bytes}")
        self._peer = peer
        self._sendable = SENDABLE_BY[peer]
        self._max_frame_bytes = max_frame_bytes
        self._read_size = read_size
        self._buf: bytearray | mmap.mmap = bytearray(read_size)
        self._start = 0
        self._end = 0
        self._frame_start = 0
        self._borrow = borrow
        self._live = live
        self._concatenated = concatenated
        self._eof = False
        self._error: ProtocolError | None = None
        self._preamble_done = False
        #: Frames of unknown ignorable types, skipped.
        self.skipped_frames = 0

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return self._end - self._start

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A writable view of at least ``sizehint`` (default ``read_size``) free bytes; call ``buffer_updated`` next."""
        want = max(sizehint, self._read_size)
        start, end = self._start, self._end
        if start == end:
            self._start = self._end = start = end = 0
        if len(self._buf) - end < want:
            live = end - start
            if len(self._buf) - live >= want:
                # Move the unread bytes to the front (memmove): no new buffer, no page faults. Frames returned
                # earlier are copies, or borrowed views that were only valid until now.
                with memoryview(self._buf) as view:
                    view[:live] = view[start:end]
            else:
                fresh = self._new_buffer(max(live + want, 2 * live))
                fresh[:live] = self._buf[start:end]
                self._buf = fresh
            self._start, self._end = 0, live
        return memoryview(self._buf)[self._end :]

    def _new_buffer(self, size: int) -> bytearray | mmap.mmap:
        """A zeroed buffer of ``size`` bytes, for ``get_buffer`` to grow into (a subclass may allocate otherwise)."""
        return bytearray(size)

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the view ``get_buffer`` returned."""
        self._end += nbytes

    def last_frame(self) -> memoryview:
        """The bytes of the frame ``next_frame`` returned last, header included (see ``borrow``)."""
        return memoryview(self._buf)[self._frame_start : self._start]

    def fail(self, error: ProtocolError) -> None:
        """A rule above the framing was broken: every later call raises ``error``."""
        self._error = error

    def receive_data(self, data: bytes | memoryview) -> None:
        """Add received bytes; ``b""`` means the peer closed its side."""
        if not data:
            self._eof = True
            return
        with self.get_buffer(len(data)) as view:
            view[: len(data)] = data
        self.buffer_updated(len(data))

    def __iter__(self) -> Iterator[Frame]:
        """Every complete frame buffered now (stops at NEED_DATA or CLOSED)."""
        return complete_frames(self.next_frame)

    def next_frame(self) -> Frame | Sentinel:
        """The next complete frame, ``NEED_DATA``, ``CLOSED`` after a clean end of stream, or ``NEW_STREAM``.

        Raises:
            ProtocolError: the bytes break the protocol (a subclass says how).
        """
        if self._error is not None:
            raise self._error
        try:
            return self._next_frame()
        except ProtocolError as exc:
            self._error = exc
            raise

    def _next_frame(self) -> Frame | Sentinel:
        while True:
            available = self._end - self._start
            if not self._preamble_done:
                if not self._read_preamble(available):
                    return self._need_data(available)
                continue
            if available < FRAME_HEADER.size:
                return self._need_data(available)
            if self._concatenated and self._buf[self._start : self._start + len(MAGIC)] == MAGIC:
                self._preamble_done = False
                return NEW_STREAM
            body_length, frame_type = FRAME_HEADER.unpack_from(self._buf, self._start)
            size = FRAME_HEADER.size + body_length
            if size > self._max_frame_bytes:
                raise FrameTooLarge(size, self._max_frame_bytes)
            known = self._check_type(frame_type)
            if available < size:
                return self._need_data(available)
            body_start = self._start + FRAME_HEADER.size
            self._frame_start = self._start
            self._start += size
            if not known:
                self.skipped_frames += 1
                continue
            if self._borrow and frame_type == FrameType.EVENTS:
                body: bytes | memoryview = memoryview(self._buf)[body_start : body_start + body_length]
            else:
                body = bytes(self._buf[body_start : body_start + body_length])
            frame: Frame = FRAME_CLASSES[frame_type].decode_body(body)
            return frame

    def _read_preamble(self, available: int) -> bool:
        head = bytes(self._buf[self._start : self._start + min(available, PREAMBLE.size)])
        if head[: len(MAGIC)] != MAGIC[: len(head)]:
            # A TLS record starts with its content type: 0x16 a handshake (a TLS client), 0x15 an alert (a TLS server
            # refusing what a plain client sent).
            tls = " (the peer speaks TLS: use TLS on both sides, or on neither)" if head[0] in (0x15, 0x16) else ""
            raise BadPreamble(
                f"stream does not start with the ringtrace magic {MAGIC!r}: got {head[: len(MAGIC)]!r}{tls}"
            )
        if available < PREAMBLE.size:
            return False
        _, stream_format, _ = PREAMBLE.unpack(head)
        if stream_format != STREAM_FORMAT:
            raise UnsupportedVersion(
                f"stream format {stream_format} is not supported (this side reads format {STREAM_FORMAT})"
            )
        self._start += PREAMBLE.size
        self._preamble_done = True
        return True

    def _check_type(self, frame_type: int) -> bool:
        """True for a frame to decode, False for one to skip; raises for one that is not allowed."""
        if frame_type not in FRAME_CLASSES:
            if frame_type == CHECKSUM_TYPE and self._live:
                raise UnexpectedFrame(f"frame type {CHECKSUM_TYPE:#x} (CHECKSUM) is only valid in files")
            if frame_type & IGNORABLE:
                return False
            raise UnexpectedFrame(f"unknown frame type {frame_type} (not marked ignorable)")
        if frame_type not in self._sendable:
            raise UnexpectedFrame(f"a {self._peer} may not send {FrameType(frame_type).name} frames")
        return True

    def _need_data(self, available: int) -> Sentinel:
        if not self._eof:
            return NEED_DATA
        if available == 0:
            return CLOSED
        if not self._preamble_done:
            raise TornStream(f"stream ended inside the preamble after {available} of {PREAMBLE.size} bytes")
        raise TornStream(f"stream ended inside a frame: {available} bytes of an incomplete frame")
