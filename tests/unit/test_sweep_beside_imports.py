"""A sweep while another thread imports asyncio: ``asyncio.tasks`` is in ``sys.modules`` already, half run (no
``Task`` yet), and must not be taken for the module. The sweep asked it whether each buffer's owner is a task, and the
AttributeError lost the events it had taken."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from importlib.machinery import ModuleSpec

import pytest
from ringtrace.client import MemoryListener, Timeline


@pytest.fixture
def asyncio_tasks_half_imported(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``asyncio.tasks`` as ``sys.modules`` holds it while its body runs (the import system marks its spec so)."""
    spec = ModuleSpec("asyncio.tasks", None)
    spec._initializing = True  # type: ignore[attr-defined]  # what importlib sets until the body has run
    half = types.ModuleType("asyncio.tasks")
    half.__spec__ = spec
    monkeypatch.setitem(sys.modules, "asyncio.tasks", half)
    yield


@pytest.mark.usefixtures("asyncio_tasks_half_imported")
def test_a_timeline_is_swept_whole_while_asyncio_is_half_imported() -> None:
    listener = MemoryListener()
    timeline = Timeline("importing", [listener])
    try:
        for i in range(8):
            with timeline.scope("work", i=i):
                pass
        assert timeline.flush(timeout_s=10)
        assert [e.args["i"] for e in listener.events if e.name == "work"] == list(range(8))
    finally:
        timeline.close()
