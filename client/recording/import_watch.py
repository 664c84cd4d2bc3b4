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
    wrap: Callable[[Any], Any],
) -> ModuleSpec | None:
    """The spec the finders on ``sys.meta_path`` but ``watcher`` give ``fullname``, its loader wrapped by ``wrap``
    where it is one that executes modules (``exec_module``); None if none finds it."""
    for finder in sys.meta_path:
        if finder is watcher or not hasattr(finder, "find_spec"):
            continue
        spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
        if spec is not None:
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = wrap(spec.loader)
            return spec
    return None
