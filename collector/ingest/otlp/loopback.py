"""A native connection inside the collector, for the OTLP receiver: its frames go through the very ingest path a TCP
client's do (``IngestProtocol``: the rules of a stream, the limits, the store, the accounting), over an in-memory
transport rather than a socket.

The receiver turns each OTLP request into native frames (``spans.py``) and sends them with a FLUSH; the request is
answered once the FLUSH_ACK says they are stored, or with what the collector refused (REFUSED) or why it closed the
connection (GOODBYE, or a protocol error, logged as for any connection).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from ringtrace.collector.ingest.connection import IngestProtocol, IngestSink
from ringtrace.collector.store.processes import ProcessRecord
from ringtrace.wire.decoder import ReplyDecoder
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import Flush, FlushAck, Goodbye, Hello, Refused, Welcome, encode, preamble

__all__ = ["Delivered", "LoopbackClosed", "LoopbackConnection"]

#: FLUSH tokens of loopback connections (each connection answers only its own).
_tokens = itertools.count(1)


class LoopbackClosed(Exception):
    """The collector closed the loopback connection: ``reason`` says why (a GOODBYE's, or the logged error's)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Delivered:
    """What became of the frames sent before one FLUSH: ``refused`` events the store could not take."""

    __slots__ = ("refused",)

    def __init__(self, refused: int) -> None:
        self.refused = refused


class _MemoryTransport(asyncio.Transport):
    """The transport an ``IngestProtocol`` writes its answers to, and whose reading it pauses and resumes."""

    def __init__(self, owner: LoopbackConnection) -> None:
        super().__init__()
        self._owner = owner
        self._closing = False
        self._reading = asyncio.Event()
        self._reading.set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._owner.name if name == "peername" else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._owner.answers(bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._shut()

    def abort(self) -> None:
        self._shut()

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def is_reading(self) -> bool:
        return self._reading.is_set()

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False  # (a GOODBYE is read at once: nothing to drain)

    async def readable(self) -> None:
        await self._reading.wait()

    def _shut(self) -> None:
        if not self._closing:
            self._closing = True
            self._reading.set()  # a sender waiting to write learns it is closed
            asyncio.get_running_loop().call_soon(self._owner.lost)


class LoopbackConnection:
    """One native stream into this collector's ingest, made of OTLP data (one OTLP resource: one process), one of
    ``members`` (the receiver's loopback connections: no client connection's slot is taken by it)."""

    def __init__(self, sink: IngestSink, name: str, members: set[IngestProtocol]) -> None:
        self.name = name
        self._protocol = IngestProtocol(sink, loopback=members)
        self._transport = _MemoryTransport(self)
        self._replies = ReplyDecoder()
        self._welcome: asyncio.Future[Welcome] = asyncio.get_running_loop().create_future()
        self._acks: dict[int, asyncio.Future[Delivered]] = {}
        self._refused = 0
        #: One writer at a time: a FLUSH_ACK the collector asked for must not land inside a request's frames, which go
        #: in a turn at a time (reading paused between turns).
        self._writing = asyncio.Lock()
        self.closed_why: str | None = None
        #: Called once the connection is gone (the receiver forgets its stream).
        self.on_lost: Callable[[], None] | None = None
        self._protocol.connection_made(self._transport)

    @property
    def process(self) -> ProcessRecord | None:
        """The process it speaks for, once its HELLO was accepted."""
        return self._protocol.process

    @property
    def closed(self) -> bool:
        return self.closed_why is not None or self._transport.is_closing()

    async def open(self, hello: Hello) -> Welcome:
        """Send the preamble and ``hello``; the collector's WELCOME.

        Raises:
            LoopbackClosed: the collector refused the connection.
        """
        await self._feed(preamble() + encode(hello))
        return await self._welcome

    async def send(self, frames: list[bytes]) -> Delivered:
        """Send ``frames`` and a FLUSH; once everything before it is stored, what the store refused of it.

        Raises:
            LoopbackClosed: the collector closed the connection (a frame broke a rule): nothing after that is stored.
        """
        token = next(_tokens)
        done = self._acks[token] = asyncio.get_running_loop().create_future()
        await self._feed(b"".join([*frames, encode(Flush(token))]))
        delivered: Delivered = await done
        return delivered

    def close(self) -> None:
        if not self._transport.is_closing():
            self._protocol.eof_received()
            self._transport.close()

    async def _feed(self, data: bytes) -> None:
        async with self._writing:
            await self._feed_whole(data)

    async def _feed_whole(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            await self._transport.readable()
            if self.closed:
                raise LoopbackClosed(self.closed_why or "the collector closed the connection")
            buffer = self._protocol.get_buffer(len(view))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            view = view[size:]
            self._protocol.buffer_updated(size)
        if self.closed:
            raise LoopbackClosed(self.closed_why or "the collector closed the connection")

    # -- what the collector answers (called by the transport) -----------------------------------------------------

    def answers(self, data: bytes) -> None:
        self._replies.receive_data(data)
        try:
            for frame in self._replies:
                self._answer(frame)
        except ProtocolError as exc:  # (our own collector: never expected)
            self._fail(f"unexpected answer: {exc}")

    def _answer(self, frame: object) -> None:
        if isinstance(frame, Welcome):
            if not self._welcome.done():
                self._welcome.set_result(frame)
        elif isinstance(frame, Refused):
            self._refused += frame.events
        elif isinstance(frame, FlushAck):
            done = self._acks.pop(frame.token, None)
            if done is not None and not done.done():
                done.set_result(Delivered(self._refused))
            self._refused = 0
        elif isinstance(frame, Flush):  # the collector asks for a flush: everything sent is sent
            self.answers_flush(frame.token)
        elif isinstance(frame, Goodbye):
            self._fail(frame.reason)

    def answers_flush(self, token: int) -> None:
        asyncio.get_running_loop().call_soon(self._feed_soon, encode(FlushAck(token)))

    def _feed_soon(self, data: bytes) -> None:
        if not self.closed:
            asyncio.ensure_future(self._feed(data)).add_done_callback(_ignore_closed)

    def lost(self) -> None:
        """The transport closed: the connection is gone (``IngestProtocol.connection_lost``)."""
        self._protocol.connection_lost(None)
        self._fail("the collector closed the connection")
        if self.on_lost is not None:
            self.on_lost()

    def _fail(self, why: str) -> None:
        if self.closed_why is None:
            self.closed_why = why
        error = LoopbackClosed(self.closed_why)
        if not self._welcome.done():
            self._welcome.set_exception(error)
            self._welcome.exception()  # (retrieved: nobody may wait for it)
        for future in self._acks.values():
            if not future.done():
                future.set_exception(error)
        self._acks.clear()


def _ignore_closed(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a connection closed meanwhile has said why already
