"""Table frames decoded and sockets read a loop turn at a time, so that no connection's FLUSH (nor a timer, nor an
HTTP request) waits behind other connections' tables or bytes.

EVENTS frames are stored undecoded, but STRINGS, SCHEMA and TRACK frames are decoded and checked entry by entry
(``SessionDecoder``): on a 2-core box, 15 to 20 ms for a 1 MiB STRINGS frame of 50,000 strings, 5 to 10 us for a
TRACK frame. 40 connections filling their tables at once (each to every default limit) held the event loop for up to
2.5 s a turn, and a good client's flush took up to 4 s. So all connections together decode at most
``TABLE_BYTES_PER_TURN`` of these frames a loop turn (each frame counted ``FRAME_COST`` more than its size, for what
decoding any frame costs): past it, a connection whose next frame is one of them stops reading and waits in line, and
the next turns decode for those waiting, in the order they came. A frame begun is decoded whole (a turn may overrun
by one frame). Other frames are not held up: a connection that sends none of these is served as before. (Counted in
bytes, not time, so that connections driven in one callback, as tests do, take the same turns on any machine.)

Reading itself takes turns too (``ReadTurns``): a connection that read ``TURN_BYTES`` since its last turn, or that
read when all connections together had read ``LOOP_TURN_BYTES`` in this loop turn, stops reading and waits in line;
each turn lets the first ``READERS_PER_TURN`` of the line read on. Before, 100 busy connections each read what their
sockets held in every turn, tens of MB: the event loop worked 100 to 500 ms at a stretch (by its own CPU time, with a
data dir), and every timer, FLUSH_ACK and HTTP request waited as long; now under 10 ms.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final, Protocol

from ringtrace.wire.frame_types import FrameType

__all__ = [
    "FRAME_COST",
    "READERS_PER_TURN",
    "TABLE_BYTES_PER_TURN",
    "TABLE_FRAMES",
    "TURN_BYTES",
    "DecodeTurns",
    "ReadTurns",
]

#: Bytes of table frames decoded a loop turn, all connections together: 4 ms or so at 30 ns a byte.
TABLE_BYTES_PER_TURN: Final = 128 * 1024
#: What a frame costs beyond its bytes: a TRACK frame of 150 bytes took 5 us.
FRAME_COST: Final = 128
TABLE_FRAMES: Final = frozenset((FrameType.STRINGS, FrameType.SCHEMA, FrameType.TRACK, FrameType.STACKS))
#: Bytes a connection reads before it lets every other connection read once (a loop turn): one read into a segment
#: (``DIRECT_READ_SIZE``), for each read and each pause costs Python beside the copy.
TURN_BYTES: Final = 2048 * 1024
#: Bytes all connections together read in a loop turn before the ones that read more wait in line: a few ms.
LOOP_TURN_BYTES: Final = 2 * 1024 * 1024
#: Connections in line that read on each loop turn.
READERS_PER_TURN: Final = 4


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


class Reading(Protocol):
    def next_turn(self) -> None:
        """Read on (it is this connection's turn)."""


class ReadTurns:
    """The bytes all connections read in this loop turn, and the connections in line to read on: ``per_turn`` of them
    each turn, in the order they came, those that read less than ``TURN_BYTES`` since their last turn first (a quiet
    client's FLUSH does not wait behind the busy ones); see the module docstring."""

    def __init__(self, turn_bytes: int = LOOP_TURN_BYTES, per_turn: int = READERS_PER_TURN) -> None:
        self._turn_bytes = turn_bytes
        self._per_turn = per_turn
        self._spent = 0
        self._quiet: deque[Reading] = deque()
        self._busy: deque[Reading] = deque()
        self._scheduled = False

    @property
    def spent(self) -> bool:
        """Whether the connections together have read their share of this turn."""
        return self._spent >= self._turn_bytes

    def spend(self, nbytes: int) -> bool:
        """A connection read ``nbytes``; whether the connections together have read their share of this turn (the
        connection waits in line then)."""
        self._spent += nbytes
        self._schedule()
        return self._spent >= self._turn_bytes

    def wait(self, connection: Reading, *, busy: bool) -> None:
        """``connection`` stopped reading: it reads on in a later turn. ``busy``: it read ``TURN_BYTES`` since its
        last turn (it waits behind the others)."""
        (self._busy if busy else self._quiet).append(connection)
        self._schedule()

    def forget(self, connection: Reading) -> None:
        """``connection`` is gone: it waits no more."""
        for line in (self._quiet, self._busy):
            if connection in line:
                line.remove(connection)

    def _schedule(self) -> None:
        """The next turn begins with ``_turn`` (a callback scheduled now runs after this turn's I/O callbacks)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        self._scheduled = False
        self._spent = 0
        for _ in range(self._per_turn):
            line = self._quiet or self._busy
            if not line:
                break
            line.popleft().next_turn()
        if self._quiet or self._busy:
            self._schedule()
