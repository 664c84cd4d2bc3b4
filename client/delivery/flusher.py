"""The flusher: one daemon thread per process that drains timelines and hands their events to their listeners.

Theory of operation
-------------------
``FLUSHER`` wakes every ``interval_s`` and *sweeps* every timeline that has listeners: ``drain()`` takes each
track's events in runs, and each listener ``receive``s each run (a streamer encodes and queues it, a file listener
writes it, a memory listener keeps it); then the tracks that ended are ``retire``d. Sweeps hold ``_sweep_lock``, so
that a ``flush()`` on any thread can sweep its timeline itself, at once, without waiting for the thread to wake; the
thread and such callers take turns. Between runs, once it has run for a millisecond, the sweeping thread sleeps for
zero seconds, which hands the interpreter to recording threads so that none waits behind a long sweep, unless a thread
outruns the flusher (``_behind``). Listeners that have a ``handed_over`` (the streamer) are told when a pass over a
timeline's runs ends, so that they send what they queued then, in one go. A sweep given a deadline (``flush`` and
``close`` have a timeout) stops there and leaves the runs it took in ``_carried``, which the next sweep hands over
first, so that order is kept and nothing is dropped on the way.

A sweep that fails on an unexpected error (a bug, or a listener's) raises into no thread, the program's that flushes
least of all: the runs it had taken and not handed over are counted as lost by each listener they were meant for
(``lost_to_error``: a serialized listener's ``internal_error_events``, which its STATS report), the log says so at
most once a minute, and the thread's next sweep waits, longer while sweeps keep failing (``pass_failures.py``); other
timelines are swept all the same. A listener's call that fails loses its own run alone, counted and said so too.

Its pace is the listeners' own configuration, never set from outside: ``interval_s`` is the shortest
``batch_interval_s`` a listener of a swept timeline declares (``Paced``: the streamer, from its options), and
``exit_timeout_s``, how long the exit hook waits for delivery, the longest ``exit_timeout_s`` one declares; with none
declared, the flusher's own defaults. A timeline that comes, goes or changes listeners (``register``) makes the waiting
thread read its interval again, without a sweep.

Timelines with listeners are held until they are closed or lose their last listener, and closed at interpreter
exit. Importing ringtrace installs only the fork hook that gives timelines fresh locks in a child
(``timelines._fresh_locks``): the flusher's fork and exit hooks are installed when the first timeline gets a
listener. In a forked child the thread is gone: ``after_fork_in_child`` resets the locks and every timeline (whose
listeners say what replaces them), and the thread starts again on the child's first event or flush, never inside
the fork handler (starting threads there is unsafe). Another thread that must start again in a child waits for
that moment too (``when_started``: the sampler's).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.pass_failures import PassFailures
from ringtrace.client.delivery.threads import background_thread
from ringtrace.wire.call_records import CallRun, event_count
from ringtrace.wire.keyword_args import as_given
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.record_runs import RecordRun

__all__ = ["FLUSHER", "Drained", "Flusher", "Paced", "Run", "Sweepable"]

log = logging.getLogger("ringtrace.client")
#: How long a sweep runs before it lets recording threads run (between two runs; see ``_hand_over_runs``).
_HOLD_S = 0.001
#: What a run handed over is replaced with in its sweep's list.
_HANDED_OVER: list[Any] = []


#: A run of one track's events: flat records (``RECORD_FIELDS`` values each), traced calls' or compact records.
Run = list[Any] | CallRun | RecordRun


class Drained(NamedTuple):
    """What a timeline's ``drain()`` took: runs of events per track, tracks that ended, events dropped (its bound)."""

    runs: list[tuple[TrackInfo, Run]]
    ended: list[TrackInfo]
    dropped: int


class Sweepable(Protocol):
    """What the flusher needs of a timeline."""

    @property
    def listeners(self) -> tuple[Any, ...]: ...

    @property
    def max_buffered_events(self) -> int: ...

    def drain(self) -> Drained: ...

    def renamed_threads(self) -> list[TrackInfo]: ...

    def after_fork_in_child(self, replacements: dict[int, Any]) -> None: ...

    def close(self, timeout_s: float = 2.0) -> bool: ...


class Paced(Protocol):
    """A listener that sets the flusher's pace while it listens (the streamer: its options')."""

    @property
    def batch_interval_s(self) -> float: ...

    @property
    def exit_timeout_s(self) -> float: ...


def _behind(runs: list[tuple[TrackInfo, Run]], max_buffered_events: int) -> bool:
    """Whether a track's buffer was a quarter full or more when drained (a thread outruns the flusher): then all is
    handed over without yielding between runs (a thread given the turn keeps it 5 ms, filling its buffer meanwhile)."""
    held: dict[int, int] = {}
    for track, records in runs:
        if type(records) is not CallRun:  # (calls have buffers of their own, in bytes)
            held[track.track_id] = held.get(track.track_id, 0) + event_count(records)
    return max(held.values(), default=0) >= max_buffered_events // 4


class _Carried(NamedTuple):
    """Work a sweep took from a timeline and could not finish before its deadline."""

    timeline: Sweepable
    listeners: tuple[Any, ...]
    runs: list[tuple[TrackInfo, Run]]
    ended: list[TrackInfo]


class Flusher:
    """See the module docstring.

    Args:
        interval_s: the wait between sweeps where no listener declares a ``batch_interval_s``.
        exit_timeout_s: how long the exit hook waits for delivery where no listener declares an ``exit_timeout_s``.
    """

    def __init__(self, interval_s: float = 0.05, exit_timeout_s: float = 2.0) -> None:
        self._default_interval_s = interval_s
        self._default_exit_timeout_s = exit_timeout_s
        self._timelines: dict[int, Sweepable] = {}
        # Re-entrant: a signal handler that records may land while this thread holds it.
        self._lock = threading.RLock()
        self._sweep_lock = threading.RLock()
        self._carried: list[_Carried] = []
        self._wake = unpatched.Event()
        #: A sweep is asked for (``wake``), not merely a new look at the interval (``register``).
        self._sweep_asked = False
        self._thread: threading.Thread | None = None
        #: The thread being started (``start``), until it has.
        self._starting: threading.Thread | None = None
        self._hooks_installed = False
        #: The exit delivery has begun.
        self.exiting = False
        #: Called once, right after the thread next starts (``when_started``).
        self._on_start: list[Callable[[], object]] = []
        #: Called first at exit, before the last sweep: what records on its own (the sampler) stops, so that nothing
        #: is recorded into timelines that are closing (it would be counted lost).
        self.before_exit: list[Callable[[], None]] = []
        #: Sweeps that failed on an unexpected error (``_failed``), and when the thread may sweep again after one.
        self.failures = PassFailures("flusher", "dropped_events and internal_error_events by their listeners")
        self._resume_at = 0.0
        self._lost_in_sweep = 0  # by the sweep failing now (``_hand_over``)

    def register(self, timeline: Sweepable) -> None:
        """Sweep ``timeline`` from now on (it has listeners)."""
        with self._lock:
            self._timelines[id(timeline)] = timeline
            install = not self._hooks_installed
            self._hooks_installed = True
        self._wake.set()  # its listeners may set another pace
        if install:
            atexit.register(self.close_at_exit)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=self.after_fork_in_child)

    def unregister(self, timeline: Sweepable) -> None:
        with self._lock:
            self._timelines.pop(id(timeline), None)
        self._wake.set()  # its listeners may have set the pace

    def timelines(self) -> list[Sweepable]:
        """Every timeline that has listeners."""
        with self._lock:
            return list(self._timelines.values())

    @property
    def interval_s(self) -> float:
        """The wait between sweeps: the shortest ``batch_interval_s`` the listeners declare, else the default."""
        return min(self._declared("batch_interval_s"), default=self._default_interval_s)

    @property
    def exit_timeout_s(self) -> float:
        """How long the exit hook waits for delivery, in all: the longest ``exit_timeout_s`` the listeners declare,
        else the default."""
        return max(self._declared("exit_timeout_s"), default=self._default_exit_timeout_s)

    def _declared(self, setting: str) -> list[float]:
        """The value of ``setting`` each listener of a swept timeline declares (``Paced``): a number of seconds, not
        what a mock answers for any attribute; one that cannot be read declares nothing (it is read on the flusher's
        thread, which must not end: listeners never raise)."""
        values = []
        for timeline in self.timelines():
            for listener in timeline.listeners:
                try:
                    value = getattr(listener, setting, None)
                except Exception:
                    log.debug("ringtrace: listener %r failed to tell its %s", listener, setting, exc_info=True)
                    continue
                if (
                    isinstance(value, int | float)
                    and not isinstance(value, bool)
                    and math.isfinite(value)
                    and value >= 0
                ):
                    values.append(value)
        return values

    def start(self) -> bool:
        """Start the thread if it is not running (none once the exit delivery has begun: it sweeps by itself, so an
        event recorded then, an uncaught exception's say, is delivered even where no thread may start any more).

        Returns:
            False when it cannot be started (at interpreter shutdown, say): nothing will drain the buffers.
        """
        thread = self._thread
        if thread is not None and thread.is_alive():  # the usual case, without the lock
            return True
        if self.exiting:  # the exit delivery sweeps on its own thread (and at interpreter exit, no thread may start)
            return True
        with self._lock:
            thread = self._thread
            if (thread is not None and thread.is_alive()) or self._starting is not None:
                return True  # (being started: by another thread, or this is the new thread recording as it starts)
            thread = self._starting = background_thread(self._run, "ringtrace-flusher")
        # Started outside the lock: the new thread may record before it says it started (the gc integration records
        # a collection on the thread that collected), and so call start() itself, which must not wait for the lock
        # while its starter waits for it.
        try:
            thread.start()
        except RuntimeError as exc:
            with self._lock:
                self._starting = None
            log.warning("ringtrace: cannot start the flusher thread (%s); tracing is off for this process", exc)
            return False
        with self._lock:
            self._thread, self._starting = thread, None
            on_start, self._on_start = self._on_start, []
        for callback in on_start:  # (not under the lock: they take their own)
            try:
                callback()
            except Exception:  # never into the recording thread that started it
                log.exception("ringtrace: %r failed when the flusher started", callback)
        return True

    def when_started(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once, on the thread that next starts this one's, right after (at once if it runs). In a
        forked child that is its first event or flush, never inside the fork handler: where a thread of ringtrace's
        (a listener's, the sampler's) may start safely, which exit handlers cannot on Python 3.12 and later."""
        with self._lock:
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._on_start.append(callback)
                return
        callback()

    def wake(self) -> None:
        """Sweep now rather than at the end of the interval (a recording thread's buffer is half full)."""
        self._sweep_asked = True
        # Set already: nothing waits. And a garbage collection's callback (the gc integration) or a signal handler
        # that records may run inside this very set(), on this thread, while it holds the event's lock (set() makes
        # the flag true before it notifies): waking again there would wait on that lock for ever.
        if not self._wake.is_set():
            self._wake.set()

    @contextlib.contextmanager
    def sweeping(self, deadline: float | None = None) -> Iterator[None]:
        """No sweep runs on another thread inside this block (with a ``deadline``, the block runs anyway once it
        passes: a bound on waiting matters more there than the rare race)."""
        timeout = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
        acquired = self._sweep_lock.acquire(timeout=timeout)
        try:
            yield
        finally:
            if acquired:
                self._sweep_lock.release()

    def sweep(self, timeline: Sweepable, deadline: float | None = None) -> bool:
        """Hand ``timeline``'s events to its listeners now, on the calling thread.

        Returns:
            True: all handed over; False: ``deadline`` (``time.monotonic()``) came first, the flusher hands the rest.
        """
        timeout = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not self._sweep_lock.acquire(timeout=timeout):
            return False
        try:
            return self._sweep_carried(deadline) and self._sweep_one(timeline, deadline)
        except Exception as exc:  # never into the program's thread that flushes
            return self._failed(exc)
        finally:
            self._sweep_lock.release()

    def sweep_all(self, deadline: float | None = None) -> bool:
        """Hand every timeline's events to its listeners now, on the calling thread (see ``sweep``)."""
        timeout = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not self._sweep_lock.acquire(timeout=timeout):
            return False
        try:
            complete, failure = self._sweep_carried(deadline), None
            for timeline in self.timelines():
                try:
                    complete = complete and self._sweep_one(timeline, deadline)
                except Exception as exc:
                    failure = failure or exc
            return complete if failure is None else self._failed(failure)
        except Exception as exc:  # never into the thread that sweeps (the program's, at exit; the streamer's)
            return self._failed(exc)
        finally:
            self._sweep_lock.release()

    def take_carried(self, timeline: Sweepable) -> int:
        """Forget the work carried for ``timeline`` (it is closing; called inside ``sweeping()``); returns how many
        events that was."""
        mine = [c for c in self._carried if c.timeline is timeline]
        self._carried = [c for c in self._carried if c.timeline is not timeline]
        return sum(event_count(records) for c in mine for _, records in c.runs)  # (a run of calls too)

    def _sweep_carried(self, deadline: float | None) -> bool:
        while self._carried:
            if not self._hand_over(*self._carried.pop(0), deadline):  # (timeline, listeners, runs, ended)
                return False
        return True

    def _sweep_one(self, timeline: Sweepable, deadline: float | None) -> bool:
        listeners = timeline.listeners
        if not listeners:
            return True
        renamed = timeline.renamed_threads()
        for track in renamed:
            _call(listeners, "receive", track, [])
        drained = timeline.drain()
        if drained.dropped:
            _call(listeners, "lost", drained.dropped)
        if not (renamed or drained.runs or drained.ended):  # a pass over nothing: no listener is told of it
            return True
        return self._hand_over(timeline, listeners, drained.runs, drained.ended, deadline)

    def _hand_over(
        self,
        timeline: Sweepable,
        listeners: tuple[Any, ...],
        runs: list[tuple[TrackInfo, Run]],
        ended: list[TrackInfo],
        deadline: float | None,
    ) -> bool:
        try:
            return self._hand_over_runs(timeline, listeners, runs, ended, deadline)
        except Exception:  # the runs not handed over yet are lost: counted by each listener
            self._lost_in_sweep += _lost_to_error(listeners, [records for _, records in runs])
            raise
        finally:
            _handed_over(listeners)

    def _hand_over_runs(
        self,
        timeline: Sweepable,
        listeners: tuple[Any, ...],
        runs: list[tuple[TrackInfo, Run]],
        ended: list[TrackInfo],
        deadline: float | None,
    ) -> bool:
        # The listeners of the moment the runs were drained: a listener removed since still gets what it was due.
        # Each ended track is retired right after its last run, so that a stream never holds many ended tracks.
        last_run = {track.track_id: i for i, (track, _) in enumerate(runs)}
        for track in ended:
            if track.track_id not in last_run:
                _call(listeners, "retire", track)
        ending = {track.track_id: track for track in ended}
        behind = _behind(runs, timeline.max_buffered_events)
        # (``is True``: a listener that merely answers any attribute, a mock, gets maps)
        maps = not all(getattr(listener, "packs_keywords", False) is True for listener in listeners)
        yielded_at = time.monotonic()
        for i, (track, records) in enumerate(runs):
            if deadline is not None and time.monotonic() > deadline:
                still_ending = [t for t in ended if last_run.get(t.track_id, -1) >= i]
                self._carried.insert(0, _Carried(timeline, listeners, runs[i:], still_ending))
                self.wake()  # the flusher thread finishes it
                return False
            _call(listeners, "receive", track, as_given(records) if maps else records)
            runs[i] = (track, _HANDED_OVER)  # its events go now, not at the end of the sweep: a recording thread
            del records  # may be filling its buffer again meanwhile, and the two together are what the process holds
            if last_run[track.track_id] == i and track.track_id in ending:
                _call(listeners, "retire", ending[track.track_id])
            # Let recording threads run between runs, once this thread has held the interpreter a while: a yield to a
            # busy thread costs a hand-over there and back, for nothing where a pass is a few small runs.
            if not behind and time.monotonic() - yielded_at >= _HOLD_S:
                unpatched.sleep(0)
                yielded_at = time.monotonic()
        return True

    def _run(self) -> None:
        while True:
            try:  # (a sweep that fails says so, and counts what it lost: ``_failed``)
                self._wait_for_sweep()
                self.sweep_all()
            except Exception as exc:  # a bug here must not end tracing for the process
                self._failed(exc)

    def _failed(self, exc: Exception) -> bool:
        """A sweep failed on an unexpected error (a bug): the runs it had taken and not handed over are counted as
        lost by their listeners (``_hand_over``), the log says so (at most once a minute), and the thread's next
        sweep waits, longer while sweeps keep failing. Returns False (not everything was handed over)."""
        lost, self._lost_in_sweep = self._lost_in_sweep, 0
        now = time.monotonic()
        self._resume_at = now + self.failures.failed(exc, now, lost)
        return False

    def _wait_for_sweep(self) -> None:
        """Until ``interval_s`` has passed since the last sweep, or a sweep is asked for (``wake``); a timeline that
        came or went (``register``) makes it read the interval again. After a sweep that failed, not before the
        wait that follows it (``_failed``): a bug that fails every sweep does not spin."""
        while (pause := self._resume_at - time.monotonic()) > 0:
            unpatched.sleep(pause)
        started, interval_s = time.monotonic(), self.interval_s  # (asks the listeners: once, and after a wake-up)
        while (timeout := started + interval_s - time.monotonic()) > 0 and self._wake.wait(timeout):
            self._wake.clear()  # (before the look at ``_sweep_asked``: a wake() that finds the event set sets nothing)
            if self._sweep_asked:
                break
            interval_s = self.interval_s  # (a timeline came or went: ``register``)
        self._sweep_asked = False

    def close_at_exit(self) -> None:
        """At interpreter exit (or a multiprocessing child's): deliver what is buffered, within ``exit_timeout_s``."""
        self.exiting = True
        for stop in list(self.before_exit):
            try:
                stop()
            except Exception:  # the delivery goes on
                log.exception("ringtrace: a thread that records could not be stopped at exit")
        deadline = time.monotonic() + self.exit_timeout_s
        for timeline in self.timelines():  # (the streamer: a collector not there is not waited for)
            _call(tuple(x for x in timeline.listeners if hasattr(x, "exit_begins")), "exit_begins")
        self.sweep_all(deadline)
        for timeline in self.timelines():
            timeline.close(max(deadline - time.monotonic(), 0.0))

    def after_fork_in_child(self) -> None:
        """The parent's thread and lock states do not exist in a forked child; see the module docstring."""
        self._lock = threading.RLock()
        self._sweep_lock = threading.RLock()
        self._wake = unpatched.Event()
        self._sweep_asked = False
        self._thread = None
        self._on_start = []
        self._starting = None
        self._carried = []
        self.exiting = False
        replacements: dict[int, Any] = {}
        for key, timeline in list(self._timelines.items()):
            try:
                timeline.after_fork_in_child(replacements)
            except Exception:  # one broken listener must not leave the others with the parent's state
                log.exception("ringtrace: a timeline could not be reset after fork; it records nothing in the child")
                self._timelines.pop(key, None)


def _handed_over(listeners: tuple[Any, ...]) -> None:
    """Tell the listeners that have a ``handed_over`` (the streamer) that a pass over a timeline's runs ended: what it
    sends, it sends now rather than run by run (each send lets the recording threads take the interpreter lock)."""
    _call(tuple(listener for listener in listeners if hasattr(listener, "handed_over")), "handed_over")


#: Calls of listeners that failed, by what was called (a listener's class and method): each said at most once a minute.
_LISTENER_FAILURES: dict[str, PassFailures] = {}


def _call(listeners: tuple[Any, ...], method: str, *args: Any) -> None:
    for listener in listeners:
        try:
            getattr(listener, method)(*args)
        except Exception as exc:  # listeners count their own losses; this is the last line of defence
            lost = _lost_to_error((listener,), [args[1]]) if method == "receive" else 0  # its run, lost to it
            what = f"a call of {type(listener).__name__}.{method}()"
            failures = _LISTENER_FAILURES.get(what)
            if failures is None:
                failures = _LISTENER_FAILURES[what] = PassFailures(
                    "flusher", "dropped_events and internal_error_events by that listener", what=what, waits=False
                )
            failures.failed(exc, time.monotonic(), lost)


def _lost_to_error(listeners: tuple[Any, ...], runs: list[Run]) -> int:
    """Count ``runs`` (those not handed over: ``_HANDED_OVER``, skipped) as lost to an unexpected error by each of
    ``listeners`` (``lost_to_error``, or else ``lost``); returns how many events that was."""
    events = sum(event_count(records) for records in runs if records is not _HANDED_OVER)
    if events:
        for listener in listeners:
            with contextlib.suppress(Exception):  # (it counts, or it cannot)
                getattr(listener, "lost_to_error", listener.lost)(events)
    return events


#: The process's flusher.
FLUSHER = Flusher()
