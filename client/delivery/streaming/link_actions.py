"""What the link asks its driver to do (``Link``'s answers to the events it is told of): connect, close, answer a
flush request or the collector's FLUSH, hand on a SET_PRIORITY, log."""

from __future__ import annotations

from dataclasses import dataclass

from ringtrace.wire.frames import SetPriority

__all__ = ["Action", "AnswerFlush", "Close", "Connect", "FlushDone", "Log", "Prioritize"]


@dataclass(frozen=True, slots=True)
class Connect:
    """Open a connection now (blocking at most ``connect_timeout_s``), then call ``connected`` or
    ``connect_failed``."""


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection's socket: the link is done with it."""


@dataclass(frozen=True, slots=True)
class FlushDone:
    """The answer to the flush request ``request`` (``request_flush``'s id)."""

    request: int
    ok: bool


@dataclass(frozen=True, slots=True)
class AnswerFlush:
    """The collector asked for a flush: hand every timeline's events over (they come back through ``enqueue``),
    then call ``swept``, which answers it behind them and reads on."""


@dataclass(frozen=True, slots=True)
class Prioritize:
    """The collector's SET_PRIORITY, for the timelines it names."""

    frame: SetPriority


@dataclass(frozen=True, slots=True)
class Log:
    level: int
    text: str


Action = Connect | Close | FlushDone | AnswerFlush | Prioritize | Log
