"""Unit tests of code with a C twin are marked ``pure_python``: ``scripts/check`` runs them again with
``RINGTRACE_PURE_PYTHON=1`` (``tests/pure_python.py`` says which, and why only they)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pure_python import imports_twinned

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_HERE) and imports_twinned(item.path):
            item.add_marker(pytest.mark.pure_python)
