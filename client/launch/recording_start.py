"""Recording started with no code change: the one function ``ringtrace run`` and the fleet switch both call.

It connects the process-wide timeline, applies the library integrations that are on, then starts the sampler, and
function tracing if it is asked for. It never
raises into the program: what fails is said in one line on stderr, and the program runs on without it.
"""

from __future__ import annotations

import contextlib
import sys

from ringtrace.client.connecting import launch_connect
from ringtrace.client.integrations import apply as apply_integrations
from ringtrace.client.launch.forked_children import watch_forks
from ringtrace.client.launch.launch_options import LaunchSettings
from ringtrace.client.recording.timelines import Timeline
from ringtrace.client.sampling import start_sampler

__all__ = ["say", "start_recording"]

#: The instant recorded where recording starts.
_STARTED = "ringtrace.recording"


def start_recording(settings: LaunchSettings, process_name: str | None = None) -> Timeline | None:
    """Connect to ``settings.collector`` as ``process_name`` (None: the default name, see ``connect``), apply the
    integrations not turned off, and sample at ``settings.sample_hz``. Returns the timeline, or None if connecting
    failed (said on stderr)."""
    try:
        timeline = launch_connect(
            settings.collector,
            process_name=process_name,
            exit_timeout_s=settings.exit_timeout,
            batch_interval_s=settings.batch_interval,
        )
    except Exception as exc:  # a value the settings' checks let by: the program runs unrecorded
        say(f"not recording: {type(exc).__name__}: {exc}")
        return None
    try:
        apply_integrations(timeline, settings.integrations_on)
    except Exception as exc:  # (each install is guarded in apply; this is the hook itself failing)
        say(f"no library integrations: {type(exc).__name__}: {exc}")
    start_sampler(timeline, settings.sample_hz)  # (0: off; one that cannot start is said in the log)
    if settings.functions:
        _trace_functions(timeline, settings)
    _mark_start(timeline, "start")
    return timeline


def _trace_functions(timeline: Timeline, settings: LaunchSettings) -> None:
    """Function tracing as the settings say, from now until exit (the flusher's exit stops it, and delivers the calls
    still open then)."""
    try:
        from ringtrace.client.functions import trace_functions  # (imported where asked for: see ringtrace.client)

        trace_functions(
            include=settings.function_include,
            exclude=settings.function_exclude,
            min_duration=f"{settings.function_min_duration_ns}ns",
            max_depth=settings.function_max_depth,
            builtins=settings.function_builtins,
            library=settings.function_library,
            timeline=timeline,
        ).start()
    except Exception as exc:  # (another tracer holds the interpreter's hooks, say): the program runs on without it
        say(f"no function tracing: {type(exc).__name__}: {exc}")


def _mark_start(timeline: Timeline, how: str) -> None:
    """An instant where recording starts, here and in each forked child: a process that records nothing else and
    exits at once still has something its exit delivers, so the collector sees it."""
    timeline.instant(_STARTED, how=how)
    watch_forks(timeline, _STARTED)


def say(line: str) -> None:
    """``line`` on stderr, as ringtrace's: what recording with no code change has to say is one line."""
    with contextlib.suppress(Exception):  # no stderr (a daemon, pythonw): nothing to say it on
        print(f"ringtrace: {line}", file=sys.stderr, flush=True)
