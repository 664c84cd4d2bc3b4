"""What owns a lane's buffer once its ended thread no longer keeps the task alive (``tasks_let_go.py``): alive while a
collection that destroyed the task runs its finalizers, whatever other callbacks the program gave the collector."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from alone import run_alone
from ringtrace.client.recording.tasks_let_go import LetGo, not_collecting


class Held:
    """Stands in for a task left pending: held weakly by its owner, destroyed in a cycle by a collection."""


class Finalizer:
    """Looks at the owner as the collection that destroys it and ``Held`` runs its finalizers (the task's scopes
    ending, GeneratorExit, on the collecting thread): by then the collection cleared the weak reference to ``Held``."""

    def __init__(self, look: Callable[[], None]) -> None:
        self.look = look

    def __del__(self) -> None:
        self.look()


def destroyed_in_a_cycle(look: Callable[[LetGo], None]) -> LetGo:
    held = Held()
    owner = LetGo(held)  # type: ignore[arg-type]  # (a task's one method it calls: none; it holds it weakly)
    finalizer = Finalizer(lambda: look(owner))
    held.cycle = (held, finalizer)  # type: ignore[attr-defined]
    del held, finalizer
    gc.collect()
    return owner


def test_a_task_let_go_of_lives_while_its_collection_runs_finalizers_beside_a_callback_that_goes() -> None:
    run_alone(__file__, "alive_beside_a_callback_that_goes")  # (where no task was let go of before: none watched yet)


def alive_beside_a_callback_that_goes() -> None:
    def once(phase: str, info: dict[str, Any]) -> None:  # a program's callback that removes itself as it runs
        gc.callbacks.remove(once)

    gc.callbacks.append(once)  # (before the owner's: CPython calls them by index)
    seen: list[bool] = []
    try:
        owner = destroyed_in_a_cycle(lambda owner: seen.extend([owner.is_alive(), owner.is_alive()]))
    finally:
        if once in gc.callbacks:
            gc.callbacks.remove(once)
    assert seen == [True, True]  # the task's scopes may still end into its buffer
    assert owner.is_alive() and not owner.is_alive()  # after: one look more, then gone


def test_in_a_child_forked_during_a_collection_a_task_let_go_of_is_gone_after_one_look() -> None:
    seen: list[bool] = []

    def forked(owner: LetGo) -> None:  # (as if this finalizer let another thread in, which forked)
        not_collecting()
        seen.extend([owner.is_alive(), owner.is_alive()])

    destroyed_in_a_cycle(forked)
    assert seen == [True, False]
