"""The function tracer in pure Python: ``PythonTracer``, the twin of the C ``ringtrace.client._functions.Tracer``.

Both write each traced call, when it ends, as one ``RECORD`` (``wire/call_records.py``) into a buffer of its thread's,
and hand the buffers over in ``drain()``. This twin defines what they record; the C one records the same, faster, and
tests hold the two to the same call trees (``tests/unit/test_function_tracers.py``).

How calls are seen: on Python 3.12 and later through ``sys.monitoring`` (PY_START, PY_RESUME and PY_THROW open a call;
PY_RETURN and PY_YIELD end it as ``CALL``, PY_UNWIND as ``CALL_RAISED`` (but as ``CALL`` for a clean exit,
``clean_exit``); with ``builtins``, CALL, C_RETURN and C_RAISE (``CALL`` for ``sys.exit``'s clean exit)
for C functions), for every thread at once; on 3.11 through the profile function (``sys.setprofile`` on the thread that
starts, ``threading.setprofile`` for threads started after: threads already running then are not traced, unlike with
the C twin, which sets every thread's; one module-level function, ``_profile``, for one tracer at a time: a thread
that kept it past a tracer's stop, meeting no call since, gives its calls to the next tracer).

Each thread keeps a stack of the calls it opened since ``start()``: (key, location index, start). A call that ends
pops its entry only when it is on top, so that the end of a call opened before ``start()`` (or of code ``decide``
turned down) is ignored. An entry with index -1 is a call counted for ``max_depth`` that writes no record.

asyncio tasks: the first call of recorded coroutine code in a step of a task (an ``async def`` the task's step began or
resumed; no task step open on the thread yet) looks the task up, once a step, and notes where in the thread's records
the task's begin; the end of that call ends the step, and notes it. No other call looks anything up (coroutine code is
kept out of the table the hot path reads, ``CodeLocations.coroutines``). ``drain_cuts`` tells where in each thread's
records they switch: a call ends within the step it began in, so it is the step's task's iff written while it is open.
Calls a task makes outside any recorded coroutine (library code's, around no program's ``async def``) stay on the
thread. Greenlets: each keeps a stack of its own (``GreenletCalls``, ``greenlet_switches.py``).

Exceptions: one of the tracer's own (or ``decide``'s) is logged, never raised into the program; one that a signal
handler of the program's raises while a callback runs (Python runs handlers between any two bytecodes) goes on to the
program, as it would untraced. On 3.11 the interpreter removes a profile function an exception leaves (that one, a
KeyboardInterrupt, or a RecursionError calling it at the recursion limit): the thread's calls are traced no more, which
a warning says where it can (not at the recursion limit). The C twin's profile function is C, and is not removed so.

Races: the stacks are touched by their own thread only, but ``stop()`` closes every thread's open calls from the
thread that stops; a thread preempted inside a callback at that moment may write one record more (never a torn one).
The callbacks take no lock: what they run (``decide``, and what the interpreter runs meanwhile: a garbage collection's
callbacks, finalisers) may wait for a lock a thread of the program holds, and that thread, meeting code for the first
time, would wait for the callback's lock in turn, for ever (the threads ringtrace starts itself meet the tracer too).
What they share they change in single operations on a list or a dict, which the interpreter lock makes atomic
(``code_locations.py``).
"""

from __future__ import annotations

import logging
import opcode
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable
from typing import Any, Final

from ringtrace.client.delivery import unpatched
from ringtrace.client.functions.callback_errors import failed, profile_function_removed, raised_by_a_signal_handler
from ringtrace.client.functions.code_locations import (
    C_TYPES,
    CO_COROUTINE,
    CodeLocations,
    c_function_name,
    is_c_function,
)
from ringtrace.client.functions.monitoring_tool import free_tool, take_tool
from ringtrace.client.functions.thread_calls import GreenletCalls, ThreadCalls, ThreadEnd, mark_ended
from ringtrace.client.recording.asyncio_watch import current_task
from ringtrace.wire.call_records import CALL, CALL_RAISED, RECORD
from ringtrace.wire.stack_frames import CodeLocation

__all__ = ["DEFAULT_BUFFER_BYTES", "PythonTracer", "c_function_name", "is_c_function"]

log = logging.getLogger("ringtrace.client")

#: The most bytes of records one thread holds between drains, by default: 16 MiB, 699,050 calls (pages untouched cost
#: no memory; a flusher scheduled 100 ms late on a busy machine still finds room).
DEFAULT_BUFFER_BYTES: Final = 16 * 1024 * 1024

#: ``sys.monitoring`` (3.12 and later), else None.
_monitoring: Any = getattr(sys, "monitoring", None)
_MONITORING: Final = _monitoring is not None
_now = time.monotonic_ns
_pack = RECORD.pack
_SIZE = RECORD.size
#: 3.11: the instructions a 'return' event leaves from when no exception ended the call (but one thrown into a
#: generator at its yield leaves from that yield: ``ThreadCalls.thrown``).
_RETURN_OPCODES: Final = frozenset(
    opcode.opmap[name] for name in ("RETURN_VALUE", "YIELD_VALUE") if name in opcode.opmap
)
_YIELD_VALUE: Final = opcode.opmap.get("YIELD_VALUE", -1)
#: The builtin ``sys.exit``: its call raising with code 0 or None (its argument, C_RAISE's arg0) is a clean exit.
_SYS_EXIT: Final = sys.exit

Decide = Callable[[types.CodeType, str], bool]


class PythonTracer(GreenletCalls):
    """Records every call of the code ``decide`` accepts, on every thread, as ``RECORD``s; see the module docstring.

    Args:
        decide: ``decide(code, module)`` -> whether that code's calls are recorded; called once per code object
            first met (``module``: its frame's globals' ``__name__``, "" if none). One that raises is taken as False.
        locations: the process-wide list of code locations that records index; appended to for each location of code
            recorded (``(co_qualname, co_filename, co_firstlineno)``) and each C function (``(name, "", 0)``), once.
        min_duration_ns: a call shorter than this leaves no record.
        max_depth: 0: no limit; else calls deeper than this many below where tracing began on a thread leave none.
        builtins: also record calls of C functions (from code ``decide`` accepts).
        buffer_bytes: the most bytes of records one thread holds between drains; a call past it is ``dropped``.
        wake: called from the recording thread when its buffer passes a quarter full, once per drain.

    Raises:
        ValueError: a negative ``min_duration_ns`` or ``max_depth``, or a ``buffer_bytes`` below one record.

    On 3.11 one tracer runs at a time, held from ``start()`` to ``stop()`` as the C twin is (its start and stop called
    from one thread at a time: ``FunctionTracing``'s lock).
    """

    def __init__(
        self,
        decide: Decide,
        locations: list[CodeLocation],
        *,
        min_duration_ns: int = 0,
        max_depth: int = 0,
        builtins: bool = False,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        wake: Callable[[], object] | None = None,
    ) -> None:
        if min_duration_ns < 0:
            raise ValueError(f"min_duration_ns must be >= 0, got {min_duration_ns}")
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0 (0: no limit), got {max_depth}")
        if buffer_bytes < _SIZE:
            raise ValueError(f"buffer_bytes must be at least one record ({_SIZE} bytes), got {buffer_bytes}")
        self.locations = locations
        self.min_duration_ns = min_duration_ns
        self.max_depth = max_depth
        self.builtins = builtins
        self.buffer_bytes = buffer_bytes
        self._wake_at = buffer_bytes // 4
        self._wake = wake
        #: Which code is recorded, at which location index (its ``codes``, read directly on the hot path).
        self._table = CodeLocations(decide, locations)
        self._codes = self._table.codes
        self._index_of = self._table.index_of
        self._c_index_of = self._table.c_index_of
        # Per OS thread, as the C tracer keeps them: not per greenlet where gevent patched threading.local already.
        self._local = unpatched.interpreters("_local")()
        self._ident: Callable[[], int] = unpatched.interpreters("get_ident")
        self._threads: list[ThreadCalls] = []
        #: Keeps the counts whole while a drain forgets ended threads (never taken in a callback).
        self._threads_lock = threading.Lock()
        #: Counts of the threads forgotten (ended and drained).
        self._forgotten_recorded = 0
        self._forgotten_dropped = 0
        self._active = False
        self._tool: int | None = None

    # -- counters ---------------------------------------------------------------------------------------------------

    @property
    def recorded(self) -> int:
        """Records written so far, on every thread."""
        with self._threads_lock:
            return self._forgotten_recorded + sum(t.recorded for t in self._threads)

    @property
    def dropped(self) -> int:
        """Calls not recorded because their thread's buffer was full."""
        with self._threads_lock:
            return self._forgotten_dropped + sum(t.dropped for t in self._threads)

    # -- start, stop, drain ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Record on every thread from now on (on 3.11: this one and those started later).

        Raises:
            RuntimeError: no sys.monitoring tool id of ``TOOL_IDS`` is free; on 3.11, another tracer profiles.
        """
        if self._active:
            return
        if _MONITORING:
            self._tool = take_tool(self._monitoring_callbacks())
        else:
            _start_profiling(self)
        self._active = True

    def stop(self) -> None:
        """Record no more; the calls still open on every thread are written, ending now. Idempotent."""
        if not self._active:
            return
        self._active = False
        if _MONITORING:
            tool, self._tool = self._tool, None
            if tool is not None:
                free_tool(tool)
        else:
            _stop_profiling(self)
        now = _now()
        with self._threads_lock:
            threads = list(self._threads)
        for calls in threads:
            stack, calls.stack = calls.stack, []
            calls.thrown = {}
            self._end_all(calls, stack, now)
            if calls.in_task:
                calls.end_step()

    def _end_all(self, calls: ThreadCalls, stack: list[tuple[int, int, int]], now: int) -> None:
        while stack:
            _, index, start = stack.pop()
            if index >= 0:
                self._write(calls, start, now, index, CALL)

    def drain(self) -> list[tuple[int, bytes]]:
        """(thread ident, records) for each thread that wrote records since the last drain, ended ones included
        (then forgotten)."""
        return [(ident, records) for ident, records, _ in self.drain_cuts()]

    def drain_cuts(self) -> list[tuple[int, bytes, list[tuple[int, Any]]]]:
        """``drain()``, and where in each thread's records the calls of each asyncio task's steps (or of none) begin:
        (thread ident, records, [(byte offset, task or None)], the first at 0)."""
        taken = []
        with self._threads_lock:
            threads = list(self._threads)
        for calls in threads:
            ended = calls.ended  # read first: a thread seen ended writes nothing after
            records = calls.take_records()
            if records:
                taken.append((calls.ident, records, calls.take_cuts(len(records))))
            if ended:
                with self._threads_lock:
                    self._threads.remove(calls)
                    self._forgotten_recorded += calls.recorded
                    self._forgotten_dropped += calls.dropped
        return taken

    # -- the parts shared by both ways of seeing calls ---------------------------------------------------------------

    def _thread_calls(self) -> ThreadCalls:
        local = self._local
        try:
            return local.calls  # type: ignore[no-any-return]
        except AttributeError:
            pass
        calls = ThreadCalls(self._ident())
        end = ThreadEnd()
        local.calls, local.end = calls, end
        weakref.finalize(end, mark_ended, weakref.ref(calls))
        self._threads.append(calls)  # (no lock: a callback waits for no thread, see the module docstring)
        return calls

    def _open(self, calls: ThreadCalls, key: int, index: int) -> None:
        stack = calls.stack
        if self.max_depth and len(stack) >= self.max_depth:
            index = -1
        stack.append((key, index, _now()))

    def _close(self, calls: ThreadCalls, key: int, kind: int) -> None:
        stack = calls.stack
        if not stack or stack[-1][0] != key:
            if stack and stack[-1][0] == -key:
                self._close_task_step(calls, kind)
            return  # opened before start(), or not recorded
        _, index, start = stack.pop()
        if index >= 0:
            end = _now()
            if end - start >= self.min_duration_ns:
                self._write(calls, start, end, index, kind)

    def _open_coroutine(self, calls: ThreadCalls, code: types.CodeType, index: int) -> None:
        """Open a call of recorded coroutine code; the first in a step of an asyncio task notes the task (one look-up
        a step, none for any other call), and its entry's key is the negated id of its code, which ``_close`` tells."""
        if calls.in_task:
            self._open(calls, id(code), index)
            return
        task = current_task()
        if task is None:
            self._open(calls, id(code), index)
            return
        stack = calls.stack
        if self.max_depth and len(stack) >= self.max_depth:
            index = -1
        calls.begin_step(task)
        stack.append((-id(code), index, _now()))

    def _close_task_step(self, calls: ThreadCalls, kind: int) -> None:
        """End the call on top of the stack, the coroutine that began a step of a task, and the step with it."""
        _, index, start = calls.stack.pop()
        end = _now()
        if index >= 0 and end - start >= self.min_duration_ns:
            self._write(calls, start, end, index, kind)
        calls.end_step()

    def _write(self, calls: ThreadCalls, start: int, end: int, index: int, kind: int) -> None:
        buffer = calls.buffer
        held = len(buffer)
        if held + _SIZE > self.buffer_bytes:
            calls.dropped += 1
            return
        buffer += _pack(start, end, index, kind)
        calls.recorded += 1
        if held + _SIZE > self._wake_at and not calls.woken:
            calls.woken = True
            wake = self._wake
            if wake is not None:
                try:
                    wake()
                except Exception as exc:
                    if raised_by_a_signal_handler(exc):
                        raise
                    log.exception("ringtrace: the function tracer's wake failed")

    # -- 3.12 and later: sys.monitoring's callbacks ---------------------------------------------------------------

    def _monitoring_callbacks(self) -> dict[int, Callable[..., Any]]:
        events = _monitoring.events
        callbacks: dict[int, Callable[..., Any]] = {
            events.PY_START: self._on_start,
            events.PY_RESUME: self._on_start,
            events.PY_THROW: self._on_throw,
            events.PY_RETURN: self._on_return,
            events.PY_YIELD: self._on_return,
            events.PY_UNWIND: self._on_unwind,
        }
        if self.builtins:
            callbacks |= {
                events.CALL: self._on_call,
                events.C_RETURN: self._on_c_return,
                events.C_RAISE: self._on_c_raise,
            }
        return callbacks

    def _on_start(self, code: types.CodeType, offset: int) -> Any:
        try:
            entry = self._codes.get(id(code))
            if entry is None:  # met first, or coroutine code
                index = self._index_of(code, sys._getframe(1))
                if index < 0:
                    return _monitoring.DISABLE
                if code.co_flags & CO_COROUTINE:
                    self._open_coroutine(self._thread_calls(), code, index)
                    return None
            else:
                index = entry[1]
                if index < 0:
                    return _monitoring.DISABLE
            self._open(self._thread_calls(), id(code), index)
        except Exception as exc:
            failed(exc, "a call")
        return None

    def _on_throw(self, code: types.CodeType, offset: int, exception: BaseException) -> None:
        self._on_start(code, offset)  # (not a local event: nothing to disable)

    def _on_return(self, code: types.CodeType, offset: int, value: object) -> Any:
        try:
            calls = self._thread_calls()
            stack = calls.stack
            if stack and stack[-1][0] == id(code):
                self._close(calls, id(code), CALL)
                return None
            if stack and stack[-1][0] == -id(code):
                self._close_task_step(calls, CALL)
                return None
            entry = self._codes.get(id(code))
            index = entry[1] if entry is not None else self._index_of(code, sys._getframe(1))
            if index < 0:
                return _monitoring.DISABLE
        except Exception as exc:
            failed(exc, "a return")
        return None

    def _on_unwind(self, code: types.CodeType, offset: int, exception: BaseException) -> None:
        try:
            self._close(self._thread_calls(), id(code), CALL if clean_exit(exception) else CALL_RAISED)
        except Exception as exc:
            failed(exc, "an unwind")

    def _on_call(self, code: types.CodeType, offset: int, callable_: object, arg0: object) -> Any:
        try:
            entry = self._codes.get(id(code))
            index = entry[1] if entry is not None else self._index_of(code, sys._getframe(1))
            if index < 0:
                return _monitoring.DISABLE  # no C function recorded from code not recorded
            if isinstance(callable_, C_TYPES):
                self._open(self._thread_calls(), id(callable_), self._c_index_of(callable_))
        except Exception as exc:
            failed(exc, "a C call")
        return None

    def _recorded(self, code: types.CodeType) -> bool:
        """Whether ``code`` was decided recorded: a C call's end counts only from such code (the same C function
        called again, inside that call, from code left out is not its end)."""
        entry = self._codes.get(id(code))
        return entry is not None and entry[1] >= 0

    def _on_c_return(self, code: types.CodeType, offset: int, callable_: object, arg0: object) -> None:
        try:
            if isinstance(callable_, C_TYPES) and self._recorded(code):
                self._close(self._thread_calls(), id(callable_), CALL)
        except Exception as exc:
            failed(exc, "a C return")

    def _on_c_raise(self, code: types.CodeType, offset: int, callable_: object, arg0: object) -> None:
        try:
            if isinstance(callable_, C_TYPES) and self._recorded(code):
                clean = callable_ is _SYS_EXIT and (arg0 is _monitoring.MISSING or clean_exit_code(arg0))
                self._close(self._thread_calls(), id(callable_), CALL if clean else CALL_RAISED)
        except Exception as exc:
            failed(exc, "a C raise")


# -- 3.11: the profile function -------------------------------------------------------------------------------------

#: The tracer that ``_profile`` gives events to; None: none (a thread's next event removes its profile function).
_profiling: PythonTracer | None = None


def _start_profiling(tracer: PythonTracer) -> None:
    global _profiling
    if _profiling is not None:
        raise RuntimeError("on Python 3.11 one tracer at a time profiles: another one has started and not stopped")
    _profiling = tracer
    threading.setprofile(_profile)
    sys.setprofile(_profile)


def _stop_profiling(tracer: PythonTracer) -> None:
    global _profiling
    if _profiling is tracer:
        _profiling = None
        threading.setprofile(None)
        sys.setprofile(None)  # other threads remove theirs at their next event (``_profile``)


def _profile(frame: types.FrameType, event: str, arg: Any) -> None:
    """Every thread's profile function. Module-level, so never freed: CPython 3.11 calls it through a reference it
    borrows from the thread, after making the frame's object, which may set off a collection whose callbacks (traced
    too) may remove it from the thread; a tracer's bound method, its last reference gone, was called freed."""
    tracer = _profiling
    try:
        if tracer is None:
            sys.setprofile(None)  # stopped on another thread: this one's profile function goes too
        elif not tracer._active:
            return  # stopping: ``_stop_profiling`` comes next
        elif event == "call":
            code = frame.f_code
            entry = tracer._codes.get(id(code))
            index = entry[1] if entry is not None else tracer._index_of(code, frame)
            if index >= 0:
                calls = tracer._thread_calls()
                if entry is None and code.co_flags & CO_COROUTINE:
                    tracer._open_coroutine(calls, code, index)
                else:
                    tracer._open(calls, id(code), index)
                lasti = frame.f_lasti
                if lasti >= 0 and code.co_code[lasti] == _YIELD_VALUE:  # (a resume by send is at its RESUME)
                    calls.thrown[calls.stack[-1][2]] = lasti
        elif event == "return":
            code = frame.f_code
            calls = tracer._thread_calls()
            lasti = frame.f_lasti
            raised = lasti >= 0 and code.co_code[lasti] not in _RETURN_OPCODES
            if calls.thrown and calls.stack:
                # Thrown in at a yield and gone from there with no value: the exception left (a yield of None
                # from that same yield, after a handler looped back to it, reads the same, and is taken so too).
                thrown_at = calls.thrown.pop(calls.stack[-1][2], None)
                raised = raised or (thrown_at == lasti and arg is None)
            tracer._close(calls, id(code), CALL_RAISED if raised else CALL)
        elif tracer.builtins and event == "c_call":
            code = frame.f_code
            entry = tracer._codes.get(id(code))
            index = entry[1] if entry is not None else tracer._index_of(code, frame)
            if index >= 0 and isinstance(arg, C_TYPES):
                tracer._open(tracer._thread_calls(), id(arg), tracer._c_index_of(arg))
        elif tracer.builtins and tracer._recorded(frame.f_code):  # c_return, c_exception
            tracer._close(tracer._thread_calls(), id(arg), CALL_RAISED if event == "c_exception" else CALL)
    except Exception as exc:
        if raised_by_a_signal_handler(exc):
            profile_function_removed(exc)
        failed(exc, f"a {event} event")
    except BaseException as exc:  # KeyboardInterrupt, say: the program's too
        profile_function_removed(exc)
        raise


def clean_exit(exception: BaseException) -> bool:
    """Whether ``exception`` ends the program cleanly: a SystemExit of code None or 0 (``sys.exit()``,
    ``sys.exit(0)``, ``raise SystemExit``), whose unwinding ends calls as returns, not as raised."""
    return isinstance(exception, SystemExit) and clean_exit_code(exception.code)


def clean_exit_code(code: object) -> bool:
    """Whether a SystemExit of ``code`` (``sys.exit``'s argument) ends the program cleanly: None or 0."""
    return code is None or (isinstance(code, int) and code == 0)
