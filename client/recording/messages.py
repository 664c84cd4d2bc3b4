"""Messages with priorities, as Snabb's timeline has them: defined once, then logged with up to six values.

    log = tl.message("engine", "info", "processed $tcp, $udp, and $other")
    log(10, 20, 3)       # in the snapshot: "processed tcp(10), udp(20), and other(3)", category "engine"

A ``${name}`` shows its value alone: ``tl.message("app", "info", "${text}")("ready")`` is "ready" in the snapshot.

Priorities, most to least important: ``fatal error warning info debug trace trace+ trace++ trace+++``. A timeline
records the messages up to its priority (``tl.set_priority("debug")``; ``info`` at first), and a collector can change
it for a connected process (a SET_PRIORITY frame). A message whose priority is off costs one attribute test.

Sampling, like Snabb's per-iteration rate: ``tl.sample("trace", fraction=0.01, window_s=0.001)`` turns messages up
to ``trace`` on during a random 1% of 1 ms windows, so an always-on recorder keeps a sample of the detail.

Theory of operation
-------------------
Each distinct ``(category, priority, text)`` is one event kind of the process (shape ``message``, the text and the
priority in its SCHEMA entry, one field per ``$name``), so an event carries only its values. A ``Message`` holds
``enabled``, which its timeline sets whenever its priority changes; when it is off and sampling may turn it on, the
call looks at the sampling window. The values are normalised on the flusher, as arguments are. The C recorder keeps a
message whose category is text and whose values are flat (what the stream encoder packs as they are) as a compact
record, its values already packed (``wire/record_runs.py``), as it keeps such instants.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ringtrace.client.accelerator import speedups
from ringtrace.wire.arg_values import display_text, normalise_values
from ringtrace.wire.message_format import MAX_MESSAGE_VALUES, placeholder_names, priority_level
from ringtrace.wire.model import KINDS
from ringtrace.wire.table_frames import KindSpec

__all__ = ["Message", "Sampling", "message_kind", "set_gate"]

_now = time.monotonic_ns

_kinds: dict[tuple[str, str, str], KindSpec] = {}


def message_kind(category: str, priority: str, text: str) -> KindSpec:
    """The event kind of a message, registered once per ``(category, priority, text)`` in the process.

    Raises:
        ValueError: a bad priority, or more than ``MAX_MESSAGE_VALUES`` placeholders.
    """
    priority_level(priority)
    if not isinstance(text, str) or not isinstance(category, str):
        raise ValueError(f"a message's category and text are str, got {type(category).__name__}, {type(text).__name__}")
    first_line = display_text(text.split("\n", 1)[0])
    names = placeholder_names(first_line)
    if len(names) > MAX_MESSAGE_VALUES:
        raise ValueError(f"a message takes at most {MAX_MESSAGE_VALUES} $values, {first_line!r:.80} has {len(names)}")
    key = (display_text(category), priority, first_line)
    kind = _kinds.get(key)
    if kind is None:  # no lock (nothing a fork could leave held): two threads may each register one, one is kept
        fields = tuple((name, "any") for name in names)
        # The converter is normalise_values itself: the C encoder packs flat values of such kinds without it.
        kind = _kinds.setdefault(key, KINDS.register(key[0], "message", fields, normalise_values, first_line, priority))
    return kind


class Sampling:
    """Which windows of time have sampling on: a random ``fraction`` of windows ``window_ns`` long."""

    __slots__ = ("_on", "_window", "fraction", "level", "window_ns")

    def __init__(self, level: int, fraction: float, window_ns: int) -> None:
        self.level, self.fraction, self.window_ns = level, fraction, window_ns
        self._window = -1
        self._on = False

    def on(self) -> bool:
        window = _now() // self.window_ns
        if window != self._window:  # a race here only decides a window twice, each time at random
            self._window = window
            self._on = random.random() < self.fraction
        return self._on


class _PyMessage:
    """A message defined with ``Timeline.message``: call it with its values to log it (when its priority is on).

    The C accelerator's ``Message`` does the same; ``Message`` is whichever this process runs.
    """

    __slots__ = ("__weakref__", "_events", "_kind_id", "_label", "_sampling", "enabled", "kind", "level")

    def __init__(self, kind: KindSpec, timeline: Any, enabled: bool, level: int) -> None:
        self.kind = kind
        self.level = level
        self.enabled = enabled
        self._kind_id = kind.id
        self._label = kind.name
        #: The buffer to record into; None when it keeps nothing, or is full (then counted).
        self._events: Callable[[], list[Any] | None] = timeline._events_with_room
        self._sampling: Sampling | None = None

    def __call__(self, *values: Any, **named: Any) -> None:
        if named:  # values are positional; named ones are kept after them rather than refused
            values += tuple(named.values())
        if not self.enabled:
            sampling = self._sampling
            if sampling is None or not sampling.on():
                return
        events = self._events()
        if events is not None:
            now = _now()
            events.extend((self._kind_id, self._label, now, now, values))

    def __repr__(self) -> str:
        return f"Message({self.kind!r})"


class _PyMessageOff(_PyMessage):
    """A ``_PyMessage`` whose priority is off and that sampling cannot turn on: its class while so (``set_gate``),
    so that a call costs no more than an empty function's."""

    __slots__ = ()

    def __call__(self, *values: Any, **named: Any) -> None:
        pass


def set_gate(message: Any, enabled: bool, sampling: Sampling | None) -> None:
    """Whether ``message`` records, and the sampling that may turn it on while it does not."""
    message.enabled = enabled
    message._sampling = sampling
    if isinstance(message, _PyMessage):
        message.__class__ = _PyMessageOff if not enabled and sampling is None else _PyMessage


if TYPE_CHECKING or speedups is None:  # noqa: SIM108 (a class for type checkers, not a value)
    Message = _PyMessage
else:
    Message = speedups.Message
