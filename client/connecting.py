"""``connect()``: the process-wide timeline streamed to a collector, and the process's children connected the same
way (a forked child streams as a new process; a multiprocessing child delivers before it exits)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
from typing import Any

from ringtrace.client.delivery.exit_delivery import SigtermDelivery
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.delivery.listeners import default_process_name, name_process
from ringtrace.client.delivery.process_identity import rename_instance
from ringtrace.client.delivery.retiring import RETIRING
from ringtrace.client.delivery.streaming.streamer import Streamer, rename_unstarted
from ringtrace.client.options import StreamerOptions
from ringtrace.client.recording.timelines import DEFAULT_TIMELINE, Timeline
from ringtrace.wire.arg_values import display_text
from ringtrace.wire.parsing import parse_addresses

__all__ = ["connect", "default_timeline", "launch_connect", "timeline"]

_default = DEFAULT_TIMELINE
_connect_lock = threading.Lock()
#: "PID NAME" of the connected process a multiprocessing child was started by.
_PARENT_NAME_VARIABLE = "RINGTRACE_PARENT_PROCESS"
_connected: tuple[str, StreamerOptions, Streamer] | None = None
#: The connection is the launcher's (``ringtrace run``, the fleet switch: ``launch_connect``), its name the launcher's
#: guess, which the program has not replaced yet: the program's first ``connect()`` under a name renames the process.
_named_by_launcher = False
#: The process whose multiprocessing exit hooks deliver what it recorded (``_deliver_before_multiprocessing_exit``).
_exit_hook_pid = 0


def default_timeline() -> Timeline:
    """The process-wide timeline (records nothing until a listener is attached, by ``connect`` say)."""
    return _default


#: HawkTracer's name for it: the global timeline, with a buffer per thread.
timeline = default_timeline


def connect(address: str, *, process_name: str | None = None, **options: Any) -> Timeline:
    """Stream the process-wide timeline to the collector at ``address`` and return it.

    Connecting happens in the background: this returns at once, and events recorded before the collector answers
    are queued (within ``max_queue_bytes``). Calling it again with the same arguments returns the same timeline;
    with others, the timeline is flushed and moves to the new collector. Under another ``process_name``, the
    process is from then on another process to the collector, a source of its own under the new name (a pool worker
    that connects once per task, as ``task-1`` then ``task-2``, shows as both; under ``task-1`` again, as the first);
    what it recorded before stays under the name it had. The timeline returned is the same, the process-wide one. In
    a ``multiprocessing`` child started with spawn or forkserver, one call (``Pool(initializer=ringtrace.client.connect,
    initargs=(address,))``) is all it takes; the child delivers what it recorded before it exits.

    Args:
        address: ``"HOST:PORT"`` of the collector's ingest listener (``"[::1]:PORT"`` for IPv6); or several, separated
            by commas (``"c1:7700,c2:7700"``: collectors that share a JetStream stream), tried in turn: when the one
            connected to goes, the next attempt is to the next one.
        process_name: shown for this process in traces; defaults to the name it is connected with already (a
            forked child: its parent's), else in a multiprocessing child started with spawn or forkserver to its
            parent's and its own (``web (SpawnPoolWorker-1)``), else to the script's name. A multiprocessing child
            started with fork is named as those are (``web (ForkPoolWorker-1)``) as it is forked, before its first
            event.
        **options: fields of ``StreamerOptions`` (``batch_interval_s``, ``max_queue_bytes``, ...).

    Raises:
        ConfigError: a malformed address, an unknown option (the message lists the valid ones) or a bad value.
    """
    global _named_by_launcher
    named = process_name is not None
    if process_name is None:  # the name it has (a forked child: its parent's), or a spawned child's parent's
        process_name = _connected[1].process_name if _connected is not None else _inherited_process_name()
    opts = StreamerOptions.from_kwargs(process_name=process_name, **options)
    parse_addresses(address)
    timeline = _attach(address, opts, renamed_is_new=not _named_by_launcher)
    _named_by_launcher = _named_by_launcher and not named
    return timeline


def launch_connect(
    address: str, *, process_name: str | None = None, exit_timeout_s: float = 2.0, batch_interval_s: float = 0.05
) -> Timeline:
    """``connect``, as ``ringtrace run`` and the fleet switch call it before the program runs: the name given is the
    launcher's guess (the script's), so the program's own first ``connect()`` under a name renames the process, where
    a later one makes it another process to the collector (``connect``)."""
    global _named_by_launcher
    timeline = connect(
        address, process_name=process_name, exit_timeout_s=exit_timeout_s, batch_interval_s=batch_interval_s
    )
    _named_by_launcher = True
    return timeline


def _attach(address: str, opts: StreamerOptions, *, renamed_is_new: bool = False) -> Timeline:
    """``connect``'s work, its arguments checked: a streamer to ``address`` with ``opts`` on the process-wide timeline
    (in place of the one there, if another). ``renamed_is_new``: under a name other than the connected one, the
    streamer is a new process to the collector (a name the program gave); else the same process, renamed (the name
    a forked multiprocessing child is given)."""
    global _connected
    with _connect_lock:
        if _connected is not None and _connected[:2] == (address, opts) and _connected[2] in _default.listeners:
            return _default
        if renamed_is_new and _connected is not None:
            name = display_text(opts.process_name or default_process_name())
            if name != _connected[2].process_name:  # (what it sent before stays under the name it had)
                rename_instance(_connected[2].process_name, name)
        streamer = Streamer(address, opts, sweep_all=FLUSHER.sweep_all)
        # The streamer connect() attached before (in a forked child: its replacement), if it is still attached.
        previous = next((x for x in _default.listeners if isinstance(x, Streamer)), None) if _connected else None
        if previous is not None:
            _default.replace_listener(previous, streamer)  # no event falls between the two
        else:
            _default.add_listener(streamer)
        # For multiprocessing children started with spawn or forkserver: they connect anew, named after this one.
        with contextlib.suppress(ValueError, OSError):  # a name the environment cannot hold (a NUL): not inherited
            os.environ[_PARENT_NAME_VARIABLE] = f"{os.getpid()} {streamer.process_name}"
        streamer.start()
        name_process(streamer.process_name)  # a FileListener made after is the same process by name too
        _connected = (address, opts, streamer)
        _install_fork_hook()  # after the flusher's (add_listener installs it): at fork, that one runs first
    if previous is not None:  # delivers what it was handed, within exit_timeout_s, on a thread of its own
        RETIRING.retire(previous, opts.exit_timeout_s)
    _deliver_before_multiprocessing_exit()
    return _default


def _inherited_process_name() -> str | None:
    """In a multiprocessing child of a connected process: the parent's name and the child's (``web
    (SpawnPoolWorker-3)``); else None (the script's name, by default)."""
    pid, _, name = os.environ.get(_PARENT_NAME_VARIABLE, "").partition(" ")
    mp_process = sys.modules.get("multiprocessing.process")
    if not name or mp_process is None:
        return None
    parent = mp_process.parent_process()
    if parent is None or str(parent.pid) != pid:  # not started by the process that set it
        return None
    return f"{name} ({mp_process.current_process().name})"


def _deliver_before_multiprocessing_exit() -> None:
    """multiprocessing children end with ``os._exit``, which skips atexit: register with its own exit hooks.

    ``Pool.terminate()`` (and so leaving ``with Pool()``) ends workers with SIGTERM, which skips those too: where
    SIGTERM still has its default action and ``deliver_on_sigterm`` is on, a handler delivers first (within
    ``exit_timeout_s``), then dies by SIGTERM (``SigtermDelivery``).
    """
    mp_process = sys.modules.get("multiprocessing.process")
    if _connected is None or mp_process is None or mp_process.parent_process() is None:
        return
    global _exit_hook_pid
    from multiprocessing import util

    if _exit_hook_pid != os.getpid():  # once a process (a pool worker that connects for each task: one)
        _exit_hook_pid = os.getpid()
        util.Finalize(None, FLUSHER.close_at_exit, exitpriority=100)
    if (
        _connected[1].deliver_on_sigterm
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    ):
        SigtermDelivery().install()


def _after_fork_in_child() -> None:
    """The flusher's own fork handler resets the timelines; here, the module's state and multiprocessing's hook.

    A multiprocessing child clears its finalizers when it starts, after this runs, then calls its after-fork
    hooks: registering one of those is how the exit hook survives into the child. The child's streamer starts its
    thread with the flusher's, at the child's first event: not here (no thread starts inside a fork handler), and
    not at the first sweep, which a child that exits at once makes from its exit handlers, where Python 3.12 and
    later refuse to start a thread (it would deliver nothing). A child multiprocessing forks is named here, as it
    is born (``_name_forked_child``): its first event may come before multiprocessing's after-fork hooks (a garbage
    collection, a hook of the program's), and its HELLO must already carry the child's name.
    """
    global _connect_lock, _connected, _named_at_fork
    _connect_lock = threading.Lock()
    _named_at_fork = False
    if _connected is not None:
        replaced = [listener for listener in _default.listeners if isinstance(listener, Streamer)]
        _connected = (_connected[0], _connected[1], replaced[0]) if replaced else None
    if _connected is not None:
        _named_at_fork = _name_forked_child(_connected)
        FLUSHER.when_started(_connected[2].start)
    mp_util = sys.modules.get("multiprocessing.util")
    if _connected is not None and mp_util is not None:  # (run only in a child multiprocessing forked)
        mp_util.register_after_fork(_default, lambda _: _in_forked_multiprocessing_child())


#: This forked child was named after the ``Process`` multiprocessing forked it as, at the fork.
_named_at_fork = False


def _name_forked_child(connected: tuple[str, StreamerOptions, Streamer]) -> bool:
    """In a child multiprocessing forks (start method fork): its streamer, not started yet, renamed after its parent
    and its ``Process`` (``web (ForkPoolWorker-1)``), which ``Popen._launch`` holds in the frame that forked; False
    where that frame cannot be read (the name then comes with multiprocessing's after-fork hooks)."""
    global _connected
    try:
        child = _forking_process()
        name = getattr(child, "name", None)
        if not isinstance(name, str):
            return False
        address, opts, streamer = connected
        child_name = f"{streamer.process_name} ({name})"
        if not rename_unstarted(streamer, child_name):
            return False
        name_process(streamer.process_name)
        _connected = (address, dataclasses.replace(opts, process_name=child_name), streamer)
        return True
    except Exception:  # never into the program's fork: named by the after-fork hook instead
        return False


_MULTIPROCESSING_FORK = "multiprocessing.popen_fork"


def _forking_process() -> object | None:
    """In a fork handler: the ``multiprocessing`` process being started by this fork (start method fork), read from
    ``Popen._launch``'s frame; None for another fork, or where frames cannot be inspected."""
    frame = sys._getframe() if hasattr(sys, "_getframe") else None
    try:
        while frame is not None:
            if frame.f_globals.get("__name__") == _MULTIPROCESSING_FORK and frame.f_code.co_name == "_launch":
                return frame.f_locals.get("process_obj")
            frame = frame.f_back
        return None
    finally:
        del frame  # (a frame kept in a local holds its callers alive)


def _in_forked_multiprocessing_child() -> None:
    """multiprocessing's after-fork hooks, in a child it forked, now its ``Process``: named as a spawned one is
    (``web (ForkPoolWorker-1)``), and delivering before it exits.

    The name is the HELLO's, given at the fork where the frame that forked could be read (``_name_forked_child``).
    Else the streamer the fork left, under the parent's name, is replaced here by one under the child's: unless an
    event came before these hooks and started it, the collector sees one process, under the child's name."""
    mp_process = sys.modules.get("multiprocessing.process")
    if _connected is not None and mp_process is not None and not _named_at_fork:
        address, opts, streamer = _connected
        child = mp_process.current_process().name
        try:
            _attach(address, dataclasses.replace(opts, process_name=f"{streamer.process_name} ({child})"))
            return  # (which delivers before the exit too)
        except Exception:  # never into the child's start: it records under its parent's name
            pass
    _deliver_before_multiprocessing_exit()


_fork_hook_installed = False


def _install_fork_hook() -> None:
    """Installed on the first ``connect()``: importing ringtrace changes nothing in the process."""
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
    _fork_hook_installed = True
