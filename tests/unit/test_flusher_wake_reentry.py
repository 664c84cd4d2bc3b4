"""``Flusher.wake`` called again from inside its own ``Event.set``: what a garbage collection's callback (the ``gc``
integration records its span on the thread that collected) or a signal handler does when it lands while that thread
holds the event's lock, and its buffer is at the same half-full mark. The inner call must not wait on that lock."""

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
