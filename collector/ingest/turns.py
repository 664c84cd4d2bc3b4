"""Table frames decoded a loop turn at a time, so that no connection's FLUSH waits behind other connections' tables.

EVENTS frames are stored undecoded, but STRINGS, SCHEMA and TRACK frames are decoded and checked entry by entry
(``SessionDecoder``): on a 2-core box, 15 to 20 ms for a 1 MiB STRINGS frame of 50,000 strings, 5 to 10 us for a
TRACK frame. 40 connections filling their tables at once (each to every default limit) held the event loop for up to
2.5 s a turn, and a good client's flush took up to 4 s. So all connections together decode at most
``TABLE_BYTES_PER_TURN`` of these frames a loop turn (each frame counted ``FRAME_COST`` more than its size, for what
decoding any frame costs): past it, a connection whose next frame is one of them stops reading and waits in line, and
the next turns decode for those waiting, in the order they came. A frame begun is decoded whole (a turn may overrun
by one frame). Other frames are not held up: a connection that sends none of these is served as before. (Counted in
bytes, not time, so that connections driven in one callback, as tests do, take the same turns on any machine.)
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final, Protocol

from ringtrace.client.wire.frames import FrameType

__all__ = ["FRAME_COST", "TABLE_BYTES_PER_TURN", "TABLE_FRAMES", "DecodeTurns"]

#: Bytes of table frames decoded a loop turn, all connections together: 4 ms or so at 30 ns a byte.
TABLE_BYTES_PER_TURN: Final = 128 * 1024
#: What a frame costs beyond its bytes: a TRACK frame of 150 bytes took 5 us.
FRAME_COST: Final = 128
TABLE_FRAMES: Final = frozenset((FrameType.STRINGS, FrameType.SCHEMA, FrameType.TRACK))


class Waiting(Protocol):
    def decode_turn(self) -> None:
        """Decode the frames read (it is this connection's turn), then read on."""


class DecodeTurns:
    """The bytes of table frames decoded in this loop turn, and the connections waiting for a later one."""

    def __init__(self, turn_bytes: int = TABLE_BYTES_PER_TURN) -> None:
        self._turn_bytes = turn_bytes
        self._spent = 0
        self._waiting: deque[Waiting] = deque()
        self._serving: Waiting | None = None
        self._scheduled = False

    def may_decode(self, connection: Waiting) -> bool:
        """Whether ``connection`` may decode a table frame now. If not, it is in line for a later turn (its
        ``decode_turn`` is called then), and reads nothing meanwhile; one already waiting must not ask."""
        if self._spent < self._turn_bytes and (connection is self._serving or not self._waiting):
            return True
        self._waiting.append(connection)
        self._schedule()
        return False

    def spend(self, frame_bytes: int) -> None:
        """A table frame of ``frame_bytes`` was decoded."""
        self._spent += frame_bytes + FRAME_COST
        self._schedule()

    def _schedule(self) -> None:
        """The next turn begins with ``_turn`` (a callback scheduled now runs after this turn's I/O callbacks)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        self._scheduled = False
        self._spent = 0
        try:
            while self._waiting and self._spent < self._turn_bytes:
                self._serving = self._waiting.popleft()
                self._serving.decode_turn()
        finally:
            self._serving = None
            if self._waiting:
                self._schedule()
