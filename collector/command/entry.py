"""The installed scripts' entry points, ``ringtrace`` and ``ringtrace-collector``.

A client-only install (``pip install .``, msgpack alone) installs both scripts too: without the ``collector`` extra
each says in one line which install brings the library it lacks, and exits with status 1, instead of an import's
traceback. The modules are imported only here, when the script runs.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["collector", "command"]


def command() -> int:
    """``ringtrace``: ``command/main.py``."""
    return _run("ringtrace", "ringtrace.collector.command.main")


def collector() -> int:
    """``ringtrace-collector``: ``service/serve.py``."""
    return _run("ringtrace-collector", "ringtrace.collector.service.serve")


def _run(script: str, module_name: str) -> int:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = _missing_library(exc)
        if missing is None:
            raise
        print(
            f"{script}: needs {missing}, which the collector extra installs: pip install 'ringtrace[collector]'",
            file=sys.stderr,
        )
        return 1
    status: int = module.main()
    return status


def _missing_library(exc: BaseException | None) -> str | None:
    """The third-party library whose absence ``exc`` (or what caused it) reports; None for any other failure."""
    while exc is not None:
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.partition(".")[0] != "ringtrace":
            return exc.name.partition(".")[0]
        exc = exc.__cause__
    return None
