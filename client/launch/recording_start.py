"""Recording started with no code change: the one function ``ringtrace run`` and the fleet switch both call.

It connects the process-wide timeline, applies the library integrations that are on, then starts the sampler. It never
raises into the program: what fails is said in one line on stderr, and the program runs on without it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

from ringtrace.client.connecting import connect
from ringtrace.client.integrations import apply as apply_integrations
from ringtrace.client.launch.forked_children import watch_forks
from ringtrace.client.launch.launch_options import LaunchSettings
from ringtrace.client.recording.timelines import Timeline

__all__ = ["say", "start_recording"]

#: The instant recorded where recording starts.
_STARTED = "ringtrace.recording"
#: The sampler's module (``start_sampler(timeline, hz)``).
_SAMPLER_MODULE = "ringtrace.client.sampling"


def start_recording(settings: LaunchSettings, process_name: str | None = None) -> Timeline | None:
    """Connect to ``settings.collector`` as ``process_name`` (None: the default name, see ``connect``), apply the
    integrations not turned off, and sample at ``settings.sample_hz``. Returns the timeline, or None if connecting
    failed (said on stderr)."""
    try:
        timeline = connect(settings.collector, process_name=process_name)
    except Exception as exc:  # a value the settings' checks let by: the program runs unrecorded
        say(f"not recording: {type(exc).__name__}: {exc}")
        return None
    try:
        apply_integrations(timeline, settings.integrations_on)
    except Exception as exc:  # (each install is guarded in apply; this is the hook itself failing)
        say(f"no library integrations: {type(exc).__name__}: {exc}")
    if settings.sample_hz > 0:
        _start_sampler(timeline, settings.sample_hz)
    _mark_start(timeline, "start")
    return timeline


def _mark_start(timeline: Timeline, how: str) -> None:
    """An instant where recording starts, here and in each forked child: a process that records nothing else and
    exits at once still has something its exit delivers, so the collector sees it."""
    timeline.instant(_STARTED, how=how)
    watch_forks(timeline, _STARTED)


def _start_sampler(timeline: Timeline, sample_hz: float) -> None:
    """The one place the sampler is started."""
    try:
        sampling = importlib.import_module(_SAMPLER_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != _SAMPLER_MODULE:
            say(f"no sampling: {exc}")
        return  # SAMPLER: not in this install yet; once it lands, this is `from ... import start_sampler`
    try:
        sampling.start_sampler(timeline, sample_hz)  # SAMPLER: the call
    except Exception as exc:
        say(f"no sampling: {type(exc).__name__}: {exc}")


def say(line: str) -> None:
    """``line`` on stderr, as ringtrace's: what recording with no code change has to say is one line."""
    with contextlib.suppress(Exception):  # no stderr (a daemon, pythonw): nothing to say it on
        print(f"ringtrace: {line}", file=sys.stderr, flush=True)
