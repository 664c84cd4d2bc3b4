"""A program run as ``python`` runs it: a script (``python app.py``), a directory or zip file with a ``__main__.py``,
or a module (``python -m app``), in this interpreter.

What the program sees is what it would see under ``python``: ``sys.argv``, ``sys.path[0]``, a fresh ``__main__``
module with the same names in it (so ``if __name__ == "__main__"``, pickling for multiprocessing and the like behave),
the same traceback (the frames of this module left out: ``python -m`` shows runpy's, and so does this) and the same
ending: ``sys.exit(3)`` is status 3, an uncaught exception is its traceback and status 1, an uncaught
``KeyboardInterrupt`` ends the process by SIGINT once the exit handlers have run, and signals keep their default
actions (a program killed by SIGTERM dies by SIGTERM).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import importlib.machinery
import os
import runpy
import signal
import sys
import types
import zipimport
from dataclasses import dataclass
from typing import Final

__all__ = ["RUNNING_CODE", "CannotOpen", "Program", "check_program", "run_program"]


class CannotOpen(Exception):
    """The script cannot be read: said in one line, status 2, as ``python`` does."""


@dataclass(frozen=True)
class Program:
    """What to run: a script's path or a module's name, and its arguments."""

    #: ``app.py`` (or a directory, or a zip file), as given.
    script: str | None
    #: ``app`` of ``-m app``.
    module: str | None
    args: tuple[str, ...]

    @property
    def name(self) -> str:
        """The default process name: the script's (file) name, or the module's."""
        if self.module is not None:
            return self.module
        return os.path.basename(os.path.normpath(self.script or "")) or "python"


def check_program(program: Program) -> None:
    """Raises ``CannotOpen`` where ``python`` would refuse to start: a script that cannot be read (before recording
    starts, so that nothing is recorded for a program that never ran)."""
    script = program.script
    if script is None or os.path.isdir(script):
        return
    try:
        with open(script, "rb"):
            pass
    except OSError as exc:  # as python says it (status 2), with this command's name for the interpreter's
        raise CannotOpen(f"can't open file {os.path.abspath(script)!r}: [Errno {exc.errno}] {exc.strerror}") from None


def run_program(program: Program) -> int:
    """Run ``program`` in this interpreter and return its exit status (what ``SystemExit`` carries, as the
    interpreter reads it, propagates as itself). An uncaught ``KeyboardInterrupt`` does not return: the process ends
    by SIGINT, as under ``python``."""
    main = _fresh_main()
    try:
        if program.module is not None:
            sys.argv[:] = ["-m", *program.args]  # runpy writes the module's file in argv[0]
            sys.path[0] = os.getcwd()
            _run_module(program.module, alter_argv=True)
        elif program.script is not None:
            sys.argv[:] = [program.script, *program.args]
            _run_path(program.script, main)
    except (SystemExit, CannotOpen):
        raise
    except BaseException as exc:
        _report(exc)
        if isinstance(exc, KeyboardInterrupt):
            _die_by_sigint()
        return 1
    return 0


def _fresh_main() -> types.ModuleType:
    """A new ``__main__`` with the names a script's has before it runs (this command's own ``__main__`` set aside)."""
    previous = sys.modules.get("__main__")
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __cached__=None, __loader__=None, __spec__=None)
    if previous is not None and "__annotations__" in vars(previous):  # (3.11 to 3.13 give __main__ one)
        vars(main)["__annotations__"] = {}
    sys.modules["__main__"] = main
    return main


def _run_path(path: str, main: types.ModuleType) -> None:
    """``python PATH``: a source file, or a directory or zip file holding ``__main__.py``."""
    absolute = os.path.abspath(path)
    if os.path.isdir(path) or _is_zip(path):
        sys.path[0] = absolute  # as python does: the directory or zip file itself, then its __main__ as a module
        _run_module("__main__", alter_argv=False)
        return
    try:
        with open(path, "rb") as source_file:
            source = source_file.read()
    except OSError as exc:  # as python says it (status 2), with this command's name for the interpreter's
        raise CannotOpen(f"can't open file {absolute!r}: [Errno {exc.errno}] {exc.strerror}") from None
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    code = compile(source, absolute, "exec", dont_inherit=True)
    main.__dict__.update(__file__=absolute, __loader__=importlib.machinery.SourceFileLoader("__main__", absolute))
    _run_code(code, main.__dict__)


# The two frames that call the program, and nothing else (see RUNNING_CODE).


def _run_module(name: str, alter_argv: bool) -> None:
    runpy._run_module_as_main(name, alter_argv=alter_argv)  # type: ignore[attr-defined]  # python -m's own


def _run_code(code: types.CodeType, namespace: dict[str, object]) -> None:
    exec(code, namespace)


def _is_zip(path: str) -> bool:
    """Whether ``python`` would run ``path`` as a zip file: asked as it does, of ``zipimport`` (loaded at every
    interpreter's start, where importing ``zipfile`` would be this command's work among the program's first samples)."""
    try:
        zipimport.zipimporter(path)
    except (zipimport.ZipImportError, OSError):
        return False
    return True


def _report(exc: BaseException) -> None:
    """The traceback ``python`` prints: through ``sys.excepthook`` (the program's own, if it set one), starting at
    the program's first frame; and, as ``python`` does, the exception left in ``sys.last_exc`` and the like."""
    traceback = exc.__traceback__
    while traceback is not None and traceback.tb_frame.f_code.co_filename == __file__:
        traceback = traceback.tb_next
    exc.__traceback__ = traceback
    # What python leaves for the exit (and for post-mortem debugging) before it calls the hook.
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, traceback
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    try:
        sys.excepthook(type(exc), exc, traceback)
    except Exception:  # a hook that fails: python says so in its own words, and so the default hook does here
        sys.__excepthook__(type(exc), exc, traceback)


def _die_by_sigint() -> None:
    """An uncaught KeyboardInterrupt ends ``python`` by SIGINT after the exit handlers: a shell sees ^C, not 1."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


#: The code of the frames that call the program: below them (and their callers) a stack is this command's, not the
#: program's. This command's own work before the program runs is in none of them.
RUNNING_CODE: Final = (_run_module.__code__, _run_code.__code__)
