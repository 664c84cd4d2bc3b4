"""The collector streamer against a real collector, or a bare TCP listener that plays a broken one."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from collector_process import CollectorProcess, events
from ringtrace.client import Streamer, StreamerOptions, Timeline
from ringtrace.wire.frame_types import PREAMBLE
from ringtrace.wire.model import INSTANT, THREAD_TRACK, TrackInfo
from waiting import wait_for


def streamed(address: str, **options: Any) -> tuple[Timeline, Streamer]:
    """A timeline of our own (not the process-wide one) streamed to ``address``."""
    streamer = Streamer(address, StreamerOptions(**options))
    return Timeline("test", [streamer]), streamer


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


# -- the select loop and the backoff -------------------------------------------------------------------------------


def test_streamer_does_not_spin_while_waiting_for_welcome(silent_listener: BareListener) -> None:
    timeline, _ = streamed(silent_listener.address)
    try:
        timeline.instant("queued before the collector answers")
        assert timeline.flush(timeout_s=0.5) is False  # no WELCOME: not delivered
        wait_for(
            lambda: silent_listener.received, until=lambda n: n >= PREAMBLE.size, timeout_s=30, what="the preamble"
        )
        # The peer is silent: the process may burn at most a small part of a core while we wait (a spin burns all).
        cpu_before, wall_before = time.process_time(), time.monotonic()
        time.sleep(1.0)  # (an idle second on purpose, to measure)
        cpu = time.process_time() - cpu_before
        assert cpu < 0.5 * (time.monotonic() - wall_before), f"{cpu:.2f}s of CPU while idle"
    finally:
        timeline.close(timeout_s=0)


def test_backoff_grows_when_every_connection_is_closed_before_welcome(hanging_up_listener: BareListener) -> None:
    timeline, streamer = streamed(hanging_up_listener.address, backoff_initial_s=0.01, backoff_max_s=10.0)
    streamer.start()
    try:
        wait_for(lambda: hanging_up_listener.accepted, until=lambda n: n >= 6, timeout_s=30, what="six connections")
        # With exponential backoff from 10 ms, the next attempts are 0.64 s, 1.28 s, ... apart: far fewer than 40
        # connections in the next 3 s (without it, hundreds).
        time.sleep(3.0)  # (3 s passing on purpose)
        assert hanging_up_listener.accepted < 40
    finally:
        timeline.close(timeout_s=0)


# -- names that must not stop tracing --------------------------------------------------------------------------------

NAMES = pytest.mark.parametrize("name", ["worker-\udcff", "w" * (2 << 20)], ids=["lone-surrogate", "2MiB"])


@NAMES
def test_odd_process_name_does_not_stop_tracing(collector: CollectorProcess, name: str) -> None:
    timeline, _ = streamed(collector.tcp_address, process_name=name)
    try:
        timeline.instant("recorded")
        assert timeline.flush(timeout_s=10)
        assert [e["name"] for e in events(collector.snapshot(), "i")] == ["recorded"]
    finally:
        timeline.close(timeout_s=0)


@NAMES
def test_odd_thread_name_does_not_stop_tracing(collector: CollectorProcess, name: str) -> None:
    timeline, _ = streamed(collector.tcp_address)
    try:
        worker = threading.Thread(target=timeline.instant, args=("from-odd-thread",), name=name)
        worker.start()
        worker.join()
        timeline.instant("from-main-thread")
        assert timeline.flush(timeout_s=10)
        names = {e["name"] for e in events(collector.snapshot(), "i")}
        assert names == {"from-odd-thread", "from-main-thread"}
    finally:
        timeline.close(timeout_s=0)


def test_frames_packed_before_welcome_are_split_again_to_the_collectors_limit() -> None:
    small = CollectorProcess("--max-frame-size", "64KiB")
    try:
        timeline, streamer = streamed(small.tcp_address, batch_interval_s=3600)
        # Recorded and swept before the streamer connects: packed under the client's 1 MiB limit, before WELCOME.
        for i in range(2000):
            timeline.instant("lookup", by_status={200: i}, pad="x" * 64)
        try:
            assert timeline.flush(timeout_s=10)
            assert len(events(small.snapshot(), "i")) == 2000
            assert streamer.dropped_events == 0
        finally:
            timeline.close(timeout_s=0)
    finally:
        small.stop()


def test_flush_is_not_true_when_events_recorded_before_it_were_dropped(collector: CollectorProcess) -> None:
    timeline, streamer = streamed(collector.tcp_address, max_queue_bytes=1)
    try:
        for i in range(100):
            timeline.instant("recorded", i=i)
        flushed = timeline.flush(timeout_s=1)  # (never acknowledged: it waits its whole timeout)
        stored = len(events(collector.snapshot(), "i"))
        assert streamer.dropped_events == 100 and stored == 0
        assert not flushed
        reported = lambda: collector.snapshot()["otherData"]["client_dropped_events"]  # noqa: E731
        wait_for(reported, until=lambda n: n >= 100, timeout_s=30, what="the drop reported to the collector")
        assert reported() == 100
    finally:
        timeline.close(timeout_s=0)


def test_what_the_flusher_hands_over_is_sent_when_its_pass_ends_or_the_queue_is_half_full(
    collector: CollectorProcess,
) -> None:
    """The streamer sends between the flusher's passes (``handed_over``), in as few system calls as it can; a pass
    that fills half the queue (many threads' runs) is sent on the way, so that the queue does not fill for it."""
    streamer = Streamer(collector.tcp_address, StreamerOptions(max_queue_bytes=256 * 1024))
    track = TrackInfo(1, THREAD_TRACK, "main", threading.get_native_id())
    try:
        assert streamer.flush(timeout_s=30)  # connected and welcomed
        for run in range(4):  # a pass, as the flusher makes it: a run at a time
            stamps = range(run * 100, run * 100 + 100)
            streamer.receive(track, [v for ts in stamps for v in (INSTANT, "pass", ts, ts, None)])
        streamer.handed_over()
        collector.wait_for_stored(400)
        for run in range(16):  # a pass that fills more than half the queue (about 12 KiB a run): sent on the way
            streamer.receive(track, [v for i in range(1000) for v in (INSTANT, "long pass", i, i, {"run": run})])
        collector.wait_for_stored(400 + 1000)  # some of it before the pass ends (down to half the queue)
        streamer.handed_over()
        collector.wait_for_stored(400 + 16_000)
        assert streamer.dropped_events == 0
    finally:
        streamer.close(timeout_s=5)


# -- connect() to another collector, fork ------------------------------------------------------------------------------

_SWITCH = """
import json, socket, sys
import ringtrace.client

# A listener whose accept queue is full: connecting to it blocks until connect_timeout_s.
blackhole = socket.socket()
blackhole.bind(("127.0.0.1", 0))
blackhole.listen(0)
filler = socket.create_connection(blackhole.getsockname())
old = "127.0.0.1:%d" % blackhole.getsockname()[1]

tl = ringtrace.client.connect(old, connect_timeout_s=3.0, exit_timeout_s=0.1)
tl.flush(timeout_s=0)  # the streamer now blocks connecting
# Move to the real collector; closing the old streamer gives up after exit_timeout_s, with it still connecting.
tl = ringtrace.client.connect(sys.argv[1], batch_interval_s=3600, exit_timeout_s=0.1)
assert tl.flush(timeout_s=20)
for i in range(1000):
    tl.instant("for-the-new-collector", i=i)
print(json.dumps({"flushed": tl.flush(timeout_s=20), "dropped": tl.dropped_events, "listeners": len(tl.listeners)}))
"""


def test_events_recorded_after_connect_switch_reach_the_new_collector(collector: CollectorProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SWITCH, collector.tcp_address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"flushed": True, "dropped": 0, "listeners": 1}
    assert len(events(collector.snapshot(), "i")) == 1000


_FORK_AFTER_CLOSE = """
import os, sys
import ringtrace.client
tl = ringtrace.client.connect(sys.argv[1])
tl.close(timeout_s=1)
pid = os.fork()
if pid == 0:
    tl.instant("child")
    print("child traces:", bool(ringtrace.client.default_timeline().listeners), flush=True)
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


def test_a_welcome_naming_a_version_the_client_does_not_speak_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    from ringtrace.wire.frames import encode, preamble
    from ringtrace.wire.handshake_frames import Welcome

    server = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{server.getsockname()[1]}"

    def answer_with_version_99() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(preamble() + encode(Welcome(99, 1 << 20, 1000, 1000, 1000, "future")))
            conn.recv(65536)  # until the client hangs up

    fake = threading.Thread(target=answer_with_version_99, daemon=True)
    fake.start()
    timeline, _ = streamed(address, backoff_initial_s=5.0, backoff_max_s=5.0)
    try:
        timeline.instant("kept")
        with caplog.at_level("WARNING", logger="ringtrace.client"):
            assert timeline.flush(timeout_s=1.0) is False
        assert any("chose protocol version 99" in r.getMessage() for r in caplog.records)
    finally:
        timeline.close(timeout_s=0)
        fake.join(10)
        server.close()


def test_a_peer_that_hangs_up_is_not_hammered_while_a_flush_waits(hanging_up_listener: BareListener) -> None:
    timeline, _ = streamed(hanging_up_listener.address)
    try:
        timeline.instant("never delivered")
        assert timeline.flush(timeout_s=2.0) is False
        # A retry at most every 0.25 s while the flush waits: about 8 in 2 s; without a bound, thousands.
        assert hanging_up_listener.accepted <= 20, hanging_up_listener.accepted
    finally:
        timeline.close(timeout_s=0)


def test_two_streamers_of_one_process_are_one_process_to_the_collector(collector: CollectorProcess) -> None:
    first, _ = streamed(collector.tcp_address, process_name="one")
    second, _ = streamed(collector.tcp_address, process_name="one")
    try:
        first.instant("a")
        second.instant("b")
        assert first.flush(timeout_s=10) and second.flush(timeout_s=10)
        trace = collector.snapshot()
        assert {e["pid"] for e in events(trace, "i")} == {os.getpid()}
        assert len(trace["otherData"]["processes"]) == 1
    finally:
        first.close(timeout_s=0)
        second.close(timeout_s=0)


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as server:
        return int(server.getsockname()[1])


def warnings_of(caplog: pytest.LogCaptureFixture, level: str = "WARNING") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == level and "reach the collector" in r.getMessage()]


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        (f"127.0.0.1:{free_port()}", "refused (is the collector running, on that port?)"),
        ("no-such-host.invalid:7700", "cannot resolve the host of no-such-host.invalid:7700"),
    ],
    ids=["refused", "unknown-host"],
)
def test_a_collector_that_cannot_be_reached_is_warned_of_soon_and_once(
    address: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ringtrace.client")
    timeline, _ = streamed(address, backoff_initial_s=0.05, backoff_max_s=0.2)  # attempts 0.2 s apart at most
    try:

        def warned() -> list[str]:
            timeline.instant("waiting", i=1)
            return warnings_of(caplog)

        (warning,) = wait_for(warned, timeout_s=30, what="the warning", interval_s=0.01)
        assert address in warning and reason in warning  # (within the wait's bound)
        assert re.search(r"retrying, \d+ events? queued", warning), warning  # ("1 event" when it comes at once)
        time.sleep(1.0)  # several reconnect attempts more: still the one warning (the next comes a minute on)
        assert len(warnings_of(caplog)) == 1
    finally:
        timeline.close(timeout_s=0)


def test_delivery_that_resumes_is_said_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="ringtrace.client")
    port = free_port()
    timeline, _ = streamed(f"127.0.0.1:{port}")
    try:
        timeline.instant("before")
        wait_for(lambda: warnings_of(caplog), timeout_s=30, what="the warning that it cannot reach the collector")
        collector = CollectorProcess(tcp=f"127.0.0.1:{port}")
        try:
            assert timeline.flush(timeout_s=30)
            (resumed,) = warnings_of(caplog, "INFO")
            assert "reach the collector again" in resumed and "0 dropped meanwhile" in resumed
            assert [e["name"] for e in events(collector.snapshot(), "i")] == ["before"]
        finally:
            collector.stop()
    finally:
        timeline.close(timeout_s=0)


def test_connect_takes_a_process_name_the_environment_cannot_hold(collector: CollectorProcess) -> None:
    code = (
        "import sys, ringtrace.client\n"
        "tl = ringtrace.client.connect(sys.argv[1], process_name='web\\x00one')\n"
        "tl.instant('named')\n"
        "print(tl.flush(10))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, collector.tcp_address], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
    assert [e["name"] for e in events(collector.snapshot(), "i")] == ["named"]


def test_a_client_pointed_at_the_http_port_says_so_once(
    collector: CollectorProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ringtrace.client")
    http_port = collector.http_url.rsplit(":", 1)[1]
    timeline, _ = streamed(f"127.0.0.1:{http_port}", backoff_initial_s=0.05)
    try:

        def warned() -> list[str]:
            timeline.instant("lost")
            return warnings_of(caplog)

        wait_for(warned, timeout_s=30, what="the warning", interval_s=0.01)
        time.sleep(1.0)  # several reconnect attempts more: still the one warning
        (warning,) = warnings_of(caplog)
        assert "got b'HTTP'" in warning and "is that the collector's HTTP port?" in warning
    finally:
        timeline.close(timeout_s=0)


def _voluntary_switches(thread: threading.Thread) -> int:
    """How many times ``thread`` has slept (Linux: its voluntary context switches)."""
    with open(f"/proc/self/task/{thread.native_id}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts a thread's sleeps in /proc")
def test_an_idle_streamer_sleeps_through_the_flushers_empty_sweeps(collector: CollectorProcess) -> None:
    # Each wake-up of a background thread takes the interpreter from a busy program thread: a sweep that hands
    # nothing over (the flusher's timer, here every 10 ms) must not wake the streamer thread.
    timeline, _ = streamed(collector.tcp_address, batch_interval_s=0.01)
    try:
        timeline.instant("connects")
        assert timeline.flush(timeout_s=30)
        thread = next(t for t in threading.enumerate() if t.name == "ringtrace-streamer")
        before, started = _voluntary_switches(thread), time.monotonic()
        time.sleep(1.0)  # (an idle second on purpose, to count: about 100 sweeps)
        woke = _voluntary_switches(thread) - before
        assert woke < 20, f"the streamer woke {woke} times in {time.monotonic() - started:.1f} s with nothing to send"
        timeline.instant("and still sends at once")
        assert timeline.flush(timeout_s=30)
    finally:
        timeline.close(timeout_s=5)
