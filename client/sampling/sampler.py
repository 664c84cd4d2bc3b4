"""The sampler: a daemon thread that, ``hz`` times a second, takes the Python stack of every other thread and records
it as a ``sample`` event (``wire/model.py``) on a track of that thread.

Each sampled thread gets a track of its own (a ``ThreadSamples`` source), declared with the thread's OS thread id, so
that a reader shows its samples with the thread's spans. A sample's name is the name of the asyncio task its thread's
event loop runs at that moment ("" for none), its args the stack (code locations, root first), which the stream
encoder turns into a stack id (``wire/stack_table.py``). Recording is one ``list.extend`` on the track's buffer, as a
source's ``open`` is: no lock, never blocking the program; a full buffer counts the sample as dropped.

ringtrace's own threads (``is_background_thread``: the flusher, the streamer, the sampler itself) are not the program's:
none is sampled. Cost: a thread whose CPU clock did not move since its last sample ran no code, so it keeps its last
stack without a look at its frames; the pass and the loop between passes are ``thread_pass.py``'s, in C where the
accelerator is built (at 100 Hz the caches are cold at every pass, and a few dozen bytecodes cost more than the pass).

Fork: in a child the sampler's thread is gone; the fork hook forgets the parent's threads, and the thread starts again
when the flusher does (``Flusher.when_started``: the child's first event or flush), never in the fork handler.
``stop`` ends it for good. A pass that fails on an unexpected error (a bug) does not: it loses its own samples, nothing
recorded, and the loop starts again after a wait that grows while passes keep failing, said in the log at most once a
minute (``pass_failures.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from array import array
from typing import TYPE_CHECKING, Any, Final

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.delivery.pass_failures import PassFailures
from ringtrace.client.delivery.threads import background_thread, is_background_thread
from ringtrace.client.recording.sources import Source
from ringtrace.client.recording.tracks import NOT_RECORDING
from ringtrace.client.sampling.stack_capture import StackInterner, running_task_names, thread_clock_id
from ringtrace.client.sampling.thread_pass import SampledThread, run_passes, take_samples
from ringtrace.wire.arg_values import display_text
from ringtrace.wire.model import FIRST_SAMPLER_TRACK_ID, SAMPLE, SAMPLER_TRACK_SUFFIX, THREAD_TRACK, TrackInfo

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["DEFAULT_HZ", "Sampler", "ThreadSamples", "start_sampler"]

log = logging.getLogger("ringtrace.client")

#: Samples a second by default: Linux perf's and py-spy's rate, about 1% of a core for a dozen threads.
DEFAULT_HZ: Final = 100
#: The highest rate taken: the walk of every thread's stack must fit well within an interval.
MAX_HZ: Final = 1000

#: Track ids of sampled threads: above those ``new_track_id`` gives.
_SAMPLE_TRACK_IDS: Final = itertools.count(FIRST_SAMPLER_TRACK_ID)

_now = time.monotonic_ns
_wake_flusher = FLUSHER.wake


class ThreadSamples(Source):
    """The track of one sampled thread: a source whose track is a thread track of the thread's OS thread id.

    Its id is a sampler's (``FIRST_SAMPLER_TRACK_ID`` and up): a reader never takes it for the thread's own track
    (``ProcessView.shares_thread``), so the thread's spans keep that place though the sampler met the thread before
    it recorded anything, in a live process and in a file alike."""

    __slots__ = ()

    def __init__(self, name: str, native_id: int) -> None:
        super().__init__(name, NOT_RECORDING)
        self.track = TrackInfo(next(_SAMPLE_TRACK_IDS), THREAD_TRACK, name, native_id)

    def record(self, name: str, stack: tuple[Any, ...], now: int) -> None:
        """One sample, as ``Source.open`` records (no lock: one ``list.extend``)."""
        sink, limit, wake_at, count_full = self._recording
        held = len(sink)
        if held < limit:
            sink.extend((SAMPLE, name, now, now, stack))
            if held == wake_at:
                _wake_flusher()
        else:
            count_full()


class Sampler:
    """Samples every thread's stack into ``timeline``, ``hz`` times a second, until ``stop()``: every thread of the
    program, none of ringtrace's own (``is_background_thread``: the flusher, the streamer, the sampler, ...).

    Made and started by ``start_sampler``; never raises into the program, and its thread only reads.
    """

    def __init__(self, timeline: Timeline, hz: float) -> None:
        self.timeline = timeline
        self.hz = hz
        self._interval_s = 1.0 / hz
        self._stop = unpatched.Event()
        #: What the loop (``run_passes``) looks at between passes: set with ``_stop``.
        self._stopping = bytearray(1)
        self._thread: threading.Thread | None = None
        self._ident = 0
        self._interner = StackInterner()
        #: Per thread ident met: what is kept of its thread.
        self._threads: dict[int, SampledThread] = {}
        #: In a forked child: the thread starts again with the flusher (``_after_fork_in_child``).
        self.restart_pending = False
        #: Passes over the threads, samples taken, and the CPU time of the sampler's thread so far in ns (read every
        #: few passes, and as it stops), where the loop counts them (see the properties).
        self._counts = array("q", [0, 0, 0])
        #: Passes that failed on an unexpected error (each loses its own samples only: the loop starts again).
        self.failures = PassFailures("sampler")

    @property
    def passes(self) -> int:
        """Passes over the threads (for tests and the benchmark)."""
        return self._counts[0]

    @property
    def samples(self) -> int:
        """Samples taken."""
        return self._counts[1]

    @property
    def cpu_ns(self) -> int:
        """CPU time of the sampler's thread so far, in ns (where the platform tells it: every few passes, and as it
        stops)."""
        return self._counts[2]

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stop.is_set()

    def start(self) -> bool:
        """Start the thread (False: it could not be started, at interpreter shutdown say)."""
        self.restart_pending = False
        if unpatched.threads_are_greenlets():
            # Its thread would be a greenlet in the program's thread, whose passes (in C, sleeping between them)
            # never let the hub run again: the program hung (a forked child of a gevent program, before its exec).
            log.info("ringtrace: no samples in this process: gevent patched threading before the sampler started")
            return False
        self._stop, self._stopping = unpatched.Event(), bytearray(1)
        thread = background_thread(self._run, "ringtrace-sampler")
        try:
            thread.start()
        except RuntimeError as exc:
            log.warning("ringtrace: cannot start the sampler thread (%s); no samples in this process", exc)
            return False
        self._thread = thread
        if self.stop not in FLUSHER.before_exit:
            FLUSHER.before_exit.append(self.stop)  # no sample lands in a timeline the exit delivery is closing
        return True

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop sampling (the tracks end once their samples are delivered); waits up to ``timeout_s`` for the thread."""
        self._stop.set()
        self._stopping[0] = 1
        self.restart_pending = False
        with contextlib.suppress(ValueError):
            FLUSHER.before_exit.remove(self.stop)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        self._threads = {}
        with _lock:
            if _samplers.get(id(self.timeline)) is self:
                del _samplers[id(self.timeline)]

    def _run(self) -> None:
        self._ident = unpatched.get_ident()  # (the OS thread's, gevent patched since or not)
        take_args = (
            self._threads,
            threading._active,  # type: ignore[attr-defined]  # (threading.enumerate() copies all)
            self._ident,
            SAMPLE,
            self._sampled_of,
            self._interner,
            _wake_flusher,
        )

        def passes() -> None:
            # A plain sleep between passes, not a timed Event.wait (40 us of CPU a pass, a third of a pass's cost).
            run_passes(
                round(self._interval_s * 1e9),
                self._stopping,
                self._counts,
                FLUSHER,
                take_args,
                running_task_names,
                self._forget_ended,
            )

        # A pass that fails (a bug) loses its own samples, nothing recorded: the loop starts again after a wait that
        # grows while passes keep failing, said in the log at most once a minute.
        self.failures.run(passes, lambda exc: 0, self._stop)

    def sample_once(self) -> None:
        """One pass: a sample of every thread of the program but the one calling (the sampler's)."""
        taken, met = take_samples(
            self._threads,
            threading._active,  # type: ignore[attr-defined]
            self._ident or threading.get_ident(),
            running_task_names(),
            _now(),
            SAMPLE,
            self._sampled_of,
            self._interner,
            _wake_flusher,
        )
        self._counts[0] += 1
        self._counts[1] += taken
        if len(self._threads) > met - 1:
            self._forget_ended()

    def _forget_ended(self) -> None:
        """Forget the threads that ended (their tracks go, and end once delivered)."""
        threads, active = self._threads, threading._active  # type: ignore[attr-defined]
        main, main_ident = threading.main_thread(), unpatched.main_ident()  # (gevent keys it anew: _sampled_of)
        for ident, sampled in list(threads.items()):
            if active.get(ident) is not sampled.thread and not (ident == main_ident and sampled.thread is main):
                del threads[ident]

    def _sampled_of(self, ident: int, thread: threading.Thread | None) -> SampledThread | None:
        """The thread ``thread`` met for the first time (under ``ident``): a track for it, or none for one of
        ringtrace's own threads (kept so: not sampled); None for a thread ``threading`` does not know (started outside
        it: no OS thread id to show it by; asked again next pass)."""
        if thread is None and ident == unpatched.main_ident():
            # gevent's monkey.patch_all() keys the main thread by its main greenlet's id from then on (threading's
            # table and its ident): the OS thread is the main thread still, met again each pass, its track kept.
            thread = threading.main_thread()
            kept = self._threads.get(ident)
            if kept is not None and kept.thread is thread:
                return kept
        native_id = getattr(thread, "native_id", None) if thread is not None else None
        if thread is None or not native_id:
            self._threads.pop(ident, None)
            return None
        if is_background_thread(thread):
            sampled = self._threads[ident] = SampledThread(thread, None, None)
            return sampled
        track = ThreadSamples(display_text(thread.name + SAMPLER_TRACK_SUFFIX), native_id)
        self.timeline.add_source(track)
        sampled = self._threads[ident] = SampledThread(thread, track, thread_clock_id(native_id))
        return sampled

    def _after_fork_in_child(self) -> None:
        """The parent's thread is gone: forget its threads, and sample the child's once the flusher starts there (on
        the child's first event or flush), not in the fork handler, where starting a thread is unsafe."""
        was_running = self._thread is not None and not self._stop.is_set()
        self._thread = None
        self._threads = {}
        self._ident = 0
        if was_running:
            self._stop, self._stopping = unpatched.Event(), bytearray(1)
            self.restart_pending = True
            FLUSHER.when_started(self._start_in_child)

    def _start_in_child(self) -> None:
        if self.restart_pending and not self.running:
            self.start()


#: The running sampler of each timeline, by ``id`` (a timeline lives as long as the process: the default one, say).
_samplers: dict[int, Sampler] = {}
_lock = threading.Lock()
_fork_hook_installed = False


def start_sampler(timeline: Timeline | None = None, hz: float = DEFAULT_HZ) -> Sampler | None:
    """Sample every thread's Python stack into ``timeline`` (the process-wide one if None) ``hz`` times a second.

    Idempotent: a timeline sampled already keeps its sampler (returned). ``hz`` 0 (or less) samples nothing (None);
    above ``MAX_HZ`` is taken as ``MAX_HZ``. Never raises: a sampler that cannot start is said in the log (None).
    """
    try:
        if not hz or hz <= 0:
            return None
        if timeline is None:
            from ringtrace.client.connecting import default_timeline  # (the client's facade: imported when used)

            timeline = default_timeline()
        with _lock:
            sampler = _samplers.get(id(timeline))
            if sampler is not None and (sampler.running or sampler.restart_pending):
                return sampler
            sampler = Sampler(timeline, min(float(hz), MAX_HZ))
            if not sampler.start():
                return None
            _samplers[id(timeline)] = sampler
            _install_fork_hook()
        return sampler
    except Exception:
        log.exception("ringtrace: could not start the sampler")
        return None


def _install_fork_hook() -> None:
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook_installed = True


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # (held by another thread of the parent at the fork, it would never be released)
    for sampler in list(_samplers.values()):
        try:
            sampler._after_fork_in_child()
        except Exception:
            log.exception("ringtrace: the sampler could not start again after fork")
