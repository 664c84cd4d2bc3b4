"""Builds the optional C accelerators; everything else is declared in pyproject.toml.

- ``client/speedups/``: the recording hot path, one file a job (see speedups.h); it takes its Keywords type from the
  packer at import, and is built with the packer's headers.
- ``wire/packer/``: the stream encoder's inner loop, one file a job (see packer.h).
- ``collector/ingest/_scan.c``: the collector's check and index of a run of EVENTS frames where they were read.
- ``collector/export/_chrome.c``: Chrome JSON of stored frames' common events, for snapshots.
- ``collector/export/_perfetto.c``: Perfetto packets of stored frames' common events, for snapshots.
  (Both read the stored msgpack with ``collector/export/_msgpack_read.h``.)

``optional=True``: where one cannot be compiled (no C compiler, an unsupported platform) the install goes on without
it, and ringtrace runs the pure-Python code that defines its behaviour.
"""

from pathlib import Path

from setuptools import Extension, setup

SPEEDUPS = Path("client/speedups")
PACKER = Path("wire/packer")


def files(directory: Path, suffix: str) -> list[str]:
    return sorted(str(path) for path in directory.glob(f"*{suffix}"))


setup(
    ext_modules=[
        Extension(
            "ringtrace.client._speedups",
            files(SPEEDUPS, ".c"),
            include_dirs=[str(PACKER)],
            depends=files(SPEEDUPS, ".h") + files(PACKER, ".h"),
            optional=True,
        ),
        Extension("ringtrace.wire._packer", files(PACKER, ".c"), depends=files(PACKER, ".h"), optional=True),
        Extension("ringtrace.collector.ingest._scan", ["collector/ingest/_scan.c"], optional=True),
        Extension(
            "ringtrace.collector.export._chrome",
            ["collector/export/_chrome.c"],
            depends=["collector/export/_msgpack_read.h"],
            optional=True,
        ),
        Extension(
            "ringtrace.collector.export._perfetto",
            ["collector/export/_perfetto.c"],
            depends=["collector/export/_msgpack_read.h"],
            optional=True,
        ),
    ]
)
