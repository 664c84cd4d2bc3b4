"""Races and re-entrancy on the recording side (Timeline), shown deterministically.

Thread switches at one exact point are simulated with a lock that runs a hook right after it is released, or with a
patched call inside a critical section: what the hook does is what another thread (or a signal handler) may do there.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pytest
from ringtrace.client.batch import BatchEncoder
from ringtrace.client.model import RECORD_FIELDS, SPAN, StringTable
from ringtrace.client.protocol import MIN_MAX_FRAME_BYTES
from ringtrace.client.timeline import Timeline
from ringtrace.client.transport import Transport, TransportOptions


class _Sender:
    """Stands in for a Transport: the timeline only checks it is not None and starts it on first use."""

    def start(self) -> bool:
        return True


SENDER: Any = _Sender()


class _HookAfterRelease:
    """A lock that runs ``hook`` once, right after its next release: another thread running at that exact point."""

    def __init__(self, hook: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._hook: Callable[[], None] | None = hook

    def __enter__(self) -> _HookAfterRelease:
        self._lock.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()
        hook, self._hook = self._hook, None
        if hook is not None:
            hook()


def drained_count(tl: Timeline) -> int:
    return sum(len(fields) for _, fields in tl.drain()) // RECORD_FIELDS


# -- recording must never raise ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        lambda tl: tl.instant("cache-miss", name="users"),
        lambda tl: tl.scope("request", label="GET /"),
        lambda tl: tl.instant("tick", self=1),
    ],
    ids=["instant-name", "scope-label", "instant-self"],
)
def test_any_argument_name_can_be_recorded(record: Callable[[Timeline], object]) -> None:
    tl = Timeline()
    tl.attach(SENDER)
    record(tl)


# -- the slow path racing attach() -----------------------------------------------------------------------------------


def test_thread_entering_the_slow_path_while_connect_attaches_keeps_recording() -> None:
    tl = Timeline()
    # The thread records its first event before connect(); connect() attaches right after the slow path's lock.
    tl._lock = _HookAfterRelease(lambda: tl.attach(SENDER))  # type: ignore[assignment]
    tl.instant("before-connect")
    for i in range(100):
        tl.instant("after-connect", i=i)
    assert drained_count(tl) == 100


def test_thread_entering_the_slow_path_while_close_detaches_keeps_nothing() -> None:
    tl = Timeline()
    tl.attach(SENDER)
    forgotten = []

    def close_now() -> None:
        forgotten.extend(tl.buffers())
        tl.attach(None)  # what Timeline.close() does after stopping the sender

    tl._lock = _HookAfterRelease(close_now)  # type: ignore[assignment]
    tl.instant("first")
    for i in range(10_000):
        tl.instant("after-close", i=i)
    assert forgotten, "the slow path created this thread's buffer"
    assert sum(len(buffer.events) for buffer in forgotten) <= RECORD_FIELDS  # at most the one event


# -- drain() racing a thread's last event ----------------------------------------------------------------------------


def test_last_event_of_an_ending_thread_is_not_lost() -> None:
    tl = Timeline()
    tl.attach(SENDER)
    first_taken, go = threading.Event(), threading.Event()

    def worker() -> None:
        tl.instant("first")
        first_taken.wait(10)
        go.wait(10)
        tl.instant("last")

    thread = threading.Thread(target=worker, name="ending")
    thread.start()
    try:
        while not tl.buffers() or not tl.buffers()[0].events:  # the worker's first event is in
            thread.join(0.001)
        assert drained_count(tl) == 1
        first_taken.set()
        real_is_alive = thread.is_alive

        def is_alive_after_the_last_event() -> bool:
            # The thread switch: after drain() found the buffer empty, the worker records its last event and ends.
            go.set()
            thread.join(10)
            return real_is_alive()

        thread.is_alive = is_alive_after_the_last_event  # type: ignore[method-assign]
        taken = drained_count(tl)
        taken += drained_count(tl)
        assert taken == 1
    finally:
        first_taken.set()
        go.set()
        thread.join(10)


# -- re-entrant recording inside the slow path -----------------------------------------------------------------------

_REENTRANT = """
import signal, sys, threading
import ringtrace.client.timeline as timeline_module
from ringtrace.client.timeline import Timeline
from ringtrace.client.transport import Transport, TransportOptions

tl = Timeline()
tl.attach(type("Sender", (), {"start": lambda self: True})())
signal.signal(signal.SIGUSR1, lambda *_: tl.instant("from-signal-handler"))
real_native_id = threading.get_native_id
raised = []
def native_id_with_a_signal():
    # A signal arrives (once) while the main thread is inside _thread_append, under Timeline._lock.
    if not raised:
        raised.append(True)
        signal.raise_signal(signal.SIGUSR1)
    return real_native_id()
timeline_module.threading.get_native_id = native_id_with_a_signal
tl.instant("first event of the main thread")
print(sum(len(r) for _, r in tl.drain()) // 5)
"""


def test_recording_from_a_signal_handler_during_the_slow_path_does_not_deadlock() -> None:
    # A deadlock shows as the subprocess timing out.
    done = subprocess.run([sys.executable, "-c", _REENTRANT], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]


# -- re-splitting after WELCOME ---------------------------------------------------------------------------------------


def test_resplit_keeps_arguments_with_int_keys() -> None:
    encoder = BatchEncoder(StringTable(), max_frame_bytes=1 << 20)
    fields = [
        value
        for i in range(600)
        for value in (SPAN, "op", 1_000 + 100 * i, 1_010 + 100 * i, {"by_status": {200: i}, "pad": "x" * 64})
    ]
    ((frame, count),) = encoder.encode(1, fields).events
    assert count == 600 and len(frame) > MIN_MAX_FRAME_BYTES
    encoder.max_frame_bytes = MIN_MAX_FRAME_BYTES  # a WELCOME with the smallest limit arrived
    batch = encoder.resplit(frame)
    assert sum(part_count for _, part_count in batch.events) == 600


# -- the lazily started sender ----------------------------------------------------------------------------------------


def test_recording_does_not_raise_when_the_sender_thread_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    tl = Timeline()
    transport = Transport(tl, "127.0.0.1:9", TransportOptions())
    try:
        tl.attach(transport)  # as in a forked child: the sender starts on first use

        def cannot_start(*args: object) -> int:
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading, "_start_new_thread", cannot_start)
        tl.instant("first event in a forked child")
    finally:
        transport._selector.close()
        transport._wake_r.close()
        transport._wake_w.close()
