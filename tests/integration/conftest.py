from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from collector_process import CollectorProcess


@pytest.fixture
def collector() -> Iterator[CollectorProcess]:
    process = CollectorProcess()
    try:
        yield process
    finally:
        process.stop()
