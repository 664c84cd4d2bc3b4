"""The client's sender thread against a real collector, or a bare TCP listener that plays a broken one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from collector_process import CollectorProcess, events
from ringtrace.client.protocol import PREAMBLE
from ringtrace.client.timeline import Timeline
from ringtrace.client.transport import Transport, TransportOptions


def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def sender(address: str, **options: Any) -> tuple[Timeline, Transport]:
    """A timeline of our own (not the process-wide one) with a sender to ``address``, not started yet."""
    timeline = Timeline()
    transport = Transport(timeline, address, TransportOptions(**options))
    timeline.attach(transport)
    return timeline, transport


def stop(timeline: Timeline, transport: Transport) -> None:
    timeline.close(timeout_s=0)
    transport._thread.join(10)


class BareListener:
    """A TCP listener on 127.0.0.1 that accepts one connection at a time and reads it, never answering.

    Args:
        hang_up_after: close each connection once this many bytes came in (None: keep it open).
    """

    def __init__(self, hang_up_after: int | None = None) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self.hang_up_after = hang_up_after
        self.accepted = 0
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with conn:
                self.accepted += 1
                conn.settimeout(0.05)
                got = 0
                while not self._stop.is_set() and (self.hang_up_after is None or got < self.hang_up_after):
                    try:
                        data = conn.recv(65536)
                    except TimeoutError:
                        continue
                    except OSError:
                        break
                    if not data:
                        break
                    got += len(data)
                    self.received += len(data)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._server.close()


@pytest.fixture
def silent_listener() -> Iterator[BareListener]:
    listener = BareListener()
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture
def hanging_up_listener() -> Iterator[BareListener]:
    listener = BareListener(hang_up_after=PREAMBLE.size)
    try:
        yield listener
    finally:
        listener.close()


# -- the select loop -----------------------------------------------------------------------------------------------


def test_sender_does_not_spin_while_waiting_for_welcome(silent_listener: BareListener) -> None:
    timeline, transport = sender(silent_listener.address, batch_interval_s=3600)
    timeline.instant("queued before the collector answers")
    selects = [0]
    real_select = transport._selector.select

    def counting_select(timeout: float | None = None) -> Any:
        selects[0] += 1
        return real_select(timeout)

    transport._selector.select = counting_select  # type: ignore[method-assign]
    transport.start()
    try:
        assert wait_until(lambda: silent_listener.received >= PREAMBLE.size)
        # Nothing is due for an hour and the peer is silent: the sender has no reason to wake up.
        assert not wait_until(lambda: selects[0] >= 10_000, timeout_s=2.0), f"{selects[0]} select() calls"
    finally:
        stop(timeline, transport)


# -- reconnect backoff ----------------------------------------------------------------------------------------------


def test_backoff_grows_when_every_connection_is_closed_after_the_handshake(
    hanging_up_listener: BareListener,
) -> None:
    timeline, transport = sender(hanging_up_listener.address, backoff_initial_s=0.01, backoff_max_s=10.0)
    transport.start()
    try:
        assert wait_until(lambda: hanging_up_listener.accepted >= 8)
        # Seven connections in a row failed; with exponential backoff the next wait is up to 0.01 * 2**7 s.
        assert transport._backoff_s >= 0.01 * 2**4
    finally:
        stop(timeline, transport)


# -- names that kill the sender --------------------------------------------------------------------------------------

NAMES = pytest.mark.parametrize("name", ["worker-\udcff", "w" * (2 << 20)], ids=["lone-surrogate", "2MiB"])


@NAMES
def test_odd_process_name_does_not_stop_tracing(collector: CollectorProcess, name: str) -> None:
    timeline, transport = sender(collector.tcp_address, process_name=name)
    transport.start()
    try:
        timeline.instant("recorded")
        assert timeline.flush(timeout_s=5)
        assert [e["name"] for e in events(collector.snapshot(), "i")] == ["recorded"]
    finally:
        stop(timeline, transport)


@NAMES
def test_odd_thread_name_does_not_stop_tracing(collector: CollectorProcess, name: str) -> None:
    timeline, transport = sender(collector.tcp_address)
    transport.start()
    try:
        worker = threading.Thread(target=timeline.instant, args=("from-odd-thread",), name=name)
        worker.start()
        worker.join()
        timeline.instant("from-main-thread")
        assert timeline.flush(timeout_s=5)
        names = {e["name"] for e in events(collector.snapshot(), "i")}
        assert names == {"from-odd-thread", "from-main-thread"}
    finally:
        stop(timeline, transport)


def test_after_the_sender_dies_recording_keeps_nothing(collector: CollectorProcess) -> None:
    timeline, transport = sender(collector.tcp_address)

    def broken_loop() -> None:
        raise RuntimeError("any unexpected error in the sender")

    transport._loop = broken_loop  # type: ignore[method-assign]
    transport.start()
    try:
        assert wait_until(lambda: not transport._thread.is_alive())
        for i in range(10_000):
            timeline.instant("after the sender died", i=i)
        assert sum(len(buffer.events) for buffer in timeline.buffers()) == 0
    finally:
        stop(timeline, transport)


def test_resplit_after_welcome_survives_int_keyed_arguments() -> None:
    small = CollectorProcess("--max-frame-size", "64KiB")
    try:
        timeline, transport = sender(small.tcp_address)
        # Recorded before the sender starts: the first sweep packs them under the client's 1 MiB limit, before WELCOME.
        for i in range(2000):
            timeline.instant("lookup", by_status={200: i}, pad="x" * 64)
        transport.start()
        try:
            assert timeline.flush(timeout_s=5)
            assert len(events(small.snapshot(), "i")) == 2000
        finally:
            stop(timeline, transport)
    finally:
        small.stop()


# -- connect() to another collector, fork ------------------------------------------------------------------------------

_SWITCH = """
import json, socket, sys, threading
import ringtrace.client
from ringtrace.client import default_timeline

# A listener whose accept queue is full: connecting to it blocks until connect_timeout_s.
blackhole = socket.socket()
blackhole.bind(("127.0.0.1", 0))
blackhole.listen(0)
filler = socket.create_connection(blackhole.getsockname())
old = "127.0.0.1:%d" % blackhole.getsockname()[1]

tl = ringtrace.client.connect(old, connect_timeout_s=3.0, exit_timeout_s=0.1)
tl.flush(timeout_s=0)  # starts the sender, which now blocks connecting
old_sender = tl.transport
# Move to the real collector; closing the old sender gives up after exit_timeout_s, with it still connecting.
tl = ringtrace.client.connect(sys.argv[1], batch_interval_s=3600, exit_timeout_s=0.1)
assert tl.flush(timeout_s=20)  # the new sender is connected and has swept once; the next sweep is due in an hour
for i in range(1000):
    tl.instant("for-the-new-collector", i=i)
old_sender._thread.join(30)
print(json.dumps({"flushed": tl.flush(timeout_s=20), "dropped": tl.transport.dropped_events}))
"""


def test_events_recorded_after_connect_switch_reach_the_new_collector(collector: CollectorProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SWITCH, collector.tcp_address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {"flushed": True, "dropped": 0}
    assert len(events(collector.snapshot(), "i")) == 1000


_FORK_AFTER_CLOSE = """
import os, sys
import ringtrace.client
tl = ringtrace.client.connect(sys.argv[1])
tl.close(timeout_s=1)
pid = os.fork()
if pid == 0:
    tl.instant("child")
    print("child traces:", ringtrace.client.default_timeline().transport is not None, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_child_forked_after_close_does_not_trace(collector: CollectorProcess) -> None:
    done = subprocess.run(
        # Python 3.12+ warns that fork() in a process with threads may deadlock; not what is tested here.
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", _FORK_AFTER_CLOSE, collector.tcp_address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["child", "traces:", "False"]


# -- what flush() promises -------------------------------------------------------------------------------------------


def test_flush_is_not_true_when_events_recorded_before_it_were_dropped(collector: CollectorProcess) -> None:
    timeline, transport = sender(collector.tcp_address, max_queue_bytes=1)
    transport.start()
    try:
        for i in range(100):
            timeline.instant("recorded", i=i)
        flushed = timeline.flush(timeout_s=20)
        stored = len(events(collector.snapshot(), "i"))
        assert transport.dropped_events == 100 and stored == 0
        assert not flushed
    finally:
        stop(timeline, transport)
