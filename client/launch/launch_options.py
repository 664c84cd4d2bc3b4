"""The options of recording with no code change, declared once: one row (``LaunchOption``) per option in ``OPTIONS``.

Each option is a flag of ``ringtrace run`` and an environment variable, its twin: the variable is what the fleet switch
(``RINGTRACE_AUTO=1``) reads, and what ``ringtrace run`` hands its children so that they record with the same
settings. From the table come ``ringtrace run``'s flags and their help (``run_arguments.py``), the settings read from
the environment (``settings_from``) and the docs' table (``options_markdown``), which a test holds to
``docs/recording-without-code-changes.md``. The integrations' switches (``--no-NAME``) are made from the integration
registry, one flag an integration; their twin is one variable that lists the integrations turned off.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.client.integrations import INTEGRATIONS
from ringtrace.wire.doc_blocks import marked_block, with_marked_block
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.parsing import parse_addresses, parse_duration_ns

__all__ = [
    "AUTO_VARIABLE",
    "OPTIONS",
    "OPTIONS_END",
    "OPTIONS_START",
    "LaunchOption",
    "LaunchSettings",
    "options_block",
    "options_markdown",
    "settings_from",
    "with_options_markdown",
]

#: The fleet switch: ``1`` in a process's environment, and it records from interpreter start.
AUTO_VARIABLE: Final = "RINGTRACE_AUTO"
#: The markers of the options table in the docs (``with_options_markdown`` writes between them).
OPTIONS_START: Final = "<!-- run-options:start -->"
OPTIONS_END: Final = "<!-- run-options:end -->"
#: Samples a second, at most (the sampler's own bound, ``ringtrace.client.sampling``'s MAX_HZ: refused here, not cut).
MAX_SAMPLE_HZ: Final = 1000

# -- the checks of a value ---------------------------------------------------------------------------------------------
# Each takes the text given (a flag's value or a variable's) and returns the value kept, or raises ValueError saying
# what the option takes.


def _address(text: str) -> str:
    try:
        parse_addresses(text)
    except ConfigError:
        raise ValueError("takes HOST:PORT (or several, separated by commas)") from None
    return text


def _name(text: str) -> str | None:
    if "\0" in text:
        raise ValueError("takes a name without NUL")
    return text or None


def _from_zero_to(high: float, reason: str) -> Callable[[str], float]:
    """A parser of a number from 0 to ``high``, which says ``reason`` for any other text."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(reason) from None
        if math.isnan(value) or not 0 <= value <= high:
            raise ValueError(reason)
        return value

    return parse


_sample_hz: Final = _from_zero_to(MAX_SAMPLE_HZ, f"takes samples a second, 0 (off) to {MAX_SAMPLE_HZ}")
#: The longest wait at exit a launch takes (an hour: a wait for ever would hang every program whose collector hangs).
MAX_EXIT_TIMEOUT_S: Final = 3600.0
_exit_timeout: Final = _from_zero_to(MAX_EXIT_TIMEOUT_S, f"takes seconds, 0 to {MAX_EXIT_TIMEOUT_S:g}")
#: The shortest and longest waits between the flusher's passes a launch takes: a millisecond (shorter, the flusher
#: would take the interpreter lock from the program all the time) to a minute (what is recorded reaches the collector
#: that much later; a live tail that ends waits 2 s past its end by default).
MIN_BATCH_INTERVAL_S: Final = 0.001
MAX_BATCH_INTERVAL_S: Final = 60.0
_BATCH_INTERVAL_REASON: Final = f"takes seconds, {MIN_BATCH_INTERVAL_S:g} to {MAX_BATCH_INTERVAL_S:g}"


def _batch_interval(text: str) -> float:
    value = _from_zero_to(MAX_BATCH_INTERVAL_S, _BATCH_INTERVAL_REASON)(text)
    if value < MIN_BATCH_INTERVAL_S:
        raise ValueError(_BATCH_INTERVAL_REASON)
    return value


def _integrations_off(text: str) -> frozenset[str]:
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(names - {integration.name for integration in INTEGRATIONS})
    if unknown:
        raise ValueError(
            f"takes integration names separated by commas ({', '.join(i.name for i in INTEGRATIONS)}); "
            f"{', '.join(unknown)} is none"
        )
    return names


_ON: Final = frozenset({"1", "true", "yes", "on"})
_OFF: Final = frozenset({"0", "false", "no", "off", ""})


def _switch(text: str) -> bool:
    value = text.strip().lower()
    if value not in _ON | _OFF:
        raise ValueError("takes 1 or 0")
    return value in _ON


def _globs(text: str) -> tuple[str, ...]:
    globs = tuple(glob.strip() for glob in text.split(",") if glob.strip())
    if not globs or "\0" in text:
        raise ValueError("takes module globs (app.*), separated by commas")
    return globs


#: The longest --min-duration and the deepest --max-depth a function tracer takes (a C long long of ns, a C int).
_MAX_DURATION_NS: Final = 2**63 - 1
_MAX_DEPTH: Final = 2**31 - 1


def _duration_ns(text: str) -> int:
    try:
        ns = parse_duration_ns(text)
    except ConfigError:
        ns = -1
    if not 0 <= ns <= _MAX_DURATION_NS:
        raise ValueError(
            "takes a duration: a number and a unit (ns, us, ms, s, m, h), like 1ms or 250us, at most "
            f"{_MAX_DURATION_NS // 10**9} s"
        )
    return ns


def _depth(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= _MAX_DEPTH:
        raise ValueError(f"takes a number of calls, 0 (no limit) to {_MAX_DEPTH}")
    return value


@dataclass(frozen=True)
class LaunchOption:
    """One option: its ``LaunchSettings`` field, its flag, its environment variable, its default and its check."""

    field: str
    #: ``--collector``; ``--no-NAME`` for the integrations' switches (a flag an integration, taking no value).
    flag: str
    variable: str
    #: What the flag takes, as ``--help`` shows it (empty: a switch).
    metavar: str
    help: str
    default: Any
    #: The text given to the value kept; raises ValueError saying what the option takes.
    parse: Callable[[str], Any]

    def parsed(self, text: str, given_as: str) -> Any:
        """``text``, held to this row.

        Raises:
            ConfigError: one line naming ``given_as`` (the flag or the variable), what it takes and ``text``.
        """
        try:
            return self.parse(text)
        except ValueError as exc:
            raise ConfigError(f"{given_as} {exc}, got {text!r}") from None


OPTIONS: Final[tuple[LaunchOption, ...]] = (
    LaunchOption(
        "collector",
        "--collector",
        "RINGTRACE_COLLECTOR",
        "HOST:PORT",
        "the collector's ingest address (several, separated by commas, are tried in turn); required",
        None,
        _address,
    ),
    LaunchOption(
        "process_name",
        "--process-name",
        "RINGTRACE_PROCESS_NAME",
        "NAME",
        "shown for the process in traces; by default the script's name or the module's (a multiprocessing child: "
        "its parent's and its own); ringtrace run does not hand it to its children",
        None,
        _name,
    ),
    LaunchOption(
        "sample_hz",
        "--sample-hz",
        "RINGTRACE_SAMPLE_HZ",
        "HZ",
        f"the stack of every thread sampled this often a second (at most {MAX_SAMPLE_HZ}); 0 turns sampling off",
        100.0,
        _sample_hz,
    ),
    LaunchOption(
        "exit_timeout",
        "--exit-timeout",
        "RINGTRACE_EXIT_TIMEOUT",
        "SECONDS",
        "how long the program's exit (and each child's) waits for what it recorded to reach a collector that is "
        "there; one not there is not waited for",
        2.0,
        _exit_timeout,
    ),
    LaunchOption(
        "batch_interval",
        "--batch-interval",
        "RINGTRACE_BATCH_INTERVAL",
        "SECONDS",
        "how often what the program (and each child) recorded is handed to the collector's connection (0.001 to 60); "
        "longer costs a busy program less, and loses more to a kill -9",
        0.05,
        _batch_interval,
    ),
    LaunchOption(
        "integrations_off",
        "--no-NAME",
        "RINGTRACE_INTEGRATIONS_OFF",
        "",
        "an integration turned off (one flag each, below); the variable lists them, separated by commas "
        "(RINGTRACE_INTEGRATIONS_OFF=logging,gc)",
        frozenset(),
        _integrations_off,
    ),
    LaunchOption(
        "functions",
        "--functions",
        "RINGTRACE_FUNCTIONS",
        "",
        "every call of the program's Python functions a span on its thread (function tracing; the options below "
        "choose which)",
        False,
        _switch,
    ),
    LaunchOption(
        "function_include",
        "--include",
        "RINGTRACE_FUNCTIONS_INCLUDE",
        "GLOB",
        "with --functions, only the modules whose name matches one of these globs (repeatable; the variable "
        "separates them with commas); the script run is __main__",
        (),
        _globs,
    ),
    LaunchOption(
        "function_exclude",
        "--exclude",
        "RINGTRACE_FUNCTIONS_EXCLUDE",
        "GLOB",
        "with --functions, never the modules whose name matches one of these globs (repeatable; over --include)",
        (),
        _globs,
    ),
    LaunchOption(
        "function_min_duration_ns",
        "--min-duration",
        "RINGTRACE_FUNCTIONS_MIN_DURATION",
        "DURATION",
        "with --functions, no span for a call shorter than this (1ms, 250us)",
        0,
        _duration_ns,
    ),
    LaunchOption(
        "function_max_depth",
        "--max-depth",
        "RINGTRACE_FUNCTIONS_MAX_DEPTH",
        "N",
        "with --functions, no span for a call deeper than this many traced calls on its thread; 0: no limit",
        0,
        _depth,
    ),
    LaunchOption(
        "function_builtins",
        "--builtins",
        "RINGTRACE_FUNCTIONS_BUILTINS",
        "",
        "with --functions, calls of C functions too (len, list.append, time.sleep), from the code traced",
        False,
        _switch,
    ),
    LaunchOption(
        "function_library",
        "--library",
        "RINGTRACE_FUNCTIONS_LIBRARY",
        "",
        "with --functions, library code too: the standard library, site-packages, frozen modules",
        False,
        _switch,
    ),
)

_BY_FIELD: Final = {option.field: option for option in OPTIONS}


@dataclass(frozen=True)
class LaunchSettings:
    """What recording with no code change starts with: the collector, the name, the sampling rate, the integrations
    turned off, and function tracing."""

    collector: str
    process_name: str | None = None
    sample_hz: float = 100.0
    integrations_off: frozenset[str] = frozenset()
    functions: bool = False
    function_include: tuple[str, ...] = ()
    function_exclude: tuple[str, ...] = ()
    function_min_duration_ns: int = 0
    function_max_depth: int = 0
    function_builtins: bool = False
    function_library: bool = False
    exit_timeout: float = 2.0
    batch_interval: float = 0.05

    @property
    def integrations_on(self) -> list[str]:
        """The names of the integrations to apply, in the registry's order."""
        return [integration.name for integration in INTEGRATIONS if integration.name not in self.integrations_off]

    def children_environment(self) -> dict[str, str]:
        """The variables that make a child process record with these settings (``RINGTRACE_AUTO=1`` among them); the
        process name is left out: a child is named after its own program (or, in multiprocessing, its parent)."""
        environment = {
            AUTO_VARIABLE: "1",
            _BY_FIELD["collector"].variable: self.collector,
            _BY_FIELD["sample_hz"].variable: f"{self.sample_hz:g}",
            _BY_FIELD["exit_timeout"].variable: repr(self.exit_timeout),
            _BY_FIELD["batch_interval"].variable: repr(self.batch_interval),
            _BY_FIELD["integrations_off"].variable: ",".join(sorted(self.integrations_off)),
        }
        if self.functions:
            environment |= {
                _BY_FIELD["functions"].variable: "1",
                _BY_FIELD["function_include"].variable: ",".join(self.function_include),
                _BY_FIELD["function_exclude"].variable: ",".join(self.function_exclude),
                _BY_FIELD["function_min_duration_ns"].variable: f"{self.function_min_duration_ns}ns",
                _BY_FIELD["function_max_depth"].variable: str(self.function_max_depth),
                _BY_FIELD["function_builtins"].variable: "1" if self.function_builtins else "0",
                _BY_FIELD["function_library"].variable: "1" if self.function_library else "0",
            }
        return environment


def settings_from(given: Mapping[str, str], environ: Mapping[str, str]) -> LaunchSettings:
    """The settings from the flags ``given`` (field -> the text given; ``integrations_off`` as names separated by
    commas), each flag not given taken from its variable in ``environ``, else its default.

    Raises:
        ConfigError: one line naming the flag or the variable, what it takes and the value; or no collector given.
    """
    values: dict[str, Any] = {}
    for option in OPTIONS:
        if option.field == "integrations_off":  # the flags add to what the variable turns off
            from_environment = environ.get(option.variable)
            off = option.parsed(from_environment, option.variable) if from_environment else frozenset()
            values[option.field] = off | option.parsed(given.get(option.field, ""), "--no-NAME")
        elif option.field in given:
            values[option.field] = option.parsed(given[option.field], option.flag)
        elif environ.get(option.variable):
            values[option.field] = option.parsed(environ[option.variable], option.variable)
        else:
            values[option.field] = option.default
    tracing_flags = [o.flag for o in OPTIONS if o.field.startswith("function_") and o.field in given]
    if tracing_flags and not values["functions"]:  # (a variable alone is left: a deployment may set them for later)
        functions = _BY_FIELD["functions"]
        raise ConfigError(
            f"{tracing_flags[0]} chooses what function tracing records, which is off: give {functions.flag} too "
            f"(or set {functions.variable}=1), or leave {tracing_flags[0]} out"
        )
    if values["collector"] is None:
        collector = _BY_FIELD["collector"]
        raise ConfigError(f"no collector: give {collector.flag} HOST:PORT or set {collector.variable}")
    return LaunchSettings(**values)


# -- the docs ----------------------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def options_markdown() -> str:
    """The docs' options table (Markdown, ``Flag | Environment | Default | Meaning``), one line an option, then one an
    integration's switch."""
    lines = ["| Flag | Environment | Default | Meaning |", "|---|---|---|---|"]
    for option in OPTIONS:
        flag = f"`{option.flag} {option.metavar}`" if option.metavar else f"`{option.flag}`"
        if isinstance(option.default, bool):
            default = "off"
        elif option.default in (None, frozenset(), ()):
            default = "none"
        else:
            default = f"{option.default:g}"
        cells = (flag, f"`{option.variable}`", default, option.help)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    lines.append(f"| | `{AUTO_VARIABLE}` | unset | `1`: every Python process records from interpreter start |")
    off = _BY_FIELD["integrations_off"].variable
    for integration in INTEGRATIONS:
        cells = (f"`--no-{integration.name}`", f"`{off}={integration.name}`", "on", integration.summary)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def options_block(text: str) -> str | None:
    """What ``text`` holds between ``OPTIONS_START`` and ``OPTIONS_END`` (None: no such block)."""
    return marked_block(text, OPTIONS_START, OPTIONS_END)


def with_options_markdown(text: str) -> str:
    """``text`` (a docs page) with ``options_markdown()`` between its markers.

    Raises:
        ValueError: ``text`` has no ``OPTIONS_START`` ... ``OPTIONS_END`` block.
    """
    return with_marked_block(text, OPTIONS_START, OPTIONS_END, options_markdown())
