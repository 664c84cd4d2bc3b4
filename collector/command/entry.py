"""The entry points of ``ringtrace-collector`` and of the ``ringtrace`` command's collector subcommands.

The ``ringtrace`` script itself is the client's (``ringtrace.client.launch.command``: ``ringtrace run`` works in a
client-only install); it hands every other subcommand to ``command`` here, by importlib. A client-only install
(``pip install .``, msgpack alone) installs both scripts too: without the ``collector`` extra each subcommand says in
one line which install brings the library it lacks, and exits with status 1, instead of an import's traceback. The
modules are imported only here (and by the command, its subcommand's), when the script runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["collector", "command"]


def command(argv: Sequence[str] | None = None) -> int:
    """``ringtrace SUBCOMMAND ...`` (``argv``, by default ``sys.argv[1:]``): ``command/main.py``."""
    given = list(sys.argv[1:] if argv is None else argv)
    subcommand = next((token for token in given if not token.startswith("-")), "")
    return _run(f"ringtrace {subcommand}".rstrip(), "ringtrace.collector.command.main", given)


def collector() -> int:
    """``ringtrace-collector``: ``service/serve.py``."""
    return _run("ringtrace-collector", "ringtrace.collector.service.serve")


def _run(script: str, module_name: str, argv: list[str] | None = None) -> int:
    try:
        module = importlib.import_module(module_name)
        # (the command imports its subcommand's modules when it runs: a library they lack is said the same way)
        status: int = module.main() if argv is None else module.main(argv)
    except ImportError as exc:
        missing = _missing_library(exc)
        if missing is None:
            raise
        print(
            f"{script}: needs {missing}, which the collector extra installs: pip install 'ringtrace[collector]'",
            file=sys.stderr,
        )
        return 1
    return status


def _missing_library(exc: BaseException | None) -> str | None:
    """The third-party library whose absence ``exc`` (or what caused it) reports; None for any other failure."""
    while exc is not None:
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.partition(".")[0] != "ringtrace":
            return exc.name.partition(".")[0]
        exc = exc.__cause__
    return None
