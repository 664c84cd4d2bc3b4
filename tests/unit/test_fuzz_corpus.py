"""The fuzzers' corpus (``tests/fuzz/corpus/``) through the checks the fuzzers make (``scripts/fuzz``): the C
accelerators and their pure-Python twins make the same of every input kept there, the seeds and any input a fuzzer
found that once told them apart."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz import fuzz_events_json, fuzz_frame_packets, fuzz_scan_events
from ringtrace.client.accelerator import speedups
from ringtrace.collector.export import chrome_frames, perfetto_frames

#: Without the C modules (not built, or RINGTRACE_PURE_PYTHON=1) there is nothing to hold their twins to.
needs_c = pytest.mark.skipif(
    speedups is None or not chrome_frames.ACCELERATED or not perfetto_frames.ACCELERATED,
    reason="the C accelerators are not loaded",
)

CORPUS = Path(__file__).parent.parent / "fuzz" / "corpus"


def inputs(fuzzer: str) -> list[Path]:
    paths = sorted((CORPUS / fuzzer).iterdir())
    assert paths, f"no inputs in {CORPUS / fuzzer}"
    return paths


@needs_c
@pytest.mark.parametrize("path", inputs("events_json"), ids=lambda path: path.name)
def test_the_c_writer_and_the_python_walk_write_each_input_alike(path: Path) -> None:
    fuzz_events_json.check(path.read_bytes())


@needs_c
@pytest.mark.parametrize("path", inputs("scan_events"), ids=lambda path: path.name)
def test_scan_events_and_its_twin_index_each_input_alike(path: Path) -> None:
    fuzz_scan_events.check(path.read_bytes())


@needs_c
@pytest.mark.parametrize("path", inputs("frame_packets"), ids=lambda path: path.name)
def test_the_c_writer_and_the_python_writer_write_each_input_alike_in_perfetto(path: Path) -> None:
    fuzz_frame_packets.check(path.read_bytes())
