"""The ``logging`` integration: every log record becomes a ringtrace message, at the priority of its level.

Theory of operation
-------------------
Kinds. A message kind is one ``(category, priority, text)``; a log record's text is free (f-strings, ids), so a kind
per rendered text would grow the kind table without bound. Here a kind is one ``(logger name, priority)``, with the
text ``${message}`` and the rendered text (``record.getMessage()``) as its value, and a second one for records with an
exception (``${message} (${exception}: ${exception_text})``): at most 18 kinds per logger, whatever the program logs.
A ``${name}`` shows as its value alone, so a record shows as its text (``lookup failed (KeyError: 'x')``).

Which records. By default, those the program's logging handles (its levels, its filters, ``logging.disable``), up to
the timeline's priority (``set_priority``, or ``POST /priority`` on the collector): only ``Logger.callHandlers`` is
hooked, and a record the program's levels leave out is never created, so it costs what it did without ringtrace.
When the timeline's priority is raised past ``info`` (``debug``, ``trace``...), ``Logger.isEnabledFor`` is widened:
replaced by one that answers as the program's levels do, or yes when the timeline records that level, so
``POST /priority`` debug records the debug records of a program that prints only warnings; going back to ``info`` (or
less) puts the program's ``isEnabledFor`` back (``Timeline.watch_priority``). A record created only for ringtrace
(``_call_handlers``) is recorded and not handed to the program's handlers: what the program prints is unchanged. What
the program did choose is obeyed even then: ``logging.disable``, a disabled logger, the filters of a logger. While
widened, a level the timeline does not record costs one dict lookup and one attribute read more than logging's own
test; while nothing listens to the timeline (closed), nothing is widened. Sampling (``Timeline.sample``) turns on only
records the program lets through. Loggers named ``ringtrace...`` are never recorded (ringtrace's own warnings go where
they went, and a failing hook that logs cannot loop).

Both hooks (``callHandlers``, and ``isEnabledFor`` while widened) are on ``logging.Logger``, after the call frames
``findCaller`` looks at: the file, line and function of a record are the program's as before. A logger class that
overrides one of them is recorded as its override lets it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ringtrace.client.integrations.hook_errors import count_failure
from ringtrace.client.integrations.uncaught_exceptions import exception_text, type_name
from ringtrace.wire.message_format import priority_level

if TYPE_CHECKING:
    from ringtrace.client.recording.messages import Message
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install", "priority_of_level"]

_NAME = "logging"
#: The text of the kinds of records without, and with, an exception.
_TEXT = "${message}"
_TEXT_WITH_EXCEPTION = "${message} (${exception}: ${exception_text})"
#: Lowest level of each priority, most important first; a level below all of them is ``trace+++``.
_FLOORS = (
    (logging.CRITICAL, "fatal"),
    (logging.ERROR, "error"),
    (logging.WARNING, "warning"),
    (logging.INFO, "info"),
    (logging.DEBUG, "debug"),
    (5, "trace"),  # TRACE = 5 is the custom level most libraries that add one use
    (3, "trace+"),
    (2, "trace++"),
)

_timeline: Timeline | None = None
#: Level -> a message of the level's priority, whose ``enabled`` the timeline keeps as its priority says.
_gates: dict[int, Message] = {}
#: (logger name, level, with an exception) -> the message records of that logger and level become.
_messages: dict[tuple[str, int, bool], Message] = {}
#: ``level`` on a thread whose last ``isEnabledFor`` said yes for ringtrace only.
_widened = threading.local()
#: Whether the timeline's priority is past ``info``: ``isEnabledFor`` then says yes to what the timeline records.
_widening = False
#: Whether ``_is_enabled_for`` is on ``logging.Logger`` (maybe under another tool's wrapper of it).
_hooked = False
#: Priorities at most this rank are recorded as the program's levels let them (the timeline's default, ``info``).
_DEFAULT_RANK = priority_level("info")
#: What ``logging.Logger`` had when the integration was installed (logging's own, or another tool's wrapper of them).
_program_is_enabled_for: Callable[[logging.Logger, int], bool] = logging.Logger.isEnabledFor
_program_call_handlers: Callable[[logging.Logger, logging.LogRecord], None] = logging.Logger.callHandlers


def priority_of_level(level: int) -> str:
    """The ringtrace priority of a logging level: CRITICAL is ``fatal`` ... DEBUG ``debug``, below DEBUG ``trace``
    down to ``trace+++``; a custom level takes the priority of the standard level at or below it."""
    for floor, priority in _FLOORS:
        if level >= floor:
            return priority
    return "trace+++"


def install(timeline: Timeline) -> None:
    """Record the log records of every logger into ``timeline`` (idempotent: a second call changes nothing)."""
    global _timeline, _program_is_enabled_for, _program_call_handlers
    if _timeline is not None:
        return
    _timeline = timeline
    _program_is_enabled_for, _program_call_handlers = logging.Logger.isEnabledFor, logging.Logger.callHandlers
    for level in range(logging.CRITICAL + 1):  # made now, not under whatever lock a first log call holds
        _gate(level)
    logging.Logger.callHandlers = _call_handlers  # type: ignore[method-assign]
    timeline.watch_priority(_on_priority)
    _on_priority(timeline.priority)


def _on_priority(priority: str) -> None:
    """Widen ``Logger.isEnabledFor`` while the timeline's priority is past ``info``; put the program's back after."""
    global _widening, _hooked, _program_is_enabled_for
    try:
        widening = priority_level(priority) > _DEFAULT_RANK
        if widening and not _hooked:
            _program_is_enabled_for = logging.Logger.isEnabledFor  # logging's own, or another tool's put there since
            logging.Logger.isEnabledFor = _is_enabled_for  # type: ignore[method-assign]
            _hooked = True
        elif not widening and logging.Logger.isEnabledFor is _is_enabled_for:
            logging.Logger.isEnabledFor = _program_is_enabled_for  # type: ignore[method-assign,assignment]
            _hooked = False
        # Another tool's wrapper of ours stays (ours stays under it: wrapping that again would call itself); ours
        # then answers as the program's levels do until the priority is past info again.
        _widening = widening
    except Exception as exc:
        count_failure(_NAME, exc)


def _is_enabled_for(self: logging.Logger, level: int) -> bool:
    """``Logger.isEnabledFor`` while widened: the program's answer, or yes when the timeline records ``level``."""
    if self.disabled:
        return False
    try:
        enabled: bool = self._cache[level]  # type: ignore[attr-defined]  # the program's answers, as logging caches them
    except KeyError:
        enabled = _program_is_enabled_for(self, level)
    if enabled or not _widening:
        return enabled
    try:
        try:
            gate = _gates[level]
        except KeyError:
            gate = _gate(level)
        if not gate.enabled or self.manager.disable >= level or self.name.startswith("ringtrace"):
            return False
        if not _timeline._listening:  # type: ignore[union-attr]  # closed, or never connected: no record for nothing
            return False
        _widened.level = level
        return True
    except Exception as exc:
        count_failure(_NAME, exc)
        return False


def _gate(level: int) -> Message:
    assert _timeline is not None
    return _gates.setdefault(level, _timeline.message("logging", priority_of_level(level), _TEXT))


def _call_handlers(self: logging.Logger, record: logging.LogRecord) -> None:
    """``Logger.callHandlers``: record ``record``, then hand it to the program's handlers unless it was created only
    for ringtrace."""
    widened = _widened.__dict__.pop("level", None)
    try:
        _record(record)
    except Exception as exc:
        count_failure(_NAME, exc)
    # A record below the program's level that came through isEnabledFor only because of ringtrace. (One handed to
    # ``Logger.handle`` directly, from a socket say, goes on to the handlers whatever its level, as it always did,
    # unless the last isEnabledFor of its thread, for the same level, said yes only because of ringtrace.)
    if widened is not None and widened == record.levelno and not _program_is_enabled_for(self, record.levelno):
        return
    _program_call_handlers(self, record)


def _record(record: logging.LogRecord) -> None:
    name, level = record.name, record.levelno
    if not isinstance(name, str) or name.startswith("ringtrace"):
        return
    exc_info = record.exc_info
    with_exception = isinstance(exc_info, tuple) and exc_info[0] is not None
    message = _messages.get((name, level, with_exception)) or _message(name, level, with_exception)
    if (not message.enabled and message._sampling is None) or not _timeline._listening:  # type: ignore[union-attr]
        return  # its priority is off, or nothing listens: nothing rendered
    try:
        text = record.getMessage()
    except Exception:  # the program's mistake (arguments that do not fit the format): its handlers say it, if any
        text = exception_text(record.msg)
    if with_exception:
        assert isinstance(exc_info, tuple)
        message(text, type_name(exc_info[0]), exception_text(exc_info[1]))
    else:
        message(text)


def _message(name: str, level: int, with_exception: bool) -> Message:
    assert _timeline is not None
    made = _timeline.message(name, priority_of_level(level), _TEXT_WITH_EXCEPTION if with_exception else _TEXT)
    return _messages.setdefault((name, level, with_exception), made)
