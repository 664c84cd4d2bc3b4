"""asyncio as the recorder reads it without importing it: a module the program's thread is still importing (in
``sys.modules``, not yet run) answers as asyncio not imported, never with an error in ringtrace's threads."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest
from ringtrace.client.recording.asyncio_watch import current_task, is_task


def test_a_task_is_a_task_and_the_running_one_is_current() -> None:
    async def main() -> tuple[bool, bool, bool]:
        running = asyncio.current_task()
        return is_task(running), current_task() is running, is_task(object())

    assert asyncio.run(main()) == (True, True, False)
    assert current_task() is None  # (no loop runs in this thread now)


def test_asyncio_tasks_being_imported_makes_nothing_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the flusher's thread sees while the program's thread runs `import asyncio`: the module is there, empty.
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(asyncio.sleep(0))
        monkeypatch.setitem(sys.modules, "asyncio.tasks", types.ModuleType("asyncio.tasks"))
        assert is_task(task) is False
        assert current_task() is None
        monkeypatch.undo()
        assert is_task(task) is True
        loop.run_until_complete(task)
    finally:
        loop.close()
