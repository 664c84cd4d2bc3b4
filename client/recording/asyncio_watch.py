"""asyncio, as the recorder needs it, without importing it: a program that never imports asyncio runs no event loop,
and should not pay for loading asyncio (and ssl, which it loads) at start.

``NO_LOOP`` answers the recorder's "which loop runs in this thread?" before asyncio is imported: ``NoneType()``, a
call in C that answers None. ``when_asyncio`` calls back with the asyncio package as soon as it has run (before any
loop can): at once if it has, else from a finder first on ``sys.meta_path`` that wraps the package's loader (and
leaves once it did). ``is_task`` and ``current_task`` read asyncio from ``sys.modules``: an object can only be a
task, and a task can only run, once asyncio is imported.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeGuard

from ringtrace.client.recording.import_watch import spec_with_loader

if TYPE_CHECKING:
    from asyncio import Task
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["NO_LOOP", "current_task", "is_task", "when_asyncio"]

#: The package watched: once it has run, every module of asyncio a program can use is there.
ASYNCIO: Final = "asyncio"
#: No event loop runs: the answer, in C, until asyncio is imported.
NO_LOOP: Final[Callable[[], None]] = type(None)

_log = logging.getLogger("ringtrace.client")
_lock = threading.Lock()
_waiting: list[Callable[[ModuleType], None]] = []


def is_task(owner: object) -> TypeGuard[Task[Any]]:
    """Whether ``owner`` is an asyncio task: ``asyncio.Task`` (the C one where there is one), or the pure-Python one
    a task factory may make (``asyncio.tasks._PyTask``), or a subclass of either."""
    tasks = _tasks()
    task_class = getattr(tasks, "Task", None)
    if task_class is None:
        return False
    return isinstance(owner, (task_class, getattr(tasks, "_PyTask", task_class)))


def current_task() -> Task[Any] | None:
    """The task the running loop of this thread runs (None: none, or no loop, or asyncio not imported)."""
    current = getattr(_tasks(), "current_task", None)
    if current is None:
        return None
    try:
        task: Task[Any] | None = current()
    except RuntimeError:  # no running loop
        return None
    return task


def when_asyncio(callback: Callable[[ModuleType], None]) -> None:
    """``callback(asyncio)`` now if asyncio is imported, else right after the package has run (in the thread
    importing it). A callback that raises is logged, never raised into the program's import."""
    with _lock:
        _waiting.append(callback)
        if not any(isinstance(finder, _AsyncioWatch) for finder in sys.meta_path):
            sys.meta_path.insert(0, _AsyncioWatch())
    if _loaded(sys.modules.get(ASYNCIO)):
        _ran(sys.modules[ASYNCIO])


def _tasks() -> ModuleType | None:
    """``asyncio.tasks`` once it has run, else None. While another thread imports it, it is in ``sys.modules`` half
    run, with no ``Task`` yet: the flusher's sweep (``drain``) asked it of every buffer then, and the AttributeError
    lost the events the sweep had taken. (Its callers still read what they need with a default: a module may lack
    its spec's mark.)"""
    tasks = sys.modules.get("asyncio.tasks")
    return tasks if _loaded(tasks) else None


def _loaded(module: ModuleType | None) -> bool:
    """Whether ``module`` has run to its end (a module being imported is in ``sys.modules`` already)."""
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def _ran(asyncio: ModuleType) -> None:
    """The asyncio package has run: call back whoever waits, once each, and stop watching."""
    with _lock:
        waiting = _waiting[:]
        _waiting.clear()
        sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _AsyncioWatch)]
    for callback in waiting:
        try:
            callback(asyncio)
        except Exception:  # never into the program's import of asyncio
            _log.warning("ringtrace: could not follow asyncio's running loops", exc_info=True)


class _AsyncioWatch:
    """First on ``sys.meta_path``: finds the asyncio package with the finders after it, and wraps its loader; every
    other import it lets by with one comparison. (Neither class derives from ``importlib.abc``'s: importing that loads
    ``importlib.resources``.)"""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != ASYNCIO:
            return None
        return spec_with_loader(self, fullname, path, target, _ran)
