"""Function tracing: every call of the program's Python functions a span on its thread, or on its asyncio task's lane
(``trace_functions``).

A tracer (the C ``ringtrace.client._functions.Tracer`` where it was built and ``RINGTRACE_PURE_PYTHON`` is unset,
else its twin ``PythonTracer``) writes each call, when it ends, as a fixed-size record into a buffer of its thread's.
The flusher drains those buffers with the timeline's own events (``Timeline.add_call_source``): each thread's calls go
as a ``CallRun`` onto the thread's track, the one its scopes use, to every listener of the timeline; the calls made in
a step of an asyncio task go onto the task's lane, as its scopes do (the tracer notes the task once a step,
at the first call of a recorded coroutine in it, and tells where the records switch: ``drain_cuts``); a greenlet's
calls go onto a lane of the greenlet's (``greenlet_switches.py``). A buffer half
full wakes the flusher; a call that does not fit in a full one is counted as dropped, and reaches the listeners' loss
counts. At exit the flusher stops the tracer first (``FLUSHER.before_exit``): the calls still open then end there,
and are delivered with the rest.

ringtrace's own threads (the flusher, the streamer, the sampler) are not the program's: calls the tracer records there
(library code, with ``library=True``) are left out. A thread that ended before the drain that takes its calls keeps
its name: ``threading.Thread._delete`` (the last thing a thread does) is wrapped to remember it until then. In a
forked child, tracing goes on (the interpreter's hooks are the parent's); the calls the parent had not handed over yet
are the parent's, and are left out there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.delivery.threads import is_background_thread
from ringtrace.client.functions.call_filter import CallFilter
from ringtrace.client.functions.greenlet_switches import GreenletSwitches
from ringtrace.client.functions.python_tracer import DEFAULT_BUFFER_BYTES, PythonTracer
from ringtrace.client.functions.thread_calls import split
from ringtrace.client.recording.tracks import EndedThread
from ringtrace.wire.call_records import RECORD, CallRun
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.parsing import parse_duration_ns
from ringtrace.wire.stack_frames import CodeLocation

if TYPE_CHECKING:
    from asyncio import Task

    from ringtrace.client.recording.timelines import Timeline

__all__ = ["LOCATIONS", "FunctionTracing", "trace_functions", "tracer_class"]

log = logging.getLogger("ringtrace.client")

#: The code locations of every call traced in this process (append only), which the records of every tracer index.
LOCATIONS: Final[list[CodeLocation]] = []

_lock = threading.Lock()
#: The function tracing running now (one a process: the interpreter has one profile function a thread).
_running: FunctionTracing | None = None


def tracer_class() -> type[Any]:
    """The C tracer where it was built and ``RINGTRACE_PURE_PYTHON`` is unset, else ``PythonTracer``."""
    module = load_optional("ringtrace.client._functions")
    return module.Tracer if module is not None else PythonTracer


#: The longest min_duration and the deepest max_depth a tracer takes (a C long long of ns; a C size_t of calls, on a
#: 32-bit build too).
_MAX_DURATION_NS: Final = 2**63 - 1
_MAX_DEPTH: Final = 2**31 - 1


def _duration_ns(value: float | str, what: str) -> int:
    if isinstance(value, str):
        try:
            ns = parse_duration_ns(value)
        except ConfigError as exc:
            raise ConfigError(f"{what}: {exc}") from None
    elif isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= _MAX_DURATION_NS / 1e9:
        raise ConfigError(f"{what} takes seconds (a number >= 0) or a duration like '1ms', got {value!r}")
    else:
        ns = round(value * 1e9)
    if ns > _MAX_DURATION_NS:
        raise ConfigError(f"{what} is at most {_MAX_DURATION_NS / 1e9:.0f} seconds, got {value!r}")
    return ns


class FunctionTracing:
    """Traces function calls into ``timeline`` between ``start()`` and ``stop()`` (or in a ``with`` block); see
    ``trace_functions``."""

    def __init__(
        self,
        include: Iterable[str] = (),
        exclude: Iterable[str] = (),
        min_duration: float | str = 0.0,
        max_depth: int = 0,
        builtins: bool = False,
        library: bool = False,
        timeline: Timeline | None = None,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        include, exclude = _globs(include, "include"), _globs(exclude, "exclude")
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 0 <= max_depth <= _MAX_DEPTH:
            raise ConfigError(f"max_depth takes an int from 0 (no limit) to {_MAX_DEPTH}, got {max_depth!r}")
        if isinstance(buffer_bytes, bool) or not isinstance(buffer_bytes, int) or buffer_bytes < 24:
            raise ConfigError(f"buffer_bytes takes an int >= 24 (one call), got {buffer_bytes!r}")
        self.filter = CallFilter(include, exclude, library=library)
        self.min_duration_ns = _duration_ns(min_duration, "min_duration")
        self.max_depth = max_depth
        self.builtins = bool(builtins)
        self.buffer_bytes = buffer_bytes
        self._timeline = timeline
        self._tracer: Any = None
        self._greenlets: GreenletSwitches | None = None
        #: The tracer's ``dropped`` at the last drain.
        self._dropped_seen = 0
        self._lock = threading.Lock()

    @property
    def timeline(self) -> Timeline:
        if self._timeline is None:
            from ringtrace.client.connecting import default_timeline  # (the client's facade: imported when used)

            self._timeline = default_timeline()
        return self._timeline

    @property
    def tracer(self) -> Any:
        """The tracer (None before the first ``start()``): its ``recorded`` and ``dropped`` count the calls."""
        return self._tracer

    @property
    def running(self) -> bool:
        return _running is self

    def start(self) -> FunctionTracing:
        """Trace calls from now on, on every thread.

        Raises:
            ConfigError: function tracing runs already in this process (one at a time), or no sys.monitoring tool
                id is free.
        """
        global _running
        with _lock:
            if _running is self:
                return self
            if _running is not None:
                raise ConfigError("function tracing runs already in this process: stop it first")
            timeline = self.timeline
            if self._tracer is None:
                self._tracer = tracer_class()(
                    self.filter.decide,
                    LOCATIONS,
                    min_duration_ns=self.min_duration_ns,
                    max_depth=self.max_depth,
                    builtins=self.builtins,
                    buffer_bytes=self.buffer_bytes,
                    wake=FLUSHER.wake,
                )
            timeline.add_call_source(self)
            try:
                self._tracer.start()
            except RuntimeError as exc:
                timeline.remove_call_source(self)
                raise ConfigError(str(exc)) from None
            _running = self
            self._greenlets = GreenletSwitches(self._tracer)
            self._greenlets.start()
            _remember_ended_threads()
            if self.stop not in FLUSHER.before_exit:
                FLUSHER.before_exit.append(self.stop)  # open calls end and are delivered before the last sweep
        return self

    def stop(self) -> None:
        """Trace no more; the calls open now end here. They and the rest go to the listeners with the next sweep (a
        ``flush()`` delivers them at once). Idempotent."""
        global _running
        with _lock:
            if _running is not self:
                return
            _running = None
            with contextlib.suppress(ValueError):
                FLUSHER.before_exit.remove(self.stop)
            if self._greenlets is not None:
                self._greenlets.stop()  # (first: a suspended greenlet's open calls end as the threads' do)
            self._tracer.stop()

    def __enter__(self) -> FunctionTracing:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def drain_calls(self) -> tuple[list[tuple[threading.Thread | EndedThread, Task[Any] | None, Any]], int]:
        """``Timeline``'s drain of this source (``CallSource``): the calls recorded since the last one as (thread,
        asyncio task whose step made them, or a weak reference to the greenlet that made them, or None, ``CallRun``)
        runs, but ringtrace's own threads', and the calls dropped since."""
        tracer = self._tracer
        if tracer is None:
            return [], 0
        with self._lock:  # (a flush on another thread may drain at the same moment as the flusher)
            ended_before = {ident: len(threads) for ident, threads in _ended.items()}
            drained = [
                (ident, task, part)
                for ident, records, cuts in tracer.drain_cuts()
                for task, part in split(records, cuts)
            ]
            dropped = tracer.dropped
            lost, self._dropped_seen = dropped - self._dropped_seen, dropped
        if not drained:
            with _lock:
                if _running is not self:
                    self.timeline.remove_call_source(self)  # stopped and drained: nothing more will come
        active = {thread.ident: thread for thread in threading.enumerate()} if drained else {}
        main, main_ident = threading.main_thread(), unpatched.main_ident()
        if drained and main_ident is not None and main.ident != main_ident:
            # gevent's monkey.patch_all() keys the main thread by its main greenlet's id from then on: its calls
            # are the OS thread's still (not an ended thread's, each drain's track named after that ident)
            active.setdefault(main_ident, main)
        runs: list[tuple[threading.Thread | EndedThread, Task[Any] | None, Any]] = []
        for ident, task, records in drained:
            thread: threading.Thread | EndedThread | None = _ended_thread_of(ident, records)
            if thread is None:
                alive: threading.Thread | None = active.get(ident)
                if alive is not None and is_background_thread(alive):
                    continue
                thread = alive or EndedThread(ident)
            runs.append((thread, task, CallRun(records, LOCATIONS)))
        for ident, count in ended_before.items():  # (their calls, if any, were drained just now)
            threads = _ended.get(ident)
            if threads is not None:
                del threads[:count]
                if not threads:
                    _ended.pop(ident, None)
        return runs, lost


#: Threads that ended since the last drain, by ident, each with the monotonic ns it ended at, in the order they ended
#: (``_remember_ended_threads``). An ident is reused: threads that ran one after another may share one.
_ended: dict[int, list[tuple[int, EndedThread]]] = {}


def _ended_thread_of(ident: int, records: bytes) -> EndedThread | None:
    """The ended thread whose calls ``records`` are: of the threads of ``ident`` ended since the last drain, the first
    to end after its last call ended (one that ended before it began cannot have made it); None if none did (the
    thread of ``ident`` alive now)."""
    threads = _ended.get(ident)
    if not threads or not records:
        return None
    last_end = RECORD.unpack_from(records, len(records) - RECORD.size)[1]
    for ended_ns, thread in threads:
        if ended_ns >= last_end:
            return thread
    return None


def _remember_ended_threads() -> None:
    """Wrap ``threading.Thread._delete`` (once) to keep each ending thread's name, OS id and end in ``_ended`` while
    function tracing runs: the drain that takes its last calls names its track after it. (No public hook tells a
    thread's end in the thread, with its name, before its ident can be reused; where ``_delete`` is missing, a thread
    that ended before the drain that takes its calls gets a track named after its ident.)"""
    delete = getattr(threading.Thread, "_delete", None)
    if delete is None or getattr(delete, "_ringtrace_remembers", False):
        return

    def _delete(thread: threading.Thread) -> None:
        if _running is not None and thread.ident is not None and not is_background_thread(thread):
            ended = EndedThread(thread.ident, thread.name, thread.native_id)
            _ended.setdefault(thread.ident, []).append((time.monotonic_ns(), ended))
        delete(thread)

    _delete._ringtrace_remembers = True  # type: ignore[attr-defined]
    threading.Thread._delete = _delete  # type: ignore[attr-defined]


def _after_fork_in_child() -> None:
    """In a forked child the tracer's buffers hold the parent's calls, which the parent delivers: not the child's."""
    tracing = _running
    if tracing is None or tracing._tracer is None:
        return
    tracing._lock = threading.Lock()
    try:
        tracing._tracer.drain()
        tracing._dropped_seen = tracing._tracer.dropped
    except Exception:  # (never into the child)
        log.exception("ringtrace: the function tracer could not be reset after fork")
    _ended.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _globs(value: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    globs = tuple(value)
    if not all(isinstance(glob, str) and glob for glob in globs):
        raise ConfigError(f"{what} takes module globs (non-empty strings), got {globs!r}")
    return globs


def trace_functions(
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    min_duration: float | str = 0.0,
    max_depth: int = 0,
    builtins: bool = False,
    library: bool = False,
    timeline: Timeline | None = None,
) -> FunctionTracing:
    """Record every call of the program's Python functions as a span on its thread (in a step of an asyncio task, on
    the task's lane; in a greenlet but the main one, on the greenlet's), into ``timeline`` (the process-wide one if
    None), from ``start()`` (or entering a ``with`` block) to ``stop()``.

        with ringtrace.client.trace_functions(include=["app.*"], min_duration="100us"):
            handle(request)

    Args:
        include: module globs (``fnmatch`` on the module's name, ``__main__`` for the script): with any, only
            modules matching one are traced.
        exclude: module globs never traced (over ``include``).
        min_duration: calls shorter than this leave no span: seconds, or a duration like ``"1ms"``, ``"250us"``.
        max_depth: calls deeper than this many traced calls below where tracing began on a thread leave no span
            (0: no limit).
        builtins: also trace calls of C functions (``len``, ``list.append``, ``time.sleep``) from traced code.
        library: also trace library code (the standard library, site-packages, frozen modules).
        timeline: where the calls go.

    Raises:
        ConfigError: a bad value.
    """
    return FunctionTracing(include, exclude, min_duration, max_depth, builtins, library, timeline)
