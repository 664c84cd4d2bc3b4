"""When the streamer thread may send and take the streamer's lock: not while the flusher hands runs over, unless the
queue is half full (streamer.py's theory of operation says why)."""

from __future__ import annotations

import threading
from typing import Final

from ringtrace.client.delivery import unpatched

__all__ = ["HandOverPass"]

#: At most this long between two tries while the flusher hands runs over (it says when it is done).
_PASS_WAIT_S: Final = 0.05


class HandOverPass:
    """The flusher's pass over a timeline's runs, as the streamer thread sees it: ``begins`` at the first run
    received, ``ends`` when the flusher says it handed everything over (or a flush wants it all sent now)."""

    __slots__ = ("_held", "_holding", "_may_send_now")

    def __init__(self) -> None:
        self._held: _Locked | None = None  # (see ``locked``)
        #: The flusher is handing over runs.
        self._holding = False
        #: Set unless the flusher is handing over runs with the queue less than half full (see ``locked``).
        self._may_send_now = unpatched.Event()
        self._may_send_now.set()

    @property
    def holding(self) -> bool:
        """The flusher is handing over runs (it received one since the pass began)."""
        return self._holding

    def begins(self) -> None:
        self._holding = True
        if self._may_send_now.is_set():
            self._may_send_now.clear()

    def ends(self) -> bool:
        """The flusher handed everything over; whether a pass was under way (it received a run: something to send)."""
        was, self._holding = self._holding, False
        self._may_send_now.set()
        return was

    def may_send(self, queue_half_full: bool) -> bool:
        """Not while the flusher hands runs over, unless the queue is half full (many threads' runs in one pass)."""
        return not self._holding or queue_half_full

    def send_now(self) -> None:
        """The queue filled up during the pass: the streamer thread sends without waiting for its end."""
        self._may_send_now.set()

    def locked(self, lock: threading.Lock) -> _Locked:
        """``lock``, as the streamer thread takes it (a context manager). During a flusher's pass with the queue under
        half full it waits for the pass to end rather than block on the lock: a thread blocked on it takes it without
        the interpreter lock the moment the flusher lets it go after a run, then waits for the interpreter lock (a
        switch interval or more) while holding it, and the flusher's next run waits for both, leaving a thread
        recording flat out alone for tens of ms at a time. Otherwise (no pass, or the queue half full: a send cannot
        wait) it blocks: a thread that only tried the lock would find it held by a flusher that is behind, which keeps
        it run after run. The same object each time for the same lock: the streamer's loop takes it several times a
        pass, and made anew each time it cost a generator and its context manager."""
        held = self._held
        if held is None or held.lock is not lock:
            held = self._held = _Locked(self, lock)
        return held


class _Locked:
    """``HandOverPass.locked``: holds no state of a use of its own (each ``with`` acquires and releases ``lock``)."""

    __slots__ = ("lock", "pass_")

    def __init__(self, pass_: HandOverPass, lock: threading.Lock) -> None:
        self.pass_ = pass_
        self.lock = lock

    def __enter__(self) -> None:
        lock, may_send_now = self.lock, self.pass_._may_send_now
        while not lock.acquire(blocking=False):
            if may_send_now.is_set():
                lock.acquire()
                return
            may_send_now.wait(_PASS_WAIT_S)  # the pass: what this thread would do waits for its end anyway

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()
