"""The optional C accelerator, ``_speedups.c``: the recording hot path and the encoder's inner loop.

``speedups`` is the module, or None when it was not built (no C compiler at install time, an unsupported platform
or interpreter) or when the environment sets ``RINGTRACE_PURE_PYTHON=1``. Either way ringtrace behaves the same: the
pure-Python code in ``recorder.py`` and ``encoder.py`` defines the behaviour, and the C code is held to it by tests.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "load_optional", "speedups"]

#: Set to anything but "" or "0" to run the pure-Python code even where the C accelerators are built.
PURE_PYTHON_ENV = "RINGTRACE_PURE_PYTHON"


def load_optional(module: str) -> ModuleType | None:
    """The optional C module ``module`` (a full name), or None when it was not built or ``PURE_PYTHON_ENV`` is set."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


speedups = load_optional("ringtrace.client._speedups")
