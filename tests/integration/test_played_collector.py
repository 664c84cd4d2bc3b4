"""Against a peer playing the collector: its SET_PRIORITY frames, and the limits of its WELCOME.

The peer uses the real sans-I/O session decoder over a real loopback socket: it reads the client's stream, welcomes
it, sends what a test asks, and reads what the client records after; a broken stream rule ends it with the error.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import ringtrace.client
from ringtrace.client import MemoryListener, Streamer, Timeline
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.frames import Events, Flush, FlushAck, SetPriority, encode, preamble
from ringtrace.wire.stream_limits import Limits
from waiting import wait_for


class PlayedCollector:
    """Accepts one client, welcomes it, and collects the names of the events it sends."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.error: Exception | None = None
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.names: list[str] = []
        self.acks: set[int] = set()
        self.welcomed = threading.Event()
        self.connection: socket.socket | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        connection, _ = self.server.accept()
        self.connection = connection
        decoder = SessionDecoder(self.limits, live=True)
        while True:
            try:
                data = connection.recv(65536)
            except OSError:  # closed by close()
                return
            decoder.receive_data(data)
            try:
                frames = list(decoder)
            except Exception as exc:  # a broken rule: what a real collector would close the connection for
                self.error = exc
                return
            for frame in frames:
                if decoder.hello is not None and not self.welcomed.is_set():
                    connection.sendall(preamble() + encode(decoder.welcome()))
                    self.welcomed.set()
                if isinstance(frame, Events):
                    self.names += [event.name for event in decoder.tables.events(frame)]
                elif isinstance(frame, Flush):
                    connection.sendall(encode(FlushAck(frame.token)))
                elif isinstance(frame, FlushAck):
                    self.acks.add(frame.token)
            if not data:
                return

    def round_trip(self, token: int = 99) -> None:
        """Send FLUSH and wait for its FLUSH_ACK: the client has handled everything sent before."""
        self.send(Flush(token))
        wait_for(lambda: token in self.acks, timeout_s=30, what=f"the FLUSH_ACK of {token}", interval_s=0.01)

    def send(self, frame: SetPriority | Flush) -> None:
        assert self.connection is not None
        self.connection.sendall(encode(frame))

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.server.close()


@pytest.fixture
def played() -> Iterator[PlayedCollector]:
    peer = PlayedCollector()
    yield peer
    peer.close()


def test_set_priority_from_the_collector_turns_debug_messages_on(played: PlayedCollector) -> None:
    streamer = Streamer(played.address, ringtrace.client.StreamerOptions())
    memory = MemoryListener()
    tl = Timeline("engine", [streamer, memory])
    other = Timeline("other")  # not streamed to this collector: untouched
    debug = tl.message("engine", "debug", "detail $x")
    debug(1)
    assert tl.flush(10)  # connects, and is acknowledged
    assert played.welcomed.is_set()
    played.send(SetPriority("debug"))
    wait_for(lambda: tl.priority, until=lambda p: p == "debug", timeout_s=30, what="the priority set", interval_s=0.01)
    debug(2)
    played.send(SetPriority("warning", timeline="someone else"))  # for another timeline: ignored
    played.send(SetPriority("loud"))  # not a priority: warned about, ignored
    played.round_trip()  # the client has handled both by the time it answers a FLUSH sent after them
    debug(3)
    assert tl.flush(10)
    assert [e.name for e in memory.events] == ["detail x(2)", "detail x(3)"]  # not x(1): debug was off
    wait_for(
        lambda: played.names,
        until=lambda names: names == ["detail x(2)", "detail x(3)"],
        timeout_s=30,
        what="both debug messages played",
        interval_s=0.01,
    )
    assert (tl.priority, other.priority) == ("debug", "info")
    tl.close()


def test_a_client_declares_no_more_kinds_than_the_collector_takes() -> None:
    played = PlayedCollector(Limits(max_kinds=12))
    try:
        for i in range(5):  # more kinds than the limit, whatever other tests defined
            type(f"Kind{i}", (ringtrace.client.Event,), {"__annotations__": {"v": "int"}, "__module__": __name__})
        tl = Timeline("kinds", [Streamer(played.address, ringtrace.client.StreamerOptions())])
        tl.instant("fits")
        assert tl.flush(10)
        wait_for(
            lambda: played.names,
            until=lambda names: names == ["fits"],
            timeout_s=30,
            what="the instant played",
            interval_s=0.01,
        )
        assert played.error is None
        tl.close()
    finally:
        played.close()
