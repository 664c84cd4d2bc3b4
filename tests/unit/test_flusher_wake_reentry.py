"""The flusher called again from code that runs where its own call is under way: ``wake`` from inside its own
``Event.set`` (a garbage collection's callback, which the ``gc`` integration records on the thread that collected, or
a signal handler), and ``start`` from the new flusher thread before it says it started. Neither may wait for a lock
the outer call holds."""

from __future__ import annotations

import threading
from typing import Any

from ringtrace.client.delivery.flusher import Flusher


class _EventWithCallbackInside(threading.Event):
    """An event that runs ``inside`` while ``set`` holds its lock, as a collection or a signal can."""

    def __init__(self, inside: Any) -> None:
        super().__init__()
        condition = self._cond  # type: ignore[attr-defined]
        notify_all = condition.notify_all

        def notify_all_then_inside() -> None:
            inside()
            notify_all()

        condition.notify_all = notify_all_then_inside


def test_a_wake_from_inside_the_wake_s_own_set_returns() -> None:
    flusher = Flusher()
    inner_returned = threading.Event()

    def wake_again() -> None:
        flusher.wake()
        inner_returned.set()

    flusher._wake = _EventWithCallbackInside(wake_again)
    waker = threading.Thread(target=flusher.wake, daemon=True)  # (a daemon: left blocked if the wake deadlocks)
    waker.start()
    waker.join(30)
    assert not waker.is_alive(), "the inner wake waited for the lock its own thread holds"
    assert inner_returned.is_set()
    assert flusher._wake.is_set()


def test_a_flusher_thread_that_records_as_it_starts_does_not_wait_for_its_starter() -> None:
    # The gc integration records a collection on the thread that collected: the new flusher thread, inside
    # threading's bootstrap before it says it started, called start() too, and waited for the lock its starter held
    # while waiting for it ("ringtrace run" hung at start about one run in four).
    import gc

    called_inside: list[bool] = []
    for _ in range(50):  # until a collection came inside the bootstrap (another thread's allocations may take it)
        flusher = Flusher()

        def record_as_the_gc_integration_does(phase: str, info: dict[str, Any], flusher: Flusher = flusher) -> None:
            limbo = list(threading._limbo)  # type: ignore[attr-defined]  # threads started, not yet running
            here = threading.get_ident()
            if phase == "stop" and any(
                thread.name == "ringtrace-flusher" and thread._ident == here and not thread._started.is_set()
                for thread in limbo
            ):
                called_inside.append(flusher.start())  # on the new flusher thread, before it says it started

        thresholds = gc.get_threshold()
        gc.callbacks.append(record_as_the_gc_integration_does)
        gc.set_threshold(1)  # a collection at almost every allocation: one inside the bootstrap
        try:
            starter = threading.Thread(target=flusher.start, daemon=True)  # (left blocked if start deadlocks)
            starter.start()
            starter.join(30)
        finally:
            gc.set_threshold(*thresholds)
            gc.callbacks.remove(record_as_the_gc_integration_does)
        assert not starter.is_alive(), "the new flusher thread waited for the lock its starter held"
        if called_inside:
            break
    assert called_inside and all(called_inside)
