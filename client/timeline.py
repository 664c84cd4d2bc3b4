"""The recording API: a Timeline and its per-thread buffers.

Theory of operation
-------------------
Every recording thread gets a ``ThreadBuffer`` on its first event, and the bound ``extend`` of that buffer's flat list
is cached in a ``threading.local``. Recording is then one ``list.extend`` of a 5-tuple: no lock, no id lookup, no
packing. The list is flat (five values per event) rather than a list of tuples: the flusher splits it into columns
with strided slices (``events[2::5]``), in C, touching each value once, and no tuple outlives its call. The flusher
takes events out with ``drain()``, which copies and deletes the prefix it saw (``events[:n]`` then
``del events[:n]``); these, and ``extend`` of a tuple, are each one atomic list operation, so an event racing with a
drain lands whole either in the batch or after it, never nowhere and never cut.

Both choices keep the cyclic garbage collector out of the way: the buffer holds only numbers, labels and argument
maps, and ``None`` rather than an empty dict when there are no arguments, so nothing it holds is a container the
collector must scan again and again until the flusher takes it (see benchmarks/bench_span.py).

Changing state (attaching a sender, closing) swaps in a fresh ``threading.local``: every thread then takes the slow
path once and picks up the new state. A timeline with no sender, or a closed one, hands out ``_discard``, the extend
of a ``deque(maxlen=0)``, which keeps nothing, so recording stays cheap and memory stays bounded.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .model import INSTANT, SPAN

if TYPE_CHECKING:
    from types import TracebackType

    from .transport import Transport

__all__ = ["Scope", "ThreadBuffer", "Timeline"]

_now = time.monotonic_ns
#: One event as recorded: ``RECORD_FIELDS`` values, extended onto a flat buffer.
Record = tuple[int, object, int, int, dict[str, Any] | None]
_discard: Callable[[Record], None] = deque[Any](maxlen=0).extend


class Scope:
    """Context manager that records one complete span when it exits."""

    __slots__ = ("_args", "_label", "_record", "_start_ns")

    def __init__(self, record: Callable[[Record], None], label: object, args: dict[str, Any] | None) -> None:
        self._record = record
        self._label = label
        self._args = args

    def __enter__(self) -> Scope:
        self._start_ns = _now()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        end_ns = _now()
        args = self._args
        if exc_type is not None:
            args = {**(args or {}), "exception": exc_type.__name__}
        self._record((SPAN, self._label, self._start_ns, end_ns, args))


class ThreadBuffer:
    """The events one thread recorded and the flusher has not taken yet, ``RECORD_FIELDS`` values each."""

    __slots__ = ("events", "name", "source_id", "thread", "thread_id")

    def __init__(self, source_id: int, thread: threading.Thread) -> None:
        self.events: list[Any] = []
        self.source_id = source_id
        self.thread = thread
        self.name = thread.name
        self.thread_id = threading.get_native_id()


class Timeline:
    """Records events from any number of threads into per-thread buffers.

    Use the process-wide one that ``ringtrace.client.connect`` returns. Recording methods never raise and never
    block: until a sender is attached, and after ``close()``, they keep nothing.
    """

    def __init__(self) -> None:
        self._tls = threading.local()
        # Re-entrant: a signal handler or a __del__ that records may run while this thread is in the slow path.
        self._lock = threading.RLock()
        self._buffers: list[ThreadBuffer] = []
        self._next_source_id = 1
        self._transport: Transport | None = None

    # -- recording (hot path) -------------------------------------------------------------------------------------

    def scope(self, label: object, /, **args: Any) -> Scope:
        """A context manager recording one span named ``label`` with ``args``, from enter to exit."""
        try:
            record = self._tls.record
        except AttributeError:
            record = self._thread_recorder()
        return Scope(record, label, args or None)

    def instant(self, name: object, /, **args: Any) -> None:
        """Record a point-in-time event named ``name`` with ``args``."""
        try:
            record = self._tls.record
        except AttributeError:
            record = self._thread_recorder()
        now = _now()
        record((INSTANT, name, now, now, args or None))

    def _thread_recorder(self) -> Callable[[Record], None]:
        """Slow path, once per thread per state change: find or create this thread's buffer."""
        with self._lock:
            transport = self._transport
            record = _discard if transport is None else self._buffer_of(threading.current_thread()).events.extend
            # Under the lock: a concurrent attach() replaces _tls, so a stale choice can never land in the new one.
            self._tls.record = record
        # A forked child's sender starts here, on first use, not inside the fork handler.
        if transport is not None and not transport.start():
            self.detach(transport)  # no sender: keep nothing rather than grow buffers nobody drains
            return _discard
        return record

    def _buffer_of(self, thread: threading.Thread) -> ThreadBuffer:
        """The buffer of ``thread``, created if needed; called under the lock."""
        for buffer in self._buffers:
            if buffer.thread is thread:
                return buffer
        source_id = self._next_source_id
        self._next_source_id += 1
        created = ThreadBuffer(source_id, thread)
        for buffer in self._buffers:  # a re-entrant call (a signal handler) may have made one meanwhile
            if buffer.thread is thread:
                return buffer
        self._buffers.append(created)
        return created

    # -- flusher side -----------------------------------------------------------------------------------------------

    def drain(self) -> list[tuple[ThreadBuffer, list[Any]]]:
        """Take every buffered event (as flat values), per thread; forget ended threads that have nothing left."""
        taken = []
        with self._lock:
            buffers = list(self._buffers)
        ended = []
        for buffer in buffers:
            alive = buffer.thread.is_alive()  # before len(): a thread dead by now appends nothing after it
            events = buffer.events
            count = len(events)
            if count:
                batch = events[:count]
                del events[:count]
                taken.append((buffer, batch))
            elif not alive:
                ended.append(buffer)
        if ended:
            with self._lock:
                self._buffers = [b for b in self._buffers if b not in ended]
        return taken

    def buffers(self) -> list[ThreadBuffer]:
        """The buffers of threads that recorded and still may."""
        with self._lock:
            return list(self._buffers)

    # -- lifecycle ------------------------------------------------------------------------------------------------

    @property
    def transport(self) -> Transport | None:
        return self._transport

    def attach(self, transport: Transport | None) -> None:
        """Start (``transport``) or stop (``None``) keeping events; every thread picks the change up at once."""
        with self._lock:
            self._transport = transport
            if transport is None:
                self._buffers = []
            self._tls = threading.local()

    def detach(self, transport: Transport) -> None:
        """Stop keeping events if ``transport`` is still the one attached."""
        with self._lock:
            if self._transport is transport:
                self.attach(None)

    def flush(self, timeout_s: float = 2.0) -> bool:
        """Send everything recorded so far and wait, at most ``timeout_s``, until the collector has stored it.

        Returns:
            True when the collector acknowledged and no event was dropped since the previous flush; False when not
            connected, when the time ran out, or when events were dropped (the transport's counters say how many).
        """
        transport = self._transport
        return transport.flush(timeout_s) if transport is not None else False

    def close(self, timeout_s: float = 2.0) -> bool:
        """Flush (within ``timeout_s``), stop the sender and stop recording.

        Returns:
            True when everything recorded was acknowledged by the collector.
        """
        transport = self._transport
        if transport is None:
            return False
        delivered = transport.close(timeout_s)
        self.detach(transport)
        return delivered

    def _reset_after_fork(self) -> None:
        """In a forked child: the parent's lock state, buffers and sender thread do not carry over."""
        self._lock = threading.RLock()
        self._buffers = []
        self._next_source_id = 1
        self._transport = None
        self._tls = threading.local()
