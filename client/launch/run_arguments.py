"""``ringtrace run``'s arguments: its options, then the program (``script.py [args]`` or ``-m module [args]``).

Options stop at the program, as ``python``'s do: everything after the script or ``-m module`` is the program's, even
what looks like one of ours (``ringtrace run app.py --collector x`` hands ``--collector x`` to ``app.py``). The
flags, their values' names and their help come from the option table (``launch_options.py``); the checks of the
values are the table's too (``settings_from``), so a flag and its variable are refused alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ringtrace.client.integrations import INTEGRATIONS
from ringtrace.client.launch.launch_options import AUTO_VARIABLE, OPTIONS
from ringtrace.client.launch.program import Program
from ringtrace.wire.errors import ConfigError

__all__ = ["RunArguments", "parse_run_arguments", "run_help"]

USAGE = "usage: ringtrace run [options] script.py [args] | ringtrace run [options] -m module [args]"
#: Flag -> the field it sets (the integrations' switches apart).
_VALUE_FLAGS = {option.flag: option.field for option in OPTIONS if option.metavar}
_SWITCHES = {f"--no-{integration.name}": integration.name for integration in INTEGRATIONS}
#: Flag -> the field it turns on (``--functions``, ``--builtins``, ``--library``).
_ON_FLAGS = {option.flag: option.field for option in OPTIONS if not option.metavar and option.default is False}
#: The flags that may be given more than once (module globs), their values joined as their variable's are.
_REPEATABLE = {"--include", "--exclude"}


@dataclass
class RunArguments:
    """What ``ringtrace run`` was given: the flags' texts by field, and the program (None with ``--help``)."""

    given: dict[str, str] = field(default_factory=dict)
    program: Program | None = None
    help: bool = False


def parse_run_arguments(argv: list[str]) -> RunArguments:
    """``argv`` (what follows ``run``) read.

    Raises:
        ConfigError: one line: an unknown flag, a flag without its value, or no program.
    """
    parsed = RunArguments()
    turned_off: list[str] = []
    position = 0
    while position < len(argv):
        token = argv[position]
        position += 1
        if token in ("-h", "--help"):
            parsed.help = True
            return parsed
        if token == "-m" or (token.startswith("-m") and not token.startswith("--")):
            module = token[2:] or (argv[position] if position < len(argv) else "")
            if not token[2:]:
                position += 1
            if not module:
                raise ConfigError("-m takes a module's name")
            parsed.program = Program(None, module, tuple(argv[position:]))
            break
        if token == "--":
            if position >= len(argv):
                raise ConfigError("-- is followed by no script")
            parsed.program = Program(argv[position], None, tuple(argv[position + 1 :]))
            break
        if not token.startswith("-") or token == "-":
            parsed.program = Program(token, None, tuple(argv[position:]))
            break
        flag, equals, value = token.partition("=")
        if flag in _SWITCHES and not equals:
            turned_off.append(_SWITCHES[flag])
        elif flag in _ON_FLAGS and not equals:
            parsed.given[_ON_FLAGS[flag]] = "1"
        elif flag in _VALUE_FLAGS:
            if not equals:
                if position >= len(argv):
                    raise ConfigError(f"{flag} takes a value")
                value = argv[position]
                position += 1
            field = _VALUE_FLAGS[flag]
            if flag in _REPEATABLE and field in parsed.given:
                value = f"{parsed.given[field]},{value}"
            parsed.given[field] = value
        else:
            raise ConfigError(f"unknown option {token!r} (see ringtrace run --help)")
    if parsed.program is None:
        raise ConfigError("give a script or -m module to run")
    if turned_off:
        parsed.given["integrations_off"] = ",".join(turned_off)
    return parsed


def run_help() -> str:
    """``ringtrace run --help``: the usage, then a line per option and per integration's switch, from the tables."""
    lines = [
        USAGE,
        "",
        "Runs the program as python would, recording it from the start: its spans, the libraries' integrations and",
        "samples of every thread's stack, streamed to the collector. Its children (subprocesses, multiprocessing",
        f"and forked children) record too, each as its own process ({AUTO_VARIABLE}=1 and the variables below are",
        "set for them). Options stop at the script or -m module: what follows is the program's.",
        "",
        "options (each has its environment variable, read when the flag is not given):",
    ]
    for option in OPTIONS:
        if option.field == "integrations_off":
            continue
        flag = f"  {option.flag} {option.metavar}" if option.metavar else f"  {option.flag}"
        lines.append(flag.ljust(28) + f"{option.help} [{option.variable}]")
    off = next(option.variable for option in OPTIONS if option.field == "integrations_off")
    lines.append("")
    lines.append(f"integrations, each on unless turned off [{off}=NAME,NAME]:")
    for integration in INTEGRATIONS:
        lines.append(f"  --no-{integration.name}".ljust(28) + integration.summary)
    return "\n".join(lines)
