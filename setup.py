"""Builds the optional C accelerators; everything else is declared in pyproject.toml.

- ``client/speedups/``: the recording hot path, one file a job (see speedups.h); it takes its Keywords type from the
  packer at import, and is built with the packer's headers.
- ``client/functions/tracer/``: the function tracer (``ringtrace.client._functions``), one file a job (see tracer.h).
- ``client/clock/``: the TSC read as the monotonic clock (tsc_clock.h), compiled into both of the above.
- ``wire/packer/``: the stream encoder's inner loop, one file a job (see packer.h).
- ``collector/ingest/_scan.c``: the collector's check and index of a run of EVENTS frames where they were read.
- ``collector/export/_chrome.c``: Chrome JSON of stored frames' common events, for snapshots.
- ``collector/export/_perfetto.c``: Perfetto packets of stored frames' common events, for snapshots.
- ``collector/export/_tables.c``: the spans table's Arrow buffers of stored frames, for Parquet snapshots.
- ``collector/incidents/_match.c``: the rules' first pass over stored frames, for incidents.
- ``collector/read/_reach.c``: how far a stored frame's events reach past their starts, for windows.
- ``collector/ingest/otlp/_spans.c``: OTLP spans as native records, read straight from a request's protobuf bytes.
- ``collector/ingest/otlp/_lanes.c``: the lanes of a process's OTLP traces, each span placed on one.
  (All but the scan read the stored msgpack with ``collector/export/_msgpack_read.h``.)

``optional=True``: where one cannot be compiled (no C compiler, an unsupported platform) the install goes on without
it, and ringtrace runs the pure-Python code that defines its behaviour.

The fleet switch, ``client/launch/ringtrace-fleet-switch.pth``, goes to the top of site-packages, beside the packages
(the interpreter runs a ``.pth`` file's import lines only there): ``build_py`` puts it at the top of the wheel, or of
an editable install's wheel, so that ``pip install .`` and ``pip install -e .`` both install it and ``pip uninstall``
removes it (it is in the wheel's RECORD).
"""

import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

SPEEDUPS = Path("client/speedups")
PACKER = Path("wire/packer")
FUNCTION_TRACER = Path("client/functions/tracer")
TSC_CLOCK = Path("client/clock")  # the TSC read as the monotonic clock: compiled into both of the above


FLEET_SWITCH = Path("client/launch/ringtrace-fleet-switch.pth")


def files(directory: Path, suffix: str) -> list[str]:
    return sorted(str(path) for path in directory.glob(f"*{suffix}"))


class BuildPyWithFleetSwitch(build_py):
    """``build_py``, then the fleet switch's ``.pth`` at the top of what the wheel holds."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable wheel is built from install's directory, not build_lib
            top = self.get_finalized_command("install").install_lib
        else:
            top = self.build_lib
        self.copy_file(str(FLEET_SWITCH), os.path.join(top, FLEET_SWITCH.name))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, FLEET_SWITCH.name)]


setup(
    cmdclass={"build_py": BuildPyWithFleetSwitch},
    ext_modules=[
        Extension(
            "ringtrace.client._speedups",
            files(SPEEDUPS, ".c") + files(TSC_CLOCK, ".c"),
            include_dirs=[str(PACKER), str(TSC_CLOCK)],
            depends=files(SPEEDUPS, ".h") + files(PACKER, ".h") + files(TSC_CLOCK, ".h"),
            optional=True,
        ),
        Extension(
            "ringtrace.client._functions",
            files(FUNCTION_TRACER, ".c") + files(TSC_CLOCK, ".c"),
            include_dirs=[str(TSC_CLOCK)],
            depends=files(FUNCTION_TRACER, ".h") + files(TSC_CLOCK, ".h"),
            optional=True,
        ),
        Extension("ringtrace.wire._packer", files(PACKER, ".c"), depends=files(PACKER, ".h"), optional=True),
        Extension("ringtrace.collector.ingest._scan", ["collector/ingest/_scan.c"], optional=True),
        Extension(
            "ringtrace.collector.export._chrome",
            ["collector/export/_chrome.c"],
            depends=["collector/export/_msgpack_read.h", "collector/export/_json_write.h"],
            optional=True,
        ),
        Extension(
            "ringtrace.collector.export._tables",
            ["collector/export/_tables.c"],
            depends=["collector/export/_msgpack_read.h", "collector/export/_json_write.h"],
            optional=True,
        ),
        Extension(
            "ringtrace.collector.read._reach",
            ["collector/read/_reach.c"],
            include_dirs=["collector/export"],
            depends=["collector/export/_msgpack_read.h"],
            optional=True,
        ),
        Extension(
            "ringtrace.collector.export._perfetto",
            ["collector/export/_perfetto.c"],
            depends=["collector/export/_msgpack_read.h"],
            optional=True,
        ),
        Extension(
            "ringtrace.collector.incidents._match",
            ["collector/incidents/_match.c"],
            depends=["collector/export/_msgpack_read.h"],
            optional=True,
        ),
        Extension("ringtrace.collector.ingest.otlp._spans", ["collector/ingest/otlp/_spans.c"], optional=True),
        Extension("ringtrace.collector.ingest.otlp._lanes", ["collector/ingest/otlp/_lanes.c"], optional=True),
    ],
)
