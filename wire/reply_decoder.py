"""Reading a collector's replies at the client, sans-I/O: WELCOME (or GOODBYE) first, then the control frames."""

from __future__ import annotations

from collections.abc import Iterator

from ringtrace.wire.errors import ProtocolError, UnexpectedFrame
from ringtrace.wire.frame_types import DEFAULT_MAX_FRAME_BYTES
from ringtrace.wire.frames import Frame, Goodbye
from ringtrace.wire.handshake_frames import Welcome
from ringtrace.wire.reader import FrameReader

__all__ = ["ReplyDecoder"]


class ReplyDecoder:
    """Reads what a collector sends a client: WELCOME (or GOODBYE) first, then FLUSH, FLUSH_ACK, GOODBYE."""

    __slots__ = ("_reader", "welcomed")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._reader = FrameReader("collector", max_frame_bytes)
        self.welcomed = False

    def receive_data(self, data: bytes) -> None:
        self._reader.receive_data(data)

    def __iter__(self) -> Iterator[Frame]:
        """Every complete frame buffered now.

        Raises:
            ProtocolError: the collector broke a rule.
        """
        for frame in self._reader:
            try:
                if isinstance(frame, Welcome):
                    if self.welcomed:
                        raise UnexpectedFrame("WELCOME may only be the first frame")
                    self.welcomed = True
                elif not self.welcomed and not isinstance(frame, Goodbye):
                    raise UnexpectedFrame(f"first frame from a collector must be WELCOME, got {frame.TYPE.name}")
            except ProtocolError as exc:
                self._reader.fail(exc)  # the stream is dead: every later call raises the same error
                raise
            yield frame
