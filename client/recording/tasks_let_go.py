"""A lane's buffer that no longer keeps its task alive (``Tracks._let_go_of_idle_lanes``): what owns the buffer in
the task's place, for as long as the task may still record into it, and what names the task's events.

A task left pending is destroyed by a garbage collection (in a cycle with the future it waits on), which clears the
weak references of all it destroys, then runs their finalizers, which end the scopes the tasks had open into the
buffer: Python code, on the collecting thread, which a busy machine may hold up for many passes of the flusher (a
buffer forgotten meanwhile took their spans nowhere, counted nowhere). ``gc.callbacks`` say when a collection stops:
after its finalizers. A callback costs each collection about 0.6 us, from the first task let go of on.
"""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncio import Task

__all__ = ["LetGo", "let_go", "name_of", "not_collecting"]

#: Whether a garbage collection is under way, from its start to its stop (after the finalizers it ran).
_collecting = False


def let_go(buffer: Any, task: Task[Any]) -> None:
    """``buffer`` (a ``TrackBuffer``) holds ``task`` weakly from now on (``LetGo``), its events named after it as it is
    named now."""
    buffer.first_task = name_of(task)
    buffer.owner = LetGo(task)


class LetGo:
    """Owns a lane's buffer in place of a task it no longer keeps alive: alive while the task is, while any garbage
    collection is under way, and for one look more (a task destroyed outside one: its weak references are cleared
    before its coroutine is closed)."""

    __slots__ = ("_seen_gone", "_task")

    def __init__(self, task: Task[Any]) -> None:
        _watch_collections()  # (before the task can be collected: a collection under way now cannot collect it)
        self._task = weakref.ref(task)
        self._seen_gone = False

    def is_alive(self) -> bool:
        if self._task() is not None or _collecting:
            return True
        seen, self._seen_gone = self._seen_gone, True
        return not seen


def name_of(task: Task[Any]) -> str:
    """``task``'s name, as what names its events without keeping it alive holds it: its type's ``get_name``'s (not an
    attribute of the instance's, as the C recorder asks it), a str (a subclass's may answer anything, or raise: the
    recording it is asked for never raises into the program)."""
    try:
        name = type(task).get_name(task)
        return name if type(name) is str else str.__str__(str(name))
    except Exception as error:
        return f"{type(task).__name__} (its get_name raised {type(error).__name__})"


def not_collecting() -> None:
    """A fork during another thread's collection (its finalizers let the forking thread in) leaves no collection
    under way in the child."""
    global _collecting
    _collecting = False


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    global _collecting
    _collecting = phase == "start"


def _watch_collections() -> None:
    """``_collecting`` kept from now on (from the first task let go of: no other program's process is changed). First
    of the callbacks: CPython calls them by index, so one that removes itself as it runs would skip the next."""
    if not any(callback is _on_collection for callback in gc.callbacks):  # (is: a callback's == may do anything)
        gc.callbacks.insert(0, _on_collection)
