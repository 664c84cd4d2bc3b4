"""Watching for a module's import: a finder first on ``sys.meta_path`` asks the finders after it for the module's
spec and wraps its loader, so that something runs once the module has run (asyncio's task tables, greenlet's
switches, an integration). No ``importlib.abc`` (importing it loads ``importlib.resources``): a program that never
imports the module pays one comparison per import."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["spec_with_loader"]


def spec_with_loader(
    watcher: object,
    fullname: str,
    path: Sequence[str] | None,
    target: ModuleType | None,
    then: Callable[[ModuleType], None],
) -> ModuleSpec | None:
    """The spec the finders on ``sys.meta_path`` but ``watcher`` give ``fullname``, its loader wrapped to call
    ``then(module)`` once the module has run, where it is one that executes modules (``exec_module``); None if none
    finds it."""
    for finder in sys.meta_path:
        if finder is watcher or not hasattr(finder, "find_spec"):
            continue
        spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
        if spec is not None:
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _ThenRun(spec.loader, then)  # type: ignore[assignment]  # a loader by its methods
            return spec
    return None


class _ThenRun:
    """A module's own loader, then ``then(module)``."""

    def __init__(self, loader: Any, then: Callable[[ModuleType], None]) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__.loader = self._loader  # type: ignore[union-attr]  # the module keeps its own loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> object:  # is_package, get_code, get_resource_reader, ... of its own loader
        return getattr(self._loader, name)
