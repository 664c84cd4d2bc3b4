from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from collector_process import CollectorProcess

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this directory is marked ``integration``: ``-m "not integration"`` runs the unit tests alone."""
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def collector() -> Iterator[CollectorProcess]:
    process = CollectorProcess()
    try:
        yield process
    finally:
        process.stop()
