"""Delivery before SIGTERM ends a multiprocessing child (``Pool.terminate()``), within the exit timeout."""

from __future__ import annotations

import os
import signal
import socket
import threading

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.delivery.threads import background_thread

__all__ = ["SigtermDelivery"]


class SigtermDelivery:
    """SIGTERM in a multiprocessing child: deliver what is buffered, then die by SIGTERM as before.

    A Python handler runs in the main thread, between bytecodes. A signal that comes just as the main thread enters a
    blocking call (a Pool worker waiting for its task queue's lock, say) trips the handler without waking the thread,
    and the worker would wait for ever: Pool.terminate() hung in about 1 run in 100. So a thread of ours is woken too
    (``signal.set_wakeup_fd``, when the program has not set one): if the handler has not begun within
    ``_HANDLER_GRACE_S``, that thread sends SIGTERM to the main thread, whose blocking call it interrupts (and, should
    that fail too, delivers and ends the process itself).
    """

    _HANDLER_GRACE_S = 0.5

    def __init__(self) -> None:
        self._begun = unpatched.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handler)
        if not hasattr(signal, "pthread_kill"):  # (Windows: the handler alone)
            return
        receiver, sender = socket.socketpair()
        sender.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(sender.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            previous = -2  # (cannot be set here): the handler alone
        if previous != -1:  # the program wakes itself in its own way: leave it so
            if previous >= 0:
                signal.set_wakeup_fd(previous)
            receiver.close()
            sender.close()
            return
        self._sockets = (receiver, sender)  # kept open for the life of the process
        background_thread(self._watch, "ringtrace-sigterm").start()

    def _handler(self, signum: int, frame: object) -> None:
        self._begun.set()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if FLUSHER.exiting:
            return  # the exit delivery is under way (perhaps right under this handler) and ends the process soon
        try:
            self._deliver()
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    def _watch(self) -> None:
        receiver = self._sockets[0]
        while True:
            try:
                woken = receiver.recv(64)
            except OSError:
                return
            if not woken:
                return
            if signal.SIGTERM not in woken or self._begun.wait(self._HANDLER_GRACE_S):
                continue
            main = threading.main_thread().ident
            if main is not None:  # it slept through the signal: one sent to it wakes it, and its handler runs
                signal.pthread_kill(main, signal.SIGTERM)
            if not self._begun.wait(self._HANDLER_GRACE_S) and not FLUSHER.exiting:
                self._deliver()  # still asleep: deliver, and end the process from here
                os.kill(os.getpid(), signal.SIGKILL)

    @staticmethod
    def _deliver() -> None:
        """Deliver on a thread of its own, waited for with a bound: the code the signal interrupted may hold a lock
        the delivery needs, and then the wait ends and the process dies, as it would have. The timeout is read before
        the delivery starts: its listeners declare it, and it closes them."""
        timeout_s = FLUSHER.exit_timeout_s
        closer = background_thread(FLUSHER.close_at_exit, "ringtrace-exit")
        closer.start()
        closer.join(timeout_s + 0.5)
