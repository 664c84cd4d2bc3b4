"""The switch between the optional C accelerators and their pure-Python twins, for both sides.

Each C module (the client's recorder and packers, the collector's exporters and scanner) is optional: None when it was
not built (no C compiler at install time, an unsupported platform or interpreter) or when the environment sets
``RINGTRACE_PURE_PYTHON=1``. Either way ringtrace behaves the same: the pure-Python code defines the behaviour, and the
C code is held to it by tests.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "load_optional"]

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
