"""The fleet switch: with ``RINGTRACE_AUTO=1`` in its environment, a Python process records from interpreter start.

The package installs ``ringtrace-fleet-switch.pth`` into site-packages (coverage.py's pattern for subprocesses); the
interpreter's ``site`` runs its one line at start:

    import os; os.environ.get("RINGTRACE_AUTO") not in (None, "", "0") and __import__("ringtrace.client.launch...

Unset, that is one environment lookup and nothing else: this module is not even imported. Set, ``start`` reads the
settings ``ringtrace run`` reads (``RINGTRACE_COLLECTOR``, ...; ``launch_options.py``) and starts recording as it does
(``recording_start.py``), named after the program: the script's name, the module's (``-m``), ``python`` for ``-c``.
It never raises into the program: a bad value is one warning line on stderr, and the program runs unrecorded.

Left out: ringtrace's own commands (``ringtrace``, ``ringtrace-collector``, ``-m ringtrace...``: the collector does not
record itself), and multiprocessing's helper processes (the spawn and forkserver starters, the resource tracker: ``-c
"from multiprocessing.spawn import ..."`` and the like). A worker they start records once multiprocessing has made it
a ``Process`` (from multiprocessing's after-fork hooks, or for spawn ``SpawnProcess._after_fork``), so that it is
named after its parent and itself (``web (SpawnProcess-1)``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from ringtrace.client.launch.launch_options import AUTO_VARIABLE, LaunchSettings, settings_from
from ringtrace.client.launch.recording_start import say, start_recording
from ringtrace.wire.errors import ConfigError

__all__ = ["program_of", "start"]

_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"", "0", "false", "no", "off"})
#: Interpreter options that take a value (``-W error``, ``-X dev``).
_OPTIONS_WITH_VALUE = frozenset("WX")
_started = False
#: ringtrace's console scripts, as the interpreter is given them (on Windows, the launcher ``.exe`` itself).
_OUR_SCRIPTS = frozenset(
    f"{script}{suffix}" for script in ("ringtrace", "ringtrace-collector") for suffix in ("", ".exe", "-script.py")
)
#: What multiprocessing's helper processes run (``python -c CODE``): the spawn and forkserver starters, the tracker.
_MULTIPROCESSING_HELPERS = (
    "from multiprocessing.spawn import ",
    "from multiprocessing.forkserver import ",
    "from multiprocessing.resource_tracker import ",
)


def start() -> None:
    """Called by the ``.pth`` line where ``RINGTRACE_AUTO`` is set; once a process (a venv's site-packages can be read
    twice, through ``lib`` and ``lib64``). Never raises."""
    global _started
    if _started:
        return
    _started = True
    try:
        _start(os.environ, sys.orig_argv)
    except Exception as exc:  # nothing of ours may keep the program from starting
        say(f"not recording: {type(exc).__name__}: {exc}")


def _start(environ: Mapping[str, str], argv: Sequence[str]) -> None:
    switch = environ.get(AUTO_VARIABLE, "").strip().lower()
    if switch in _OFF:
        return
    if switch not in _ON:
        say(f"{AUTO_VARIABLE} takes 1 or 0, got {environ[AUTO_VARIABLE]!r}: not recording")
        return
    kind, what = program_of(argv)
    if (kind == "script" and os.path.basename(what) in _OUR_SCRIPTS) or (
        kind == "module" and what.partition(".")[0] == "ringtrace"
    ):
        return  # ringtrace's own commands: `ringtrace run` starts recording itself; the collector never does
    try:
        settings = settings_from({}, environ)
    except ConfigError as exc:
        say(f"{exc}: not recording ({AUTO_VARIABLE}=1)")
        return
    if kind == "command" and what.startswith(_MULTIPROCESSING_HELPERS):
        _record_multiprocessing_children(settings)
        return
    name = settings.process_name or (os.path.basename(what) if kind == "script" else what if kind == "module" else "")
    start_recording(settings, name or "python")


def program_of(argv: Sequence[str]) -> tuple[str, str]:
    """What the interpreter was asked to run, from its command line (``sys.orig_argv``): ``("script", path)``,
    ``("module", name)``, ``("command", code)`` or ``("stdin", "")``."""
    position = 1
    while position < len(argv):
        token = argv[position]
        position += 1
        if token == "--" or not token.startswith("-") or token == "-":
            if token == "--":
                token = argv[position] if position < len(argv) else "-"
            return ("stdin", "") if token == "-" else ("script", token)
        if token.startswith("--"):
            position += token == "--check-hash-based-pycs"
            continue
        for index, letter in enumerate(token[1:], start=1):  # a cluster of letters: -uc "code", -Wdefault, -mjson
            if letter in "cm":
                value = token[index + 1 :] or (argv[position] if position < len(argv) else "")
                return ("command" if letter == "c" else "module", value)
            if letter in _OPTIONS_WITH_VALUE:
                position += not token[index + 1 :]
                break
    return "stdin", ""


class _Starter:
    """Starts recording in a multiprocessing child, once. Kept alive by this module: multiprocessing's after-fork
    registry holds it weakly."""

    def __init__(self, settings: LaunchSettings) -> None:
        self.settings = settings
        self._started_in = 0

    def __call__(self, _: object = None) -> None:
        if self._started_in == os.getpid():
            return
        self._started_in = os.getpid()
        try:
            start_recording(self.settings, self.settings.process_name)  # None: named after the parent and itself
        except Exception as exc:
            say(f"not recording: {type(exc).__name__}: {exc}")


_starters: list[_Starter] = []


def _record_multiprocessing_children(settings: LaunchSettings) -> None:
    """A child's ``Process._bootstrap`` runs the after-fork hooks (fork and forkserver children), or, for a spawn
    child, ``SpawnProcess._after_fork`` alone (which does nothing): the starter goes in both, and runs once."""
    from multiprocessing import context, util

    starter = _Starter(settings)
    _starters.append(starter)
    util.register_after_fork(starter, starter)
    spawned = context.SpawnProcess
    original = spawned.__dict__.get("_after_fork")
    if isinstance(original, staticmethod):

        def after_spawn() -> None:
            original.__func__()
            starter()

        spawned._after_fork = staticmethod(after_spawn)  # type: ignore[attr-defined]
